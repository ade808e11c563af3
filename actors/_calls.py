"""The model call's plumbing shared by both drivers: the process-wide pools, the
per-provider caps, and the sync path's model call in a model worker (``ThreadedCall``),
which the turn waits for with the model timeout as its deadline.

Thread-safety: pools, workers and caps are created under one lock and shared by every
turn; a ``ThreadedCall`` belongs to one turn (its ``wake`` may be called from any thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import queue
import threading
import time
from collections.abc import Callable, Generator

from loguru import logger

from parlour.actors._events import AgentEvent, TextDelta, TurnCancelledError
from parlour.actors._tools import prestarted_pool
from parlour.actors._turn import TurnPlan
from parlour.runtime import ConversationContext, LLMClient, LLMResponse
from parlour.runtime.errors import RetryableLLMError

__all__ = [
    "MODEL_WORKERS",
    "POOL_SIZES",
    "Abandoned",
    "ThreadedCall",
    "acquire_cap",
    "cancelled_error",
    "model_workers",
    "pool",
    "provider_cap",
    "set_provider_concurrency",
    "start_pools",
    "timed_out",
]

POOL_SIZES = {"save": 8, "obtain": 32}
MODEL_WORKERS = 64
DEFAULT_PROVIDER_CONCURRENCY = 64

_pools: dict[str, cf.ThreadPoolExecutor] = {}
_caps: dict[str, threading.BoundedSemaphore] = {}
_guard = threading.Lock()


def pool(kind: str) -> cf.ThreadPoolExecutor:
    """The process-wide pool of ``kind`` (``save``, ``obtain``), started on first use with
    all its threads."""
    with _guard:
        if kind not in _pools:
            _pools[kind] = prestarted_pool(POOL_SIZES[kind], f"parlour-{kind}")
        return _pools[kind]


class Workers:
    """A fixed set of daemon threads, all started up front, running submitted calls in
    arrival order. Lighter than an executor (no future, no lock per submit): the sync
    path's model calls report through their own queue.

    Thread-safety: ``submit`` from any thread; a call reports its own outcome, and one
    that raises anyway is logged, its thread kept alive.
    """

    def __init__(self, count: int, name: str) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        for n in range(count):
            threading.Thread(target=self._serve, name=f"{name}_{n}", daemon=True).start()

    def submit(self, call: Callable[[], None]) -> None:
        self._calls.put(call)

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            try:
                call()
            except Exception:  # pragma: no cover - a call reports its own errors
                logger.exception("a model worker's call raised; the worker goes on")
            del call


_model_workers: Workers | None = None


def model_workers() -> Workers:
    """The process's model workers (``MODEL_WORKERS`` threads), started on first use."""
    global _model_workers
    with _guard:
        if _model_workers is None:
            _model_workers = Workers(MODEL_WORKERS, "parlour-model")
        return _model_workers


def start_pools() -> None:
    """Start every pool's threads and the model workers now (once per process); idempotent."""
    for kind in POOL_SIZES:
        pool(kind)
    model_workers()


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
    """One model call of the sync path, made by a model worker, while the turn's thread
    waits at most the model timeout (the call is then abandoned: it stops at its next
    delta, its answer is dropped) and wakes at once when the turn is force-released.

    With ``deltas`` the text deltas come back through the call's queue, and ``events``
    yields each as a ``TextDelta``. Without (a caller that reads only the reply), the
    worker hands each delta straight to the turn's broadcast, for joiners, and the turn's
    thread wakes once, for the answer: no thread switch per delta. Either way no delta
    of an abandoned call is published.
    """

    def __init__(self, plan: TurnPlan, context: ConversationContext, *, deltas: bool) -> None:
        self.plan, self.context = plan, context
        self.queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._abandoned = False
        self.deadline = time.monotonic() + plan.model_timeout_s
        self._on_text, self._token = (
            (self._queued, None) if deltas else plan.state.text_sink(Abandoned)
        )
        model_workers().submit(self._run)

    def _run(self) -> None:  # in the worker
        try:
            response = self.plan.client.respond(self.context, on_text=self._on_text)
            self.queue.put(_Done(response, None))
        except BaseException as exc:
            self.queue.put(_Done(None, exc))

    def _queued(self, text: str) -> None:  # in the worker
        if self._abandoned:
            raise Abandoned()
        self.queue.put(text)

    def wake(self) -> None:
        """From any thread: make the waiting turn look at its cancellation now."""
        self.queue.put(_WAKE)

    def events(self) -> Generator[AgentEvent, None, LLMResponse]:
        """The call's text deltas (with ``deltas``), then its response.

        Raises:
            RetryableLLMError: no answer within the model timeout.
            TurnCancelledError: the turn was force-released while it waited.
            Exception: what the model call raised.
        """
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
            self._abandoned = True  # a no-op once the call is done
            if self._token is not None:
                self.plan.state.stop_stream(self._token)

    def _next(self) -> object:
        try:
            item = self.queue.get(timeout=max(self.deadline - time.monotonic(), 0.0))
        except queue.Empty:
            raise timed_out(self.plan, self.context) from None
        if self.plan.thinker.cancelled is not None and not isinstance(item, _Done):
            raise cancelled_error(self.plan)
        return item
