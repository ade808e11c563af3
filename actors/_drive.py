"""The two drivers of a turn's effects: in the calling thread, and on an event loop.

``drive`` performs each effect of ``turn_steps`` in the calling thread and yields the
turn's events as they happen (model text streams through ``client.stream``). ``drive_async``
performs them without blocking the event loop: saves (the LMDB commit) and model calls run
in bounded pools, async tools on the loop. Both publish every event to the turn's
followers. Two seams stay small so they can be swapped for the real thing at merge:
``_obtain_async`` (a stand-in for the service's own asyncio obtain) and
``_call_model_blocking`` (the sync SDK call, run in a pool until the clients have async
calls; its text reaches the loop delta by delta).

Thread-safety: a driver runs one turn; many drivers run at once on one service.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
from collections.abc import Callable, Generator
from typing import Any, cast

from loguru import logger

from parlour.actors._events import AgentEvent, Event, Reply, TextDelta, TurnCancelledError
from parlour.actors._otel import model_attributes, span
from parlour.actors._service import ConversationService
from parlour.actors._tools import prestarted_pool, run_calls, run_calls_async, tool_pool
from parlour.actors._turn import CallModel, Obtain, Pause, Release, RunTools, Save, Steps, TurnPlan
from parlour.runtime import ConversationContext, LLMClient, LLMResponse
from parlour.runtime.errors import RetryableLLMError

__all__ = ["drive", "drive_async", "set_provider_concurrency"]

POOL_SIZES = {"model": 64, "save": 8, "obtain": 32}
DEFAULT_PROVIDER_CONCURRENCY = 64

_pools: dict[str, cf.ThreadPoolExecutor] = {}
_caps: dict[str, threading.BoundedSemaphore] = {}
_guard = threading.Lock()


def _pool(kind: str) -> cf.ThreadPoolExecutor:
    with _guard:
        if kind not in _pools:
            _pools[kind] = prestarted_pool(POOL_SIZES[kind], f"parlour-{kind}")
        return _pools[kind]


def set_provider_concurrency(provider: str, limit: int) -> None:
    """Cap the model calls in flight to ``provider`` across every chat of the process.

    Raises:
        ValueError: ``limit`` is below 1.
    """
    if limit < 1:
        raise ValueError(f"The concurrency cap of {provider} must be at least 1, not {limit}.")
    with _guard:
        _caps[provider] = threading.BoundedSemaphore(limit)


def _cap(client: LLMClient) -> threading.BoundedSemaphore:
    provider = client.spec.provider
    with _guard:
        if provider not in _caps:
            _caps[provider] = threading.BoundedSemaphore(DEFAULT_PROVIDER_CONCURRENCY)
        return _caps[provider]


class _Abandoned(Exception):
    """Raised inside a model call whose turn stopped listening, to end the call early."""


def _cancelled_error(plan: TurnPlan) -> TurnCancelledError:
    return TurnCancelledError(
        f"The turn on conversation {plan.thinker.conversation_id} was cancelled: "
        f"{plan.thinker.cancelled or 'its caller stopped waiting'}."
    )


def _model_span(plan: TurnPlan) -> Any:
    spec = plan.client.spec
    return span(
        "chat " + spec.id,
        **{"gen_ai.operation.name": "chat", "gen_ai.system": spec.provider},
        **{"gen_ai.request.model": spec.id},
    )


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
                event = cast(AgentEvent, item)
                plan.state.publish(event)
                yield event
            else:
                value = yield from _perform(item, plan, service)
        except GeneratorExit:
            _finish_quietly(steps, plan, service, _cancelled_error(plan))
            raise
        except BaseException as exc:
            error = exc


def _perform(
    effect: Any, plan: TurnPlan, service: ConversationService
) -> Generator[AgentEvent, None, Any]:
    thinker = plan.thinker
    match effect:
        case Obtain():
            return service.obtain_conversation(None, thinker).get()
        case Save(context=context):
            with span("parlour.save", **{"parlour.conversation_id": thinker.conversation_id}):
                service.save_conversation(context, thinker)
        case CallModel(context=context):
            return (yield from _stream_model(plan, context))
        case RunTools(calls=calls):
            with span("parlour.tools", **{"parlour.tool_calls": len(calls)}):
                return run_calls(plan.tools, calls, plan.tool_timeout_s)
        case Pause(seconds=seconds):
            plan.sleep(seconds)
        case Release():
            service.release(thinker)
    return None


def _stream_model(
    plan: TurnPlan, context: ConversationContext
) -> Generator[AgentEvent, None, LLMResponse]:
    if plan.before_model_call is not None:
        plan.before_model_call(context, plan.ledger)
    with _cap(plan.client), _model_span(plan) as current:
        stream = plan.client.stream(context)
        for text in stream:
            if plan.thinker.cancelled is not None:
                raise _cancelled_error(plan)
            event = TextDelta(text=text)
            plan.state.publish(event)
            yield event
        model_attributes(current, stream.response)
        return stream.response


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
        elif isinstance(item, CallModel):
            error = why
        else:
            try:
                for _ in _perform(item, plan, service):
                    pass
            except BaseException as exc:
                error = exc


# -- on an event loop ---------------------------------------------------------------------------


class _AsyncTurn:
    """One turn performed on the running loop; ``emit`` gets every event on the loop."""

    def __init__(
        self,
        steps: Steps,
        plan: TurnPlan,
        service: ConversationService,
        emit: Callable[[AgentEvent], None],
    ) -> None:
        self.steps, self.plan, self.service, self.emit = steps, plan, service, emit
        self.loop = asyncio.get_running_loop()
        self.forced = asyncio.Event()
        self.force_requested = False
        self.current_call = threading.Event()  # set: the model thread stops at its next delta

    def force(self) -> None:
        """From any thread: interrupt the turn's current wait (``force_release``)."""
        self.force_requested = True
        self.current_call.set()
        self.loop.call_soon_threadsafe(self.forced.set)

    def publish(self, event: AgentEvent) -> None:
        self.plan.state.publish(event)
        self.emit(event)

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
                value = await self._interruptible(item)
            except asyncio.CancelledError as exc:  # the caller's cancellation
                self.current_call.set()
                error = exc
            except BaseException as exc:
                error = exc

    async def _interruptible(self, effect: Any) -> Any:
        """Perform ``effect``; a force release interrupts it (saves and releases are never
        interrupted) and raises ``TurnCancelledError``."""
        if isinstance(effect, Save | Release):
            return await self._perform(effect)
        work = asyncio.ensure_future(self._perform(effect))
        forced = asyncio.ensure_future(self.forced.wait())
        try:
            await asyncio.wait({work, forced}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            await asyncio.wait([work])
            raise
        finally:
            forced.cancel()
        if work.done():
            return work.result()
        work.cancel()
        await asyncio.wait([work])
        raise _cancelled_error(self.plan)

    async def _perform(self, effect: Any) -> Any:
        plan, thinker, service = self.plan, self.plan.thinker, self.service
        match effect:
            case Obtain():
                return await _obtain_async(service, thinker)
            case Save(context=context):
                with span("parlour.save", **{"parlour.conversation_id": thinker.conversation_id}):
                    await self._shielded(service.save_conversation, context, thinker)
            case CallModel(context=context):
                return await self._call_model(context)
            case RunTools(calls=calls):
                with span("parlour.tools", **{"parlour.tool_calls": len(calls)}):
                    return await run_calls_async(plan.tools, calls, plan.tool_timeout_s)
            case Pause(seconds=seconds):
                await plan.async_sleep(seconds)
            case Release():
                service.release(thinker)
        return None

    async def _shielded(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A blocking call in the save pool; a cancellation waits for it to finish, so
        the context is never mutated while the commit reads it."""
        future = self.loop.run_in_executor(_pool("save"), fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            await asyncio.wait([future])
            raise

    async def _call_model(self, context: ConversationContext) -> LLMResponse:
        if self.plan.before_model_call is not None:
            self.plan.before_model_call(context, self.plan.ledger)
        abandon = self.current_call = threading.Event()
        if self.force_requested:
            abandon.set()

        def on_text(text: str) -> None:  # in the model thread: deltas reach the loop in order
            if abandon.is_set():
                raise _Abandoned()
            self.loop.call_soon_threadsafe(self.publish, TextDelta(text=text))

        call = self.loop.run_in_executor(
            _pool("model"), _call_model_blocking, self.plan, context, on_text, abandon
        )
        try:
            return await asyncio.wait_for(call, self.plan.model_timeout_s)
        except _Abandoned as exc:  # force-released while the answer streamed
            raise _cancelled_error(self.plan) from exc
        except TimeoutError as exc:
            abandon.set()
            raise RetryableLLMError(
                f"Model {self.plan.client.model_id} did not answer within "
                f"{self.plan.model_timeout_s:g}s on conversation {context.conversation_id}."
            ) from exc


def _call_model_blocking(
    plan: TurnPlan,
    context: ConversationContext,
    on_text: Callable[[str], None],
    abandoned: threading.Event,
) -> LLMResponse:
    """The seam: one model call in a pool thread, streaming its text to ``on_text``."""
    with _cap(plan.client), _model_span(plan) as current:
        if abandoned.is_set():
            raise _Abandoned()
        response = plan.client.respond(context, on_text=on_text)
        model_attributes(current, response)
        return response


async def _obtain_async(service: ConversationService, thinker: Any) -> ConversationContext:
    """The seam: obtain without blocking the loop (a stand-in for the service's own).

    The whole obtain (the actor round trips, a store load on a miss, a wait for a busy
    conversation) runs in a pool thread: under load an actor round trip made on the loop
    waits for the GIL. A caller who stops waiting releases a lease that arrives after it
    left.
    """
    loop = asyncio.get_running_loop()
    waiting = loop.run_in_executor(
        _pool("obtain"), lambda: service.obtain_conversation(None, thinker).get()
    )
    try:
        return await asyncio.shield(waiting)
    except asyncio.CancelledError:
        waiting.add_done_callback(lambda f: _release_if_granted(f, service, thinker))
        raise


def _release_if_granted(
    future: asyncio.Future[ConversationContext], service: ConversationService, thinker: Any
) -> None:
    if future.exception() is None:
        service.release(thinker)


async def drive_async(
    steps: Steps,
    plan: TurnPlan,
    service: ConversationService,
    emit: Callable[[AgentEvent], None] = lambda event: None,
) -> Reply:
    """Perform the turn on the running loop, never blocking it; returns the reply.

    ``force_release`` cancels it at once (``TurnCancelledError``); cancelling the calling
    task does the same and re-raises ``CancelledError``; either way after the boundary save
    and the release.
    """
    for kind in POOL_SIZES:  # the first turn starts them, before any load builds up
        _pool(kind)
    tool_pool()
    turn = _AsyncTurn(steps, plan, service, emit)
    plan.thinker.set_cancel_hook(turn.force)
    return await turn.run()
