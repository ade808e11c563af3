"""The ``ToolContext`` a tool call gets when its function asks for one, and the turn's side of
it: the turn id and every call's ``Cancellation``.

Nothing here runs for a turn whose tools take no context: the turn's ``CallScope`` is made
when its first such call is about to run, so a turn without one pays nothing. The turn id
is the turn's own (``TurnPlan.turn_id``, the open-turn record's: a resumed turn keeps it).
Contexts are made in the driver's thread, before the calls start.

The idempotency key is the first 32 hex digits of the SHA-256 of the conversation id, a NUL
and the call id: the same whenever the same call of the same conversation runs (the model's
call ids are unique within a conversation), different for every other call, and it names
neither the user nor the conversation to the service it is handed to.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

from loguru import logger

from parlour.runtime import Cancellation, ToolContext
from parlour.runtime.blocks import ToolUseBlock

from ._joiners import AgentThinker
from ._plan import TurnPlan
from ._tools import Contexts

__all__ = ["CallScope", "cancel_calls", "contexts_for", "idempotency_key"]


def idempotency_key(conversation_id: str, call_id: str) -> str:
    """The call's key: stable across re-runs of the call, distinct between calls."""
    digest = hashlib.sha256(f"{conversation_id}\0{call_id}".encode())
    return digest.hexdigest()[:32]


class CallScope:
    """One turn's tool-facing state: its id, and the cancellation of each call given a
    context (set all at once when the turn is cancelled)."""

    __slots__ = ("_guard", "cancellations", "cancelled", "thinker", "turn_id")

    def __init__(self, plan: TurnPlan) -> None:
        self.turn_id = plan.turn_id
        self.cancellations: list[Cancellation] = []
        self.thinker: AgentThinker = plan.thinker
        self.cancelled: str | None = None  # why the turn was cancelled, once it was
        self._guard = threading.Lock()  # a cancel from another thread sees every call

    def cancellation(self) -> Cancellation:
        """A new call's cancellation, already set when the turn was cancelled."""
        made = Cancellation()
        with self._guard:
            self.cancellations.append(made)
            reason = self.cancelled
        if reason is not None:
            made.set(reason)
        return made

    def cancel(self, reason: str) -> None:
        """From any thread: every call of the turn, running or to come, is cancelled."""
        with self._guard:
            if self.cancelled is None:
                self.cancelled = reason
            made = list(self.cancellations)
        for cancellation in made:
            cancellation.set(reason)

    def on_release(self) -> None:
        """The thinker's cancel hook while the sync path runs tools (a force release)."""
        self.cancel(self.thinker.cancelled or "the turn was cancelled")


def contexts_for(plan: TurnPlan, calls: Sequence[ToolUseBlock]) -> Contexts:
    """A context for each call of a tool that takes one (None for the others), or None when
    no call does; the turn's scope is made on first use."""
    wanted = plan.tools.contextual
    if not wanted or all(call.name not in wanted for call in calls):
        return None
    scope: CallScope | None = plan.call_scope
    thinker = plan.thinker
    if scope is None:
        scope = plan.call_scope = CallScope(plan)
        if thinker.cancelled is not None:  # a cancel that came before the scope was there
            scope.cancel(thinker.cancelled)
    user, cid, turn = thinker.user_id, thinker.conversation_id, scope.turn_id
    return [
        ToolContext(
            user_id=user,
            conversation_id=cid,
            turn_id=turn,
            call_id=call.id,
            idempotency_key=idempotency_key(cid, call.id),
            deps=plan.deps,
            logger=logger.bind(conversation_id=cid, turn_id=turn, call_id=call.id),
            cancelled=scope.cancellation(),
        )
        if call.name in wanted
        else None
        for call in calls
    ]


def cancel_calls(plan: TurnPlan, reason: str) -> None:
    """Tell the turn's calls that took a context that the turn was cancelled (from any
    thread; nothing when none took one)."""
    scope = plan.call_scope
    if scope is not None:
        scope.cancel(reason)
