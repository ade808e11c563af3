"""Tool calls that wait for a person's approval: the turn parks, any process decides.

A model answer whose calls include some that need approval (``Agent(needs_approval=...)``,
``FunctionTool(..., needs_approval=True)``) is saved with the open-turn record on
``APPROVAL`` listing them (one commit: the answer and its pending calls); the calls that
need none run as a round (saved as each finishes, the record keeping the pending ones);
the turn publishes ``ApprovalRequested`` and returns a ``Reply`` whose ``pending`` lists
them, and the lease is released. A restore leaves parked calls unanswered.

A decision is a turn of its own (``decide_steps``): obtain, check the call is pending and
undecided (typed errors, nothing saved), add the decision to the record and save it: the
save names the version it loaded, so of two processes deciding from the same version one
wins and the other's save is refused (``Chat`` then reloads and reports the call decided).
While calls stay undecided that is all. The last decision adds the denied calls' error
results (the reason for the model to read), moves the record to ``TOOLS`` and saves, in
one commit; then the approved calls run as a round and the turn goes on with the model, as
any turn does. A crash while they run leaves them as any interrupted call (the restore's
interrupted result; ``rerun_on_recovery`` runs one again on resume).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any

import msgspec
from loguru import logger

from parlour.runtime import (
    ApprovalDecision,
    Cancellation,
    ConversationContext,
    LLMResponse,
    OpenTurn,
    OutgoingMessage,
    PendingCall,
    ToolContext,
    TurnStep,
)
from parlour.runtime.blocks import ToolResultBlock, ToolUseBlock

from ._call_context import idempotency_key
from ._events import (
    AlreadyDecidedError,
    ApprovalDecided,
    ApprovalRequested,
    ApprovalsPendingError,
    NoSuchApprovalError,
    PendingApproval,
    Reply,
)
from ._otel import approval_event
from ._plan import Steps, TurnPlan
from ._record import with_offers
from ._rounds import add, run_tools

__all__ = [
    "DECIDE_ATTEMPTS",
    "MAX_REASON",
    "Approval",
    "approval_rule",
    "check_decision",
    "check_no_pending",
    "checked_decision",
    "decide_steps",
    "park",
    "pending_of",
    "with_approvals",
]

NeedsApproval = Callable[[str, str, "ToolContext[Any]"], bool]
MAX_REASON = 4096  # characters: a reason is read by the model and by people, not a document
MAX_CALL_ID = 256  # characters: providers' call ids are far shorter
DECIDE_ATTEMPTS = 8  # a decision whose save another process beat looks again this often


def checked_decision(call_ids: Sequence[str] | None, reason: str) -> None:
    """Refuse, before anything is read or stored, a call id or a reason that is not short
    valid text.

    Raises:
        ValueError: an id that is empty, longer than 256 characters or not valid text
            (a lone surrogate), a reason over 4096 characters or not valid text.
    """
    for call_id in call_ids or ():
        if not isinstance(call_id, str) or not 0 < len(call_id) <= MAX_CALL_ID:
            raise ValueError(f"A call id is a string of 1 to {MAX_CALL_ID} characters.")
        _text(call_id, "A call id")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ValueError(f"A reason is a string of at most {MAX_REASON} characters.")
    _text(reason, "A reason")


def _text(value: str, what: str) -> None:
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} must be valid text: {exc.reason} at {exc.start}.") from exc


class Approval:
    """Which calls need a person's approval: those of the named tools, and those the
    predicate (given the tool's name, the arguments' JSON text and the call's
    ``ToolContext``) holds."""

    __slots__ = ("names", "predicate")

    def __init__(self, names: frozenset[str], predicate: NeedsApproval | None) -> None:
        self.names, self.predicate = names, predicate

    def held(self, plan: TurnPlan, calls: Sequence[ToolUseBlock]) -> list[ToolUseBlock]:
        names, predicate = self.names, self.predicate
        return [
            c
            for c in calls
            if c.name in names
            or (predicate is not None and predicate(c.name, c.input_json, _ctx(plan, c)))
        ]


def approval_rule(
    needs_approval: Iterable[str] | NeedsApproval | None,
    declared: frozenset[str],
    tools: Iterable[str],
) -> Approval | None:
    """The agent's rule, or None when no call can need approval (the turn checks nothing).

    Raises:
        ValueError: ``needs_approval`` names a tool the agent does not have.
    """
    predicate: NeedsApproval | None = None
    named: frozenset[str] = frozenset()
    if callable(needs_approval):
        predicate = needs_approval
    elif needs_approval is not None:
        named = frozenset(needs_approval)
    if unknown := sorted(named - set(tools)):
        raise ValueError(
            f"needs_approval names {', '.join(unknown)}, which no tool of the agent is."
        )
    names = named | declared
    return Approval(names, predicate) if names or predicate is not None else None


def _ctx(plan: TurnPlan, call: ToolUseBlock) -> ToolContext[Any]:
    thinker = plan.thinker
    cid = thinker.conversation_id
    return ToolContext(
        user_id=thinker.user_id,
        conversation_id=cid,
        turn_id=plan.turn_id,
        call_id=call.id,
        idempotency_key=idempotency_key(cid, call.id),
        deps=plan.deps,
        logger=logger.bind(conversation_id=cid, turn_id=plan.turn_id, call_id=call.id),
        cancelled=Cancellation(),
    )


def _shown(pending: Iterable[PendingCall]) -> list[PendingApproval]:
    return [PendingApproval(call_id=p.call_id, tool=p.tool, arguments=p.arguments) for p in pending]


def pending_of(record: OpenTurn | None) -> list[PendingApproval]:
    """The calls a stored record waits on, undecided, in call order."""
    if record is None or record.step != TurnStep.APPROVAL:
        return []
    return _shown(record.undecided())


# -- parking ------------------------------------------------------------------------------------


def park(
    context: ConversationContext,
    plan: TurnPlan,
    response: LLMResponse,
    calls: list[ToolUseBlock],
    held: list[ToolUseBlock],
) -> Steps:
    """Save the answer with its held calls pending, run the others, and end the turn parked.
    The inbox closes (a later offer is refused); the offers it held stay on the record."""
    now = dt.datetime.now(dt.UTC)
    pending = tuple(
        PendingCall(call_id=c.id, tool=c.name, arguments=c.input_json, requested_at=now)
        for c in held
    )
    plan.decided = None  # a new round of approvals: the earlier ones are answered
    context.open_turn = OpenTurn(plan.turn_id, TurnStep.APPROVAL, plan.start, (), pending)
    yield plan.saving(context)  # waited: the answer and its pending calls, one commit
    waiting = {c.id for c in held}
    free = [c for c in calls if c.id not in waiting]
    if free:
        yield from run_tools(context, plan, free)
    if offers := plan.state.close():  # offered before the turn parked: kept, not dropped
        parked = context.open_turn
        assert parked is not None  # the record above, with its free calls' results noted
        context.open_turn = with_offers(parked, offers)
        yield plan.saving(context)  # waited: the offerers were told the turn took them
    shown = tuple(_shown(pending))
    for p in pending:
        approval_event("requested", p.tool, p.call_id, 0.0)
    yield ApprovalRequested(pending=shown)
    return Reply(text=response.text, usage=plan.usage, messages=list(plan.added), pending=shown)


def check_no_pending(context: ConversationContext) -> None:
    """Refuse a new message or a resume while calls wait for approval (nothing changed)."""
    waiting = pending_of(context.open_turn)
    if waiting:
        ids = [p.call_id for p in waiting]
        raise ApprovalsPendingError(
            f"Conversation {context.conversation_id} has tool calls waiting for approval "
            f"({', '.join(f'{p.tool} {p.call_id}' for p in waiting)}); approve or deny them "
            "first (deny_all denies every one).",
            ids,
        )


# -- deciding -----------------------------------------------------------------------------------


def check_decision(context: ConversationContext, call_ids: Sequence[str] | None) -> list[str]:
    """The calls to decide (``None``: every undecided one), each pending and undecided.

    Raises:
        NoSuchApprovalError: nothing is pending, or an id names no pending call.
        AlreadyDecidedError: a call was decided already.
    """
    record, cid = context.open_turn, context.conversation_id
    decided = {d.call_id for d in record.decisions} if record is not None else set()
    if again := [i for i in call_ids or () if i in decided]:  # the turn keeps its decisions
        raise AlreadyDecidedError(
            f"Tool call {_listed(again)} on conversation {cid} was already decided.", again
        )
    parked = record is not None and record.step == TurnStep.APPROVAL
    pending = {p.call_id for p in record.pending} if record is not None and parked else set()
    if not pending:
        raise NoSuchApprovalError(
            f"Conversation {cid} has no tool call waiting for approval.", list(call_ids or [])
        )
    assert record is not None
    wanted = [p.call_id for p in record.undecided()] if call_ids is None else list(call_ids)
    if unknown := [i for i in wanted if i not in pending]:
        raise NoSuchApprovalError(
            f"Conversation {cid} has no tool call {_listed(unknown)} waiting for approval.", unknown
        )
    return wanted


def with_approvals(record: OpenTurn, decided: OpenTurn) -> OpenTurn:
    """``record`` carrying the pending calls and decisions of ``decided`` (the same turn)."""
    return OpenTurn(
        record.id, record.step, record.start, record.answered, decided.pending, decided.decisions
    )


def _listed(ids: list[str]) -> str:
    return ", ".join(repr(i[:80]) for i in ids)


def decide_steps(
    plan: TurnPlan, context: ConversationContext, call_ids: list[str], approved: bool, reason: str
) -> Generator[Any, Any, Reply | None]:
    """Record the decisions (saved: the version fence applies each once); when none stays
    undecided, answer the denied calls and run the approved ones, and return None (the turn
    goes on with the model); else a reply listing what is still pending."""
    record = context.open_turn
    assert record is not None
    now = dt.datetime.now(dt.UTC)
    made = tuple(
        ApprovalDecision(call_id=i, approved=approved, reason=reason, decided_at=now)
        for i in call_ids
    )
    record = msgspec.structs.replace(record, decisions=record.decisions + made)
    asked = {p.call_id: p for p in record.pending}
    for d in made:
        waited = (now - asked[d.call_id].requested_at).total_seconds()
        approval_event(
            "approved" if approved else "denied", asked[d.call_id].tool, d.call_id, waited
        )
    left = record.undecided()
    if left:  # parked still: offers made meanwhile stay on the record too
        offers = plan.state.close()
        context.open_turn = with_offers(record, offers) if offers else record
        yield plan.saving(context)  # waited: the decision, once (the save's version fence)
        yield from _announced(made, asked)
        return Reply(text="", usage=plan.usage, messages=[], pending=tuple(_shown(left)))
    yield from _apply(context, plan, record, _announced(made, asked))
    return None


def _announced(
    made: Iterable[ApprovalDecision], asked: dict[str, PendingCall]
) -> Generator[ApprovalDecided, Any, None]:
    """Each decision as an event for the turn's followers (once its save has succeeded: a
    decision another process beat is never announced)."""
    for d in made:
        tool = asked[d.call_id].tool
        yield ApprovalDecided(call_id=d.call_id, tool=tool, approved=d.approved, reason=d.reason)


def _apply(
    context: ConversationContext,
    plan: TurnPlan,
    record: OpenTurn,
    announced: Generator[ApprovalDecided, Any, None],
) -> Steps:
    """The last decision: denied calls answered with their reason and the record moved on,
    in one save, then ``announced``; then the approved calls run as a round."""
    calls = _calls_of(context, record)
    denied = [d for d in record.decisions if not d.approved]
    results = [
        ToolResultBlock(
            tool_use_id=d.call_id,
            content=f"A person denied this call to {calls[d.call_id].name}"
            + (f": {d.reason}" if d.reason else "."),
            is_error=True,
        )
        for d in denied
        if d.call_id in calls
    ]
    if results:
        last = context.messages[-1]
        if (
            type(last) is OutgoingMessage
            and last.blocks
            and type(last.blocks[0]) is ToolResultBlock
        ):
            last.blocks.extend(results)  # the round's results message (the free calls ran)
        else:
            add(context, plan, OutgoingMessage(blocks=results, compactable=True))
    context.open_turn = msgspec.structs.replace(record, step=TurnStep.TOOLS)  # offers kept
    plan.decided = record
    yield plan.saving(context)  # waited: every decision applied before an approved call runs
    yield from announced
    approved = [calls[d.call_id] for d in record.decisions if d.approved and d.call_id in calls]
    if approved:
        yield from _join_round(context, plan, approved)
    return Reply(text="", usage=plan.usage, messages=[])


def _join_round(context: ConversationContext, plan: TurnPlan, calls: list[ToolUseBlock]) -> Steps:
    """Run ``calls`` whose results join the round's results message when there is one."""
    last = context.messages[-1]
    if type(last) is OutgoingMessage and last.blocks and type(last.blocks[0]) is ToolResultBlock:
        yield from run_tools(context, plan, calls, into=last)
    else:
        yield from run_tools(context, plan, calls)
    return Reply(text="", usage=plan.usage, messages=[])


def _calls_of(context: ConversationContext, record: OpenTurn) -> dict[str, ToolUseBlock]:
    """The pending calls by id, the latest of each id, found from the end (not from the
    record's start: one saved before compactions moved it may point past them)."""
    wanted = {p.call_id for p in record.pending}
    found: dict[str, ToolUseBlock] = {}
    for m in reversed(context.messages):
        for b in m.blocks:
            if type(b) is ToolUseBlock and b.id in wanted and b.id not in found:
                found[b.id] = b
        if len(found) == len(wanted):
            break
    return found
