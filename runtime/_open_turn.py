"""The open-turn record: which step a conversation's running (or interrupted, or parked)
turn is in, stored with the conversation in the same commit as the boundary it describes.

A turn that starts writes one with its user message's save; each later boundary's save
replaces it with the step that follows it; the turn's final save marks it ``DONE``. So
after a crash the stored record says what the turn had finished: its user message
(``USER``: the model call was next), the model's answer (``ANSWER``: its tool calls were
next), or part of a tool round (``TOOLS``: ``answered`` names the calls whose results are
saved). A turn waiting for a person's approval (``APPROVAL``) keeps the calls it waits for
in ``pending`` and the decisions taken so far in ``decisions``, and the messages offered
to it before it parked in ``offers`` (added and answered once the last decision lets the
turn go on, after the approved calls' results). A record written before
this existed has none (``ConversationPersistenceSnapshot.turn`` is None).

Plain data only (frozen msgspec structs): the stores keep it in their per-save header
(LMDB's header record, PostgreSQL's version row, the memory store's snapshot), never in
the body, so a boundary save still writes the body only when it changed.
"""

from __future__ import annotations

import datetime as dt
from typing import Final, Literal

import msgspec

__all__ = ["ApprovalDecision", "OpenTurn", "PendingCall", "TurnStep"]


class TurnStep:
    """The steps an ``OpenTurn`` records: what the last durable boundary of a turn was (what
    comes next). Plain strings (a record's step is one of them), so a save encodes one
    without an enum look-up."""

    USER: Final = "user"  # the user's message is saved; the model call is next
    ANSWER: Final = "answer"  # a model answer with tool calls is saved; its calls are next
    TOOLS: Final = "tools"  # a tool round runs; ``answered`` has a saved result each
    APPROVAL: Final = "approval"  # parked: ``pending`` calls wait for a person's decision
    DONE: Final = "done"  # the turn ended with the model's last word


Step = Literal["user", "answer", "tools", "approval", "done"]


class PendingCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call waiting for a person's approval: its id, tool, arguments (the JSON text
    the model wrote) and when it was asked for."""

    call_id: str
    tool: str
    arguments: str
    requested_at: dt.datetime


class ApprovalDecision(msgspec.Struct, frozen=True, kw_only=True):
    """A person's decision on one pending call: approved, or denied with ``reason``."""

    call_id: str
    approved: bool
    reason: str = ""
    decided_at: dt.datetime


class OpenTurn(msgspec.Struct, frozen=True, omit_defaults=True):
    """A conversation's turn as its last save left it.

    Attributes:
        id: the turn's id (every event of the turn carries it); a resumed turn keeps it.
        step: the last boundary made durable (one of ``TurnStep``'s).
        start: the index of the turn's first message (its user message) in the
            conversation: a follower joining after a restart is replayed from there.
        answered: on ``TOOLS``, the ids of the round's calls whose results are saved.
        pending: on ``APPROVAL``, the calls waiting for a decision, in call order.
        decisions: on ``APPROVAL``, the decisions taken so far, in the order taken.
        offers: the messages offered to the turn that it has not added yet, in arrival
            order: kept from ``APPROVAL`` until the last decision's round has its results.
    """

    id: str
    step: Step
    start: int = 0
    answered: tuple[str, ...] = ()
    pending: tuple[PendingCall, ...] = ()
    decisions: tuple[ApprovalDecision, ...] = ()
    offers: tuple[str, ...] = ()

    @property
    def open(self) -> bool:
        """True while the turn has not ended (its process may have died in it)."""
        return self.step != TurnStep.DONE

    def parked(self) -> frozenset[str]:
        """The ids of the calls a restore must leave unanswered: on ``APPROVAL``, every
        pending call (decided ones get their result when the turn goes on)."""
        if self.step != TurnStep.APPROVAL:
            return frozenset()
        return frozenset(p.call_id for p in self.pending)

    def undecided(self) -> list[PendingCall]:
        """The pending calls no decision answers yet, in call order."""
        decided = {d.call_id for d in self.decisions}
        return [p for p in self.pending if p.call_id not in decided]
