"""The turn loop, written once as a generator of effects that two drivers perform.

``turn_steps`` is the spec's save discipline with no I/O of its own: it yields an effect
(``Obtain``, ``Save``, ``Compact``, ``CallModel``, ``RunTools``, ``Pause``, ``Release``)
and is sent the effect's result, or has the effect's exception thrown into it; it also
yields the events it reports. The sync driver performs effects in the calling thread, the
async driver on the event loop without blocking it (``_drive.py``); both run exactly this
logic.

A turn: obtain; add the user message (non-compactable); save. Then up to ``max_rounds``
times: check for cancellation, fit the conversation to its window (a compaction is saved
at the next boundary like any other change), call the model (retryable errors retried
with backoff within the turn's budget, a truncation escalated once, each retry announced
by ``Restarted``; a call that would pass a usage limit is not made), add the answer, save;
stop if it went past a usage limit, else run its tool calls, add the results as one
outgoing message (compactable), save, and take offered messages. With no more tool calls,
offers are taken (or the inbox closed) and each taken offer is answered in the same turn.
A failed or cancelled turn gives every pending tool call an error result, saves, and
raises. The lease is always released.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, Final

import msgspec
from loguru import logger

from parlour.runtime import (
    ConversationContext,
    IncomingMessage,
    LLMResponse,
    OpenTurn,
    OutgoingMessage,
    TurnStep,
    dangling_calls,
)
from parlour.runtime.blocks import ContentBlock, TextBlock, ToolResultBlock
from parlour.runtime.compaction import FitReport
from parlour.runtime.errors import (
    OutputTruncationRetry,
    RetryableLLMError,
    StaleVersionError,
    UncorrectableLLMError,
)

from ._approvals import check_decision, check_no_pending, decide_steps, park, with_approvals
from ._effects import CallModel, Compact, Obtain, Pause, Release
from ._events import (
    ApprovalError,
    Compacted,
    OfferAccepted,
    Reply,
    Restarted,
    TurnCancelledError,
    TurnError,
    add_usage,
)
from ._joiners import AgentThinker
from ._limits import check_after, check_before, needs_estimate
from ._otel import compaction_event
from ._plan import NO_USAGE, Steps, TurnPlan
from ._record import kept_offers, mark, mark_round, moved, new_turn_id, with_offers
from ._recovery import begin, pick_up, resume
from ._rounds import add as _add
from ._rounds import add_offers, check_said, run_tools, user_message

OBJECTIVE_KEY = "agent"


# -- the turn -----------------------------------------------------------------------------------


_OBTAIN, _RELEASE = Obtain(), Release()  # no fields: one of each serves every turn
_USER: Final = TurnStep.USER
_DONE: Final = TurnStep.DONE
_ANSWER: Final = TurnStep.ANSWER


def turn_steps(plan: TurnPlan, text: str | None, attachments: Sequence[ContentBlock] = ()) -> Steps:
    """One whole turn (see the module docstring); returns the reply. With ``text`` None the
    turn resumes an interrupted one: no user message is added. A message that says nothing,
    or carries an attachment the client's provider cannot take, raises ``ValueError``
    before the conversation is obtained (``check_said``, ``LLMClient.check_attachments``)."""
    if text is not None:
        check_said(text, attachments)
        plan.client.check_attachments(attachments, plan.thinker.conversation_id)

    def turn(context: ConversationContext) -> Steps:
        if text is None:
            recovered = yield from resume(context, plan)
        else:
            prior, start = context.open_turn, len(context.messages)
            if (prior is None and not start) or (prior is not None and prior.step == _DONE):
                recovered = None  # the usual turn: the last one ended (or there was none)
                plan.turn_id = plan.state.turn_id = turn_id = new_turn_id()
            else:
                check_no_pending(context)
                recovered = yield from pick_up(context, plan)
                turn_id = plan.turn_id
            plan.start = start
            _add(context, plan, user_message(text, attachments, plan.handler))
            context.open_turn = OpenTurn(turn_id, _USER, start)  # in the save that follows
            yield plan.saving(context)  # waited: durable before the model is called
        reply = yield from _answer_all(context, plan)
        if recovered is not None:
            reply = msgspec.structs.replace(reply, recovered=recovered)
        return reply

    return (yield from _leased(plan, turn, (ApprovalError,)))  # refused before any change


def decision_steps(
    plan: TurnPlan, call_ids: list[str] | None, approved: bool, reason: str
) -> Steps:
    """A decision on pending calls (``None``: every undecided one), as a turn: obtain,
    check, record (``_approvals.decide_steps``) and, with the last decision, go on with the
    turn; returns its reply. Refusals (``ApprovalError``) and a save another process beat
    (``StaleVersionError``) change nothing and end it without a boundary save."""

    def decision(context: ConversationContext) -> Steps:
        ids = check_decision(context, call_ids)
        record = context.open_turn
        assert record is not None
        begin(plan, record.id, record.start)
        parked = yield from decide_steps(plan, context, ids, approved, reason)
        if parked is not None:
            return parked
        if offers := kept_offers(context):  # offered before the turn parked: answered now
            yield from _take_offers(context, plan, offers)
        return (yield from _answer_all(context, plan))

    return (yield from _leased(plan, decision, (ApprovalError, StaleVersionError)))


def _leased(
    plan: TurnPlan,
    body: Callable[[ConversationContext], Steps],
    refusals: tuple[type[BaseException], ...],
) -> Steps:
    """Obtain, prepare and run ``body`` on the conversation, and always release. Any error
    but ``refusals`` (which changed nothing) gets the abnormal end first: pending calls
    answered, untaken offers kept, a boundary save."""
    context: ConversationContext = yield _OBTAIN
    abandoned = False  # closed by the garbage collector: a driver bug, nothing can be yielded
    try:
        _prepare(context, plan)
        return (yield from body(context))
    except GeneratorExit:
        abandoned = True
        raise
    except refusals:
        raise
    except BaseException as exc:
        yield from _end_abnormally(context, plan, exc)
        raise
    finally:
        plan.state.close()
        if not abandoned:
            yield _RELEASE


def _prepare(context: ConversationContext, plan: TurnPlan) -> None:
    plan.ledger.seed(context)
    plan.turn_start = len(context.usage_ledger)
    if plan.objective and not context.has_main_objective(OBJECTIVE_KEY):
        context.put_main_objective(OBJECTIVE_KEY, plan.objective)
    tools = plan.tools.tools
    if tools and not tools.keys() <= context.declared_tools().keys():  # a set test, in C
        context.add_tools(plan.tools.declarations())  # add-only: a fresh chat has them too
    plan.client.bind(context)  # the user message's save records the model that answers it


def _answer_all(context: ConversationContext, plan: TurnPlan) -> Steps:
    """Answer the user message, then every offer taken, until the inbox closes empty."""
    reply = yield from _rounds(context, plan)
    while not reply.pending and (offers := plan.state.take(close_if_empty=True)):
        yield from _take_offers(context, plan, offers)
        reply = yield from _rounds(context, plan)
    if plan.handler is not None and not reply.pending:
        reply = yield from _typed(context, plan, reply)
    return reply


def _parse(plan: TurnPlan, reply: Reply) -> Reply:
    assert plan.handler is not None
    return msgspec.structs.replace(reply, output=plan.handler.parse(reply.text))


def _typed(context: ConversationContext, plan: TurnPlan, reply: Reply) -> Steps:
    """The typed answer; a malformed one is re-asked once, with the parse error."""
    try:
        return _parse(plan, reply)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        first = exc
    ask = f"Your answer did not parse: {first}. Answer again with only the JSON."
    _add(
        context,
        plan,
        OutgoingMessage(
            ask,
            [TextBlock(text=ask)],
            response_handler=plan.handler,
            compactable=False,
            app_authored=True,
        ),
    )
    mark(context, plan, TurnStep.USER)
    yield plan.saving(context)
    reply = yield from _rounds(context, plan)
    try:
        return _parse(plan, reply)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        kind = getattr(getattr(plan.handler, "cls", None), "__name__", "the declared type")
        raise TurnError(
            f"The answer on conversation {context.conversation_id} did not parse as {kind} "
            f"after one re-ask: {exc}"
        ) from exc


def _take_offers(context: ConversationContext, plan: TurnPlan, offers: Sequence[str]) -> Steps:
    for text in offers:
        _add(context, plan, user_message(text, (), plan.handler))
        yield OfferAccepted(text=text)
    mark(context, plan, TurnStep.USER)
    yield plan.saving(context)
    return Reply(text="", usage=plan.usage, messages=[])


def _rounds(context: ConversationContext, plan: TurnPlan) -> Steps:
    response: LLMResponse | None = None
    for _ in range(plan.max_rounds):
        _check_cancelled(plan.thinker)
        response = yield from _ask(context, plan)
        calls = response.tool_uses
        _add(context, plan, IncomingMessage(blocks=response.blocks, compactable=bool(calls)))
        if calls and plan.approval is not None:
            held = plan.approval.held(plan, calls)
            if held:
                return (yield from park(context, plan, response, calls, held))
        record = OpenTurn(plan.turn_id, _ANSWER if calls else _DONE, plan.start)
        if plan.decided is not None:  # the turn's decisions stay on record until it ends
            record = with_approvals(record, plan.decided)
        context.open_turn = record
        yield plan.saving(context)  # waited: tools may act on the world next
        if not calls:
            return _reply(plan, response, exhausted=False)
        if plan.limits:  # an answer past a limit is kept, but its calls do not run
            check_after(context, plan.limits, plan.turn_start)
        yield from run_tools(context, plan, calls)
        if offers := plan.state.take():
            yield from _take_offers(context, plan, offers)
    assert response is not None  # max_rounds >= 1, checked by the agent
    return _reply(plan, response, exhausted=True)


def _reply(plan: TurnPlan, response: LLMResponse, *, exhausted: bool) -> Reply:
    return Reply(
        text=response.text,
        usage=plan.usage,
        messages=list(plan.added),
        rounds_exhausted=exhausted,
    )


def _check_cancelled(thinker: AgentThinker) -> None:
    if thinker.cancelled is not None:
        raise TurnCancelledError(
            f"The turn on conversation {thinker.conversation_id} was cancelled: "
            f"{thinker.cancelled}."
        )


def _ask(context: ConversationContext, plan: TurnPlan) -> Generator[Any, Any, LLMResponse]:
    """One model answer: retryable errors retried with backoff, a truncation once."""
    attempt, waited, escalated = 0, 0.0, False
    while True:
        effect = plan.window(context) if plan.window is not None else None
        if effect is not None:
            yield from _fit(context, plan, effect)
        if plan.limits:
            check_before(context, plan.limits, plan.turn_start, _estimate(context, plan))
        try:
            response: LLMResponse = yield CallModel(context)
        except OutputTruncationRetry as exc:
            if escalated:  # the client escalates to the ceiling, so this is a safety net
                raise UncorrectableLLMError(f"The retry was truncated again: {exc}") from exc
            escalated = True
            yield Restarted(reason=f"truncated; retrying with {exc.new_budget} output tokens")
            continue
        except RetryableLLMError as exc:
            delay = plan.retry.delay(attempt, waited)
            if delay is None:
                raise
            attempt, waited = attempt + 1, waited + delay
            yield Restarted(reason=f"retrying in {delay:g}s: {exc}")
            yield Pause(delay)
            _check_cancelled(plan.thinker)
            continue
        plan.state.commit_text()
        plan.ledger.record_call(context, response)
        plan.usage = (
            response.usage if plan.usage is NO_USAGE else add_usage(plan.usage, response.usage)
        )
        return response


def _estimate(context: ConversationContext, plan: TurnPlan) -> int | None:
    """The next request's input tokens, by the conversation's own count (None: no limit
    counts input tokens)."""
    if not needs_estimate(plan.limits):
        return None
    binding = context.model_binding
    spec = binding.spec if binding is not None else None
    return context.get_total_tokens(spec if spec is not None else plan.client.spec)


def _fit(context: ConversationContext, plan: TurnPlan, effect: Compact) -> Steps:
    """Compact the conversation when it outgrew its window; the change is saved with the
    next boundary's save, the turn's start moved to where its messages now stand.
    Raises ``ContextOverflowError`` when it cannot fit."""
    turn = context.messages[plan.start :]
    report: FitReport = yield effect
    if report.steps:
        moved(context, plan, turn)
        levels = [level.value for level in report.levels]
        plan.ledger.record_compaction(context, report)
        compaction_event(report)
        logger.bind(conversation_id=context.conversation_id).info(
            "Turn compacted conversation {} ({}): {} -> {} tokens",
            context.conversation_id,
            ", ".join(levels),
            report.tokens_before,
            report.tokens_after,
        )
        yield Compacted(
            levels=levels, tokens_before=report.tokens_before, tokens_after=report.tokens_after
        )
    return Reply(text="", usage=plan.usage, messages=[])


# -- the abnormal end ---------------------------------------------------------------------------


def _end_abnormally(context: ConversationContext, plan: TurnPlan, exc: BaseException) -> Steps:
    """Answer every pending tool call with an error result, keep untaken offers as user
    messages (in the record while calls stay parked: answered when the turn goes on), and
    save at this boundary. A failing save is logged, never raised over ``exc``."""
    why = str(exc) or type(exc).__name__
    record = context.open_turn
    parked = record.parked() if record is not None else frozenset[str]()
    offers: list[str] = []
    if record is not None and parked:  # a message after a parked call would break its pairing
        if taken := plan.state.close():
            context.open_turn = with_offers(record, taken)
    else:
        offers = [*kept_offers(context), *plan.state.close()]
    pending = [d.call for d in dangling_calls(context.messages) if d.call.id not in parked]
    if pending:
        results = [
            ToolResultBlock(
                tool_use_id=c.id,
                content=f"The turn ended before this call ran: {why}",
                is_error=True,
            )
            for c in pending
        ]
        last = context.messages[-1]
        if (
            isinstance(last, OutgoingMessage)
            and last.blocks
            and type(last.blocks[0]) is ToolResultBlock
        ):
            last.blocks.extend(results)  # the round's results message, some calls finished
        else:
            _add(context, plan, OutgoingMessage(blocks=results, compactable=True))
        if plan.turn_id:
            mark_round(context, plan)
    add_offers(context, plan, offers)
    try:
        yield plan.saving(context)
    except Exception as save_exc:
        logger.opt(exception=save_exc).error(
            "the boundary save of failed turn on {} failed", context.conversation_id
        )
    return Reply(text="", usage=plan.usage, messages=[])
