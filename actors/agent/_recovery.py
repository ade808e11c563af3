"""How a turn picks up an interrupted one: a ``resume`` continues it under its own turn id
(its durable steps replayed to followers first, the restore's repairs saved before the
model call); a new message after a crash recovers the same way first, under its new id.
Offers the interrupted turn's record still kept (it was cut short after its last decision)
are added after the repaired results, before anything new."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from parlour.runtime import ConversationContext, IncomingMessage, OutgoingMessage, TurnStep
from parlour.runtime.blocks import ToolResultBlock, ToolUseBlock
from parlour.runtime.errors import IllegalStateError

from ._approvals import check_no_pending
from ._events import Recovered
from ._plan import TurnPlan
from ._record import kept_offers, mark, mark_round, new_turn_id, replayed
from ._rounds import add_offers, recover

__all__ = ["begin", "pick_up", "resume"]


def begin(plan: TurnPlan, turn_id: str, start: int) -> None:
    plan.turn_id = plan.state.turn_id = turn_id
    plan.start = start


def pick_up(context: ConversationContext, plan: TurnPlan) -> Generator[Any, Any, Recovered | None]:
    """A new turn's start when the last turn was cut short (its record open, or a record
    from before records whose last round holds interrupted results): the recovery a
    ``resume`` would make first, under the new turn's id."""
    begin(plan, new_turn_id(), len(context.messages))
    recovered = yield from recover(context, plan, always=context.open_turn is not None)
    add_offers(context, plan, kept_offers(context))
    return recovered


def resume(context: ConversationContext, plan: TurnPlan) -> Generator[Any, Any, Recovered | None]:
    """A resumed turn's start: it keeps the interrupted turn's id and first replays the
    steps it made durable (a follower joining now sees the whole turn), then recovers, and
    saves before the model is called (the restore's interrupted answers included)."""
    check_no_pending(context)
    _check_resumable(context)
    prior = context.open_turn
    if prior is not None:
        begin(plan, prior.id, prior.start)
        yield from replayed(context.messages[prior.start :])
    else:
        begin(plan, new_turn_id(), len(context.messages))
    recovered = yield from recover(context, plan, always=prior is not None)
    add_offers(context, plan, kept_offers(context))
    last = context.messages[-1]
    if type(last) is OutgoingMessage and last.blocks and type(last.blocks[0]) is ToolResultBlock:
        mark_round(context, plan)
    else:
        mark(context, plan, TurnStep.USER)
    yield plan.saving(context)  # waited: the repaired results durable before the model call
    return recovered


def _check_resumable(context: ConversationContext) -> None:
    """Refuse to resume a conversation whose last turn ended with the model's answer (its
    open-turn record says so; a record from before records: its last message is that)."""
    last = context.messages[-1] if context.messages else None
    record = context.open_turn
    if record is not None:
        ended = not record.open
    else:
        ended = isinstance(last, IncomingMessage) and not any(
            isinstance(b, ToolUseBlock) for b in last.blocks
        )
    if last is None or ended:
        raise IllegalStateError(
            f"Conversation {context.conversation_id} has no interrupted turn to resume."
        )
