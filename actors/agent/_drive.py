"""The two drivers of a turn's effects: in the calling thread, and on an event loop.

``drive`` performs each effect of ``turn_steps`` in the calling thread and yields the
turn's events as they happen. The model call of a caller that reads only the reply
(``run``: ``send``) is made in the calling thread, its deltas handed straight to the turn's
followers, a force release or ``model_timeout_s`` ending it at its next delta; a streaming
caller's (``stream``) runs on a model worker and hands its deltas to the waiting turn,
which waits at most ``model_timeout_s`` and wakes at once on a force release (a client that
answers inline, with no I/O, is asked in the calling thread either way).
``drive_async`` performs them on the event loop, holding it for nothing but a commit, in
the task that awaits it: saves through ``ConversationService.save_async`` (planned on the
loop, committed on it once per turn of the loop, its fsync included), the model
call through ``client.arespond`` (the SDKs' async clients on the loop, the scripted model
inline, boto3 on a worker thread), async tools on the loop, the obtain through
``ConversationService.obtain_async`` (its grant completes a loop future from the releasing
thread; a cancelled turn gives the obtain up, and a grant that raced the cancel is
released). A force release cancels the task where it waits (never in a save or a release)
and the driver turns that into ``TurnCancelledError``. A round of tool calls is started by
``RunTools`` (a ``ThreadRound`` here, a ``LoopRound`` on the loop) and its results come
back as they finish (``NextResults``), for the turn to save each. Both publish every event
to the turn's followers. In a turn gated by ``Chat.send`` (``_gate.py``) every effect that
may wait lets the gate go: the driver's tools, pause and compaction here, the obtain, the
save and the worker model call where they wait. Tools that take a ``ToolContext`` get
theirs from ``_call_context`` (made here, in the driver's thread), and learn of a
cancellation through the thinker's cancel hook (the sync path, while tools run) or
``force`` and the caller's cancel (the async path).

Why this module is long: it holds both drivers of one set of effects, side by side, so
that each effect is performed alike on both paths.

Thread-safety: a driver runs one turn; many drivers run at once on one service.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator
from typing import Any, cast

from loguru import logger

from parlour.runtime import ConversationContext, LLMResponse

from .._gate import waiting
from .._service import ConversationService
from ..tuning import set_provider_concurrency
from ._call_context import cancel_calls, contexts_for
from ._calls import (
    Abandoned,
    abook,
    booking_for,
    call_model,
    cancelled_error,
    close,
    inline_call,
    model_span,
    start_workers,
    stream_model,
    timed_out,
)
from ._effects import CallModel, Compact, NextResults, Obtain, Pause, Release, RunTools, Save
from ._events import AgentEvent, Event, Reply
from ._otel import model_attributes, span_on
from ._plan import Steps, TurnPlan
from ._tools import Finished, LoopRound, ThreadRound

__all__ = ["drive", "drive_async", "run", "set_provider_concurrency"]


# -- in the calling thread ----------------------------------------------------------------------


def drive(
    steps: Steps, plan: TurnPlan, service: ConversationService
) -> Generator[AgentEvent, None, Reply]:
    """Perform the turn in this thread, yielding its events; returns the reply.

    Closing the generator before the end cancels the turn (boundary save and release
    included) before the close returns.
    """
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            item = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        try:
            if isinstance(item, Event):
                yield plan.state.publish(cast(AgentEvent, item))
            elif type(item) is CallModel:
                if plan.deltas:
                    value = yield from stream_model(plan, item.context)
                else:
                    value = call_model(plan, item.context)
            else:
                value = _perform(item, plan, service)
        except GeneratorExit:
            _finish_quietly(steps, plan, service, cancelled_error(plan))
            raise
        except BaseException as exc:
            error = exc


def run(steps: Steps, plan: TurnPlan, service: ConversationService) -> Reply:
    """``drive`` for a caller that reads only the reply (``send``): the same effects
    performed the same way in this thread, every event published to the turn's followers
    and none yielded, so no generator stands between the turn and its caller."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            item = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        perform: Perform = _RUN.get(type(item), _publish)
        try:
            value, error = perform(item, plan, service), None
        except BaseException as exc:
            value, error = None, exc


