"""The turn's side of the open-turn record (``parlour.runtime.OpenTurn``): the turn id, the
step each boundary save records, and the events a resumed turn replays from it.

The record rides in the save of the boundary it describes (it is a field of the context's
snapshot, which the stores keep beside the body): no extra commit. ``mark`` sets it just
before a boundary's save; the turn's final save marks it ``DONE``.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Sequence
from typing import Literal

import msgspec

from parlour.runtime import ConversationContext, IncomingMessage, Message, OpenTurn, TurnStep
from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock

from .._thinker import Event
from ._events import TextDelta, ToolCallFinished, ToolCallStarted
from ._plan import TurnPlan

__all__ = ["kept_offers", "mark", "mark_round", "moved", "new_turn_id", "replayed", "with_offers"]

Step = Literal["user", "answer", "tools", "approval", "done"]  # ``OpenTurn.step``'s
_PROCESS = f"turn-{secrets.token_hex(6)}-"  # drawn once: an id costs a counter step
_COUNT = itertools.count(1)


def new_turn_id() -> str:
    """A fresh turn id: unique in this process, and across processes with the 48 random
    bits drawn at import."""
    return _PROCESS + str(next(_COUNT))


def mark(context: ConversationContext, plan: TurnPlan, step: Step) -> None:
    """Record ``step`` as the turn's last durable boundary (saved with the next save)."""
    context.open_turn = OpenTurn(plan.turn_id, step, plan.start)


def mark_round(context: ConversationContext, plan: TurnPlan) -> None:
    """Record a tool round whose results message (the last message) answers the calls it
    holds so far (a turn with calls pending or decided keeps its step and approvals)."""
    answered = tuple(
        b.tool_use_id for b in context.messages[-1].blocks if type(b) is ToolResultBlock
    )
    prior = context.open_turn
    if prior is not None and prior.id == plan.turn_id and prior.pending:  # keep the approvals
        step = prior.step if prior.step == TurnStep.APPROVAL else TurnStep.TOOLS
        context.open_turn = msgspec.structs.replace(prior, step=step, answered=answered)
        return
    context.open_turn = OpenTurn(plan.turn_id, TurnStep.TOOLS, plan.start, answered)


def moved(context: ConversationContext, plan: TurnPlan, turn: Sequence[Message]) -> None:
    """After a compaction that may have collapsed messages before the turn, start the turn
    (whose messages were ``turn``) at its first message still there, the same object (its
    user message is never compacted), in the plan and in this turn's open record: the
    approvals find the calls they wait on from there, a resume replays from there."""
    where = {id(m): i for i, m in enumerate(context.messages)}
    plan.start = next((where[id(m)] for m in turn if id(m) in where), len(context.messages))
    record = context.open_turn
    if record is not None and record.id == plan.turn_id and record.start != plan.start:
        context.open_turn = msgspec.structs.replace(record, start=plan.start)


def with_offers(record: OpenTurn, offers: Sequence[str]) -> OpenTurn:
    """``record`` keeping ``offers`` too: the messages offered to a turn that parks, added
    and answered when it goes on (``kept_offers``)."""
    return msgspec.structs.replace(record, offers=(*record.offers, *offers))


def kept_offers(context: ConversationContext) -> tuple[str, ...]:
    """The offers the open-turn record keeps, taken off it: the caller adds them as the
    user's messages before the next save, so they are stored once, in one commit."""
    record = context.open_turn
    if record is None or not record.offers:
        return ()
    context.open_turn = msgspec.structs.replace(record, offers=())
    return record.offers


def replayed(messages: Sequence[Message]) -> list[Event]:
    """The events of a turn's durable steps, from its stored messages: each model answer's
    text and calls, each saved result (a resumed turn publishes them first, so a follower
    that joins it after a restart sees the whole turn)."""
    names: dict[str, str] = {}
    events: list[Event] = []
    for message in messages:
        if isinstance(message, IncomingMessage):
            text = "".join(b.text for b in message.blocks if type(b) is TextBlock)
            if text:
                events.append(TextDelta(text=text))
            for call in message.blocks:
                if type(call) is ToolUseBlock:
                    names[call.id] = call.name
                    events.append(
                        ToolCallStarted(call_id=call.id, name=call.name, arguments=call.input_json)
                    )
            continue
        events.extend(
            ToolCallFinished(
                call_id=b.tool_use_id,
                name=names.get(b.tool_use_id, ""),
                content=b.content,
                is_error=b.is_error,
            )
            for b in message.blocks
            if type(b) is ToolResultBlock
        )
    return events
