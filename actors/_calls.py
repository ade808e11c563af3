"""The model call's plumbing shared by both drivers: the process-wide pools, the
per-provider caps, and the sync path's model call in a pool thread (``ThreadedCall``),
which the turn waits for with the model timeout as its deadline.

Thread-safety: pools and caps are created under one lock and shared by every turn; a
``ThreadedCall`` belongs to one turn (its ``wake`` may be called from any thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import queue
import threading
import time
from collections.abc import Generator

from parlour.actors._events import AgentEvent, TextDelta, TurnCancelledError
from parlour.actors._tools import prestarted_pool
from parlour.actors._turn import TurnPlan
from parlour.runtime import ConversationContext, LLMClient, LLMResponse
from parlour.runtime.errors import RetryableLLMError

__all__ = [
    "POOL_SIZES",
    "Abandoned",
    "ThreadedCall",
    "acquire_cap",
    "cancelled_error",
    "pool",
    "provider_cap",
    "set_provider_concurrency",
    "start_pools",
    "timed_out",
]

POOL_SIZES = {"model": 64, "save": 8, "obtain": 32}
DEFAULT_PROVIDER_CONCURRENCY = 64

_pools: dict[str, cf.ThreadPoolExecutor] = {}
_caps: dict[str, threading.BoundedSemaphore] = {}
_guard = threading.Lock()


def pool(kind: str) -> cf.ThreadPoolExecutor:
    """The process-wide pool of ``kind`` (``model``, ``save``, ``obtain``), started on
    first use with all its threads."""
    with _guard:
        if kind not in _pools:
            _pools[kind] = prestarted_pool(POOL_SIZES[kind], f"parlour-{kind}")
        return _pools[kind]


def start_pools() -> None:
    """Start every pool's threads now (once per process); idempotent."""
    for kind in POOL_SIZES:
        pool(kind)


def set_provider_concurrency(provider: str, limit: int) -> None:
    """Cap the model calls in flight to ``provider`` across every chat of the process.

    Raises:
        ValueError: ``limit`` is below 1.
    """
    if limit < 1:
        raise ValueError(f"The concurrency cap of {provider} must be at least 1, not {limit}.")
    with _guard:
        _caps[provider] = threading.BoundedSemaphore(limit)


def provider_cap(client: LLMClient) -> threading.BoundedSemaphore:
    """The cap of the client's provider (``DEFAULT_PROVIDER_CONCURRENCY`` unless set)."""
    provider = client.spec.provider
    with _guard:
        if provider not in _caps:
            _caps[provider] = threading.BoundedSemaphore(DEFAULT_PROVIDER_CONCURRENCY)
        return _caps[provider]


class Abandoned(Exception):
    """Raised inside a model call whose turn stopped listening, to end the call early."""


async def acquire_cap(cap: threading.BoundedSemaphore) -> None:
    """Take a provider's cap from the loop without blocking it (a full cap is waited for
    in a pool thread; a cancelled wait gives the slot back once it arrives)."""
    if cap.acquire(blocking=False):
        return
    waiting = asyncio.get_running_loop().run_in_executor(pool("obtain"), cap.acquire)
    try:
        await asyncio.shield(waiting)
    except asyncio.CancelledError:
        waiting.add_done_callback(lambda f: cap.release())
        raise


def timed_out(plan: TurnPlan, context: ConversationContext) -> RetryableLLMError:
    """The retryable error of a model call past ``model_timeout_s``."""
    return RetryableLLMError(
        f"Model {plan.client.model_id} did not answer within {plan.model_timeout_s:g}s on "
        f"conversation {context.conversation_id}."
    )


def cancelled_error(plan: TurnPlan) -> TurnCancelledError:
    """The error a cancelled turn raises, naming the conversation and the reason."""
    return TurnCancelledError(
        f"The turn on conversation {plan.thinker.conversation_id} was cancelled: "
        f"{plan.thinker.cancelled or 'its caller stopped waiting'}."
    )


class _Done:
    __slots__ = ("error", "response")

    def __init__(self, response: LLMResponse | None, error: BaseException | None) -> None:
        self.response, self.error = response, error


_WAKE = object()


class ThreadedCall:
    """One model call of the sync path, made in a model-pool thread: its text deltas come
    back through a queue to the turn's thread, which waits at most the model timeout (the
    call is then abandoned: it stops at its next delta, its answer is dropped) and wakes
    at once when the turn is force-released."""

    def __init__(self, plan: TurnPlan, context: ConversationContext) -> None:
        self.plan, self.context = plan, context
        self.queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.abandoned = threading.Event()
        self.deadline = time.monotonic() + plan.model_timeout_s
        pool("model").submit(self._run)

    def _run(self) -> None:  # in the pool thread
        def on_text(text: str) -> None:
            if self.abandoned.is_set():
                raise Abandoned()
            self.queue.put(text)

        try:
            self.queue.put(_Done(self.plan.client.respond(self.context, on_text=on_text), None))
        except BaseException as exc:
            self.queue.put(_Done(None, exc))

    def wake(self) -> None:
        """From any thread: make the waiting turn look at its cancellation now."""
        self.queue.put(_WAKE)

    def events(self) -> Generator[AgentEvent, None, LLMResponse]:
        try:
            while True:
                item = self._next()
                if isinstance(item, _Done):
                    if item.error is not None:
                        raise item.error
                    assert item.response is not None
                    return item.response
                if isinstance(item, str):
                    event = TextDelta(text=item)
                    self.plan.state.publish(event)
                    yield event
        finally:
            self.abandoned.set()  # a no-op once the call is done

    def _next(self) -> object:
        try:
            item = self.queue.get(timeout=max(self.deadline - time.monotonic(), 0.0))
        except queue.Empty:
            raise timed_out(self.plan, self.context) from None
        if self.plan.thinker.cancelled is not None and not isinstance(item, _Done):
            raise cancelled_error(self.plan)
        return item