def _perform(effect: Any, plan: TurnPlan, service: ConversationService) -> Any:
    """Perform every effect but the model call (which streams: ``_stream_model``)."""
    return _PERFORM[type(effect)](effect, plan, service)


def _obtain(effect: Obtain, plan: TurnPlan, service: ConversationService) -> Any:
    return service.obtain_conversation(None, plan.thinker).get()


def _save(effect: Save, plan: TurnPlan, service: ConversationService) -> None:
    if plan.tracer is None:
        service.save_conversation(effect.context, plan.thinker, wait=effect.wait)
        return
    cid = plan.thinker.conversation_id
    with span_on(plan.tracer, "parlour.save", **{"parlour.conversation_id": cid}):
        service.save_conversation(effect.context, plan.thinker, wait=effect.wait)


def _compact(effect: Compact, plan: TurnPlan, service: ConversationService) -> Any:
    with waiting():  # its summaries are model calls
        return effect.manager.fit(effect.context, effect.reserve)


def _run_tools(effect: RunTools, plan: TurnPlan, service: ConversationService) -> Any:
    contexts = contexts_for(plan, effect.calls)
    if contexts is not None:  # a force release meanwhile tells the calls (no model call runs)
        plan.thinker.set_cancel_hook(plan.call_scope.on_release)
    round_ = ThreadRound(plan.tools, effect.calls, plan.tool_timeout_s, contexts)
    return round_, _next_results(NextResults(round_), plan, service)


def _next_results(effect: NextResults, plan: TurnPlan, service: ConversationService) -> Finished:
    """The round's next results, waited for with the gate let go."""
    round_ = cast(ThreadRound, effect.round)
    running = len(round_.pending) + len(round_.ready)
    with waiting(), span_on(plan.tracer, "parlour.tools", **{"parlour.tool_calls": running}):
        return round_.next()


def _pause(effect: Pause, plan: TurnPlan, service: ConversationService) -> None:
    with waiting():
        plan.sleep(effect.seconds)


def _release(effect: Release, plan: TurnPlan, service: ConversationService) -> None:
    service.release(plan.thinker)


Perform = Callable[[Any, TurnPlan, ConversationService], Any]
_PERFORM: dict[type, Perform] = {
    Obtain: _obtain,
    Save: _save,
    Compact: _compact,
    RunTools: _run_tools,
    NextResults: _next_results,
    Pause: _pause,
    Release: _release,
}


def _call_model(effect: CallModel, plan: TurnPlan, service: ConversationService) -> Any:
    return call_model(plan, effect.context)


def _publish(event: Any, plan: TurnPlan, service: ConversationService) -> None:
    plan.state.publish(event)


# ``run``'s: every effect, the model call included; an event is published (``_publish``)
_RUN: dict[type, Perform] = {
    **_PERFORM,
    CallModel: _call_model,
}


def _finish_quietly(
    steps: Steps, plan: TurnPlan, service: ConversationService, why: BaseException
) -> None:
    """Run a turn nobody listens to any more to its end: the abnormal end, then release."""
    error: BaseException | None = why
    value: Any = None
    while True:
        try:
            item = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration:
            return
        except BaseException as exc:
            if exc is not why:
                logger.opt(exception=exc).error("a closed turn failed while finishing")
            return
        value, error = None, None
        if isinstance(item, Event):
            plan.state.publish(cast(AgentEvent, item))
        elif isinstance(item, CallModel | Compact):
            error = why
        else:
            try:
                _perform(item, plan, service)
            except BaseException as exc:
                error = exc


# -- on an event loop ---------------------------------------------------------------------------


class _AsyncTurn:
    """One turn performed on the running loop, in the task that awaits it; ``emit`` gets
    every event on the loop.

    A force release cancels that task (``force``) while it waits in an effect that may be
    interrupted (every one but a save and a release); ``_interruptible`` turns that
    ``CancelledError`` into ``TurnCancelledError`` and withdraws the cancel request
    (``Task.uncancel``), so the abnormal end's saves await as usual. A force that comes
    while the task is elsewhere is seen at the next effect, before it starts. The caller's
    own cancellation stays a ``CancelledError``.
    """

    def __init__(
        self,
        steps: Steps,
        plan: TurnPlan,
        service: ConversationService,
        emit: Callable[[AgentEvent], None],
    ) -> None:
        self.steps, self.plan, self.service, self.emit = steps, plan, service, emit
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # a coroutine driven by a loop runs in a task
        self.task = task
        self.force_requested = False
        self.interruptible = False  # the task waits in an effect a force may cancel
        self.interrupted = False  # a force cancelled the task; not withdrawn yet
        self.current_call = threading.Event()  # set: the model thread stops at its next delta

    def force(self) -> None:
        """From any thread: interrupt the turn's current wait (``force_release``)."""
        self.force_requested = True
        self.current_call.set()
        cancel_calls(self.plan, self.plan.thinker.cancelled or "the turn was cancelled")
        self.loop.call_soon_threadsafe(self._interrupt)

    def _interrupt(self) -> None:
        """On the loop, the task suspended: cancel it where it waits, if that wait is one a
        force interrupts (the ``CancelledError`` lands at that very await)."""
        if self.interruptible and not self.interrupted:
            self.interrupted = True
            self.task.cancel()

    def publish(self, event: AgentEvent) -> None:
        self.emit(self.plan.state.publish(event))

    def publish_delta(self, text: str) -> None:
        self.emit(self.plan.state.publish_delta(text))

    async def run(self) -> Reply:
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                item = self.steps.throw(error) if error is not None else self.steps.send(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            value, error = None, None
            if isinstance(item, Event):
                self.publish(cast(AgentEvent, item))
                continue
            try:
                if type(item) is Save:
                    await self._save(item)
                elif type(item) is Release:
                    self.service.release(self.plan.thinker)
                else:
                    value = await self._interruptible(item)
            except asyncio.CancelledError as exc:  # the caller's cancellation
                self.current_call.set()
                error = exc
            except BaseException as exc:
                error = exc

    async def _interruptible(self, effect: Any) -> Any:
        """Perform ``effect``; a force release interrupts it and raises
        ``TurnCancelledError``."""
        if self.force_requested:
            raise cancelled_error(self.plan)
        self.interruptible = True
        try:
            value = await self._perform(effect)
        except asyncio.CancelledError:
            if self._withdraw_force() and not self.task.cancelling():
                raise cancelled_error(self.plan) from None
            self._tell_calls()
            raise
        finally:
            self.interruptible = False
        if self._withdraw_force():  # the effect swallowed the cancel
            raise cancelled_error(self.plan)
        return value

    def _tell_calls(self) -> None:
        """The task was cancelled in an effect: a force told the calls already (``force``);
        else it is the caller's cancellation, told here."""
        if not self.interrupted:
            cancel_calls(self.plan, "the turn's caller cancelled it")

    def _withdraw_force(self) -> bool:
        """Whether a force cancelled the task; its cancel request is withdrawn, so only the
        caller's (if any) still counts."""
        if not self.interrupted:
            return False
        self.interrupted = False
        self.task.uncancel()
        return True

    async def _save(self, effect: Save) -> None:
        """A save on the loop (``save_async``): never interrupted by a force; a caller's
        cancel waits for its commit."""
        plan, thinker = self.plan, self.plan.thinker
        if plan.tracer is None:
            await self.service.save_async(effect.context, thinker, wait=effect.wait)
            return
        cid = thinker.conversation_id
        with span_on(plan.tracer, "parlour.save", **{"parlour.conversation_id": cid}):
            await self.service.save_async(effect.context, thinker, wait=effect.wait)

    async def _perform(self, effect: Any) -> Any:
        plan, thinker, service = self.plan, self.plan.thinker, self.service
        match effect:
            case Obtain():
                return await service.obtain_async(None, thinker)
            case Compact(context=context, manager=manager, reserve=reserve):
                return await manager.afit(context, reserve)
            case CallModel(context=context):
                return await self._call_model(context)
            case RunTools(calls=calls):
                contexts = contexts_for(plan, calls)
                round_ = LoopRound(
                    plan.tools, calls, plan.tool_timeout_s, contexts, self._tell_calls
                )
                return round_, await self._results(round_)
            case NextResults(round=started):  # a LoopRound: RunTools made it above
                return await self._results(cast(LoopRound, started))
            case Pause(seconds=seconds):
                await plan.async_sleep(seconds)
        return None

    async def _results(self, round_: LoopRound) -> Finished:
        with span_on(
            self.plan.tracer, "parlour.tools", **{"parlour.tool_calls": len(round_.pending)}
        ):
            return await round_.next()

    async def _call_model(self, context: ConversationContext) -> LLMResponse:
        plan = self.plan
        if plan.client.answers_inline and booking_for(plan.client, context) is None:
            return self._inline_call(context)  # no I/O and no limiter: asked here and now
        if plan.before_model_call is not None:
            plan.before_model_call(context, plan.ledger)
        abandon = self.current_call = threading.Event()
        if self.force_requested:
            abandon.set()
        booking, response = await abook(plan, context), None  # None: no limiter set
        try:
            with model_span(plan) as current:
                response = await self._respond(context, self._on_text(abandon), abandon)
                model_attributes(current, response)
        finally:
            close(booking, response)
        if self.force_requested:  # released while a call that never awaited ran (inline)
            raise cancelled_error(plan)
        return response

    def _inline_call(self, context: ConversationContext) -> LLMResponse:
        """A client that answers inline (``inline_call``): its deltas published as they
        are for a caller that streams them, else its whole text as one delta."""
        deltas: list[str] | None = [] if self.plan.deltas else None
        try:
            return inline_call(self.plan, context, deltas)
        finally:  # what streamed before a raise (a truncation, say) streamed all the same
            for text in deltas or ():
                self.publish_delta(text)

    def _on_text(self, abandon: threading.Event) -> Callable[[str], None]:
        """Deltas published in order: on the loop directly (the async SDKs, the scripted
        model), through ``call_soon_threadsafe`` from a worker thread (boto3)."""
        loop_thread = threading.get_ident()

        def on_text(text: str) -> None:
            if abandon.is_set():
                raise Abandoned()
            if threading.get_ident() == loop_thread:
                self.publish_delta(text)
            else:
                self.loop.call_soon_threadsafe(self.publish_delta, text)

        return on_text

    async def _respond(
        self,
        context: ConversationContext,
        on_text: Callable[[str], None],
        abandon: threading.Event,
    ) -> LLMResponse:
        if abandon.is_set():
            raise cancelled_error(self.plan)
        try:
            async with asyncio.timeout(self.plan.model_timeout_s):
                return await self.plan.client.arespond(context, on_text=on_text)
        except Abandoned as exc:  # force-released while the answer streamed
            raise cancelled_error(self.plan) from exc
        except TimeoutError as exc:
            raise timed_out(self.plan, context) from exc
        finally:
            abandon.set()  # a worker thread still streaming stops at its next delta


async def drive_async(
    steps: Steps,
    plan: TurnPlan,
    service: ConversationService,
    emit: Callable[[AgentEvent], None] = lambda event: None,
) -> Reply:
    """Perform the turn on the running loop (holding it only for a save's commit it
    leads); returns the reply.

    ``force_release`` cancels it at once (``TurnCancelledError``); cancelling the calling
    task does the same and re-raises ``CancelledError``; either way after the boundary save
    and the release.
    """
    start_workers()  # the first turn starts them, before any load builds up
    turn = _AsyncTurn(steps, plan, service, emit)
    plan.thinker.set_cancel_hook(turn.force)
    return await turn.run()
