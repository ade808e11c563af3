"""The model call's plumbing shared by both drivers: the process's workers, the booking
on the model's limiter (none unless the application sets one: ``tuning.set_model_limits``),
and the sync path's model calls. ``call_model`` (``send``) asks the model in the turn's own
thread: no worker, no cap but the host's chats and the limiter; a force release or the
model timeout stops it at its next streamed delta (a call that streams nothing is bounded
by the SDK, given the model timeout as the request's timeout, and a release is noticed
when it answers). ``stream_model`` (``stream``, whose caller reads each delta as it comes)
makes it in a model worker (``ThreadedCall``), which the turn waits for with the model
timeout as its deadline, waking at once on a force release. A client that answers inline
is asked in the turn's own thread either way.

A call to a limited model books one request, the conversation's input estimate and its
output reserve (``LLMClient.reservation``: the wire ``max_tokens`` of the same call) before
it is sent (``book`` in the turn's thread, ``abook`` on the loop), waiting for room at most
the model timeout (then a ``RetryableLLMError``, retried as a model timeout is) and giving
the wait up on a force release or a cancellation; the answer settles it (``close``).

Why this module is long: it is every step of a model call both drivers share (the workers,
the booking, the threaded and the inline call), so that each is made alike on every path.

Thread-safety: the workers are created under one lock and shared by every turn; a
``ThreadedCall`` belongs to one turn (its ``wake`` may be called from any thread).
"""

from __future__ import annotations

import asyncio
import functools
import queue
import time
from collections.abc import Generator
from typing import Any

from parlour.runtime import ConversationContext, LLMClient, LLMResponse
from parlour.runtime.errors import RetryableLLMError
from parlour.runtime.providers import Raised, caught, model_workers

from .._gate import waiting
from .._limiter import Booking, Limiter
from ..tuning import limiter_for
from ._events import AgentEvent, TurnCancelledError
from ._otel import OFF, model_attributes, span_on
from ._plan import TurnPlan
from ._tools import tool_workers

__all__ = [
    "Abandoned",
    "ThreadedCall",
    "abook",
    "book",
    "booking_for",
    "call_model",
    "cancelled_error",
    "close",
    "inline_call",
    "model_span",
    "no_room",
    "start_workers",
    "stream_model",
    "timed_out",
]


def start_workers() -> None:
    """Start the process's model and tool workers now (once per process); idempotent."""
    model_workers()
    tool_workers()


class Abandoned(Exception):
    """Raised inside a model call whose turn stopped listening, to end the call early."""


# -- the booking on the model's limiter ---------------------------------------------------------


def booking_for(client: LLMClient, context: ConversationContext) -> tuple[Limiter, int, int] | None:
    """The limiter the next call of ``context`` books on, with its input estimate and its
    output reserve (0 and 0 for a limiter that counts no tokens); None: no limiter."""
    binding = context.model_binding
    spec = binding.spec if binding is not None else None
    limiter = limiter_for(spec if spec is not None else client.spec)
    if limiter is None:
        return None
    if not (limiter.counts_input or limiter.counts_output):
        return limiter, 0, 0
    spec, reserve = client.reservation(context)
    return limiter, context.get_total_tokens(spec), reserve


def book(plan: TurnPlan, context: ConversationContext) -> Booking | None:
    """Book the call in this thread, waiting for room (a force release wakes the wait).

    Raises:
        TurnCancelledError: the turn was force-released before or while it waited.
        RetryableLLMError: no room within the model timeout.
        BookingTooLargeError: the call books more than a limit's whole bucket.
    """
    found = booking_for(plan.client, context)
    if found is None:
        return None
    limiter, estimate, reserve = found
    thinker = plan.thinker
    booking = limiter.book(
        estimate, reserve, timeout=plan.model_timeout_s, on_wait=thinker.set_cancel_hook
    )
    if thinker.cancelled is not None:
        if booking is not None:
            booking.cancel()  # never sent
        raise cancelled_error(plan)
    if booking is None:
        raise no_room(plan.client, limiter, context, plan.model_timeout_s)
    return booking


async def abook(plan: TurnPlan, context: ConversationContext) -> Booking | None:
    """Book the call from the loop without blocking it; cancelling the task (a force
    release does) gives the wait up.

    Raises:
        RetryableLLMError: no room within the model timeout.
        BookingTooLargeError: the call books more than a limit's whole bucket.
    """
    found = booking_for(plan.client, context)
    if found is None:
        return None
    limiter, estimate, reserve = found
    try:
        async with asyncio.timeout(plan.model_timeout_s):
            return await limiter.abook(estimate, reserve)
    except TimeoutError:
        raise no_room(plan.client, limiter, context, plan.model_timeout_s) from None


def close(booking: Booking | None, response: LLMResponse | None) -> None:
    """Settle ``booking`` against the answer's usage, or (no answer: the call raised) give
    its slot back and keep its tokens."""
    if booking is None:
        return
    if response is None:
        booking.release()
    else:
        usage = response.usage
        booking.settle(usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens or 0)


def no_room(
    client: LLMClient, limiter: Limiter, context: ConversationContext, timeout: float
) -> RetryableLLMError:
    """The retryable error of a call that found no room on its limiter in time."""
    return RetryableLLMError(
        f"Model {client.model_id} had no room under the limits set for {limiter.name} "
        f"within {timeout:g}s on conversation {context.conversation_id}."
    )


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


_WAKE = object()


class ThreadedCall:
    """One model call of ``stream``, made by a model worker, while the turn's thread waits
    at most the model timeout (the call is then abandoned: it stops at its next delta, its
    answer is dropped) and wakes at once when the turn is force-released.

    The call is handed to the worker as the turn's thread starts waiting, with nothing
    between the two, so the worker finds the interpreter free when it wakes. The text
    deltas come back through the call's queue, and ``events`` yields each as a
    ``TextDelta``; no delta of an abandoned call is published.
    """

    __slots__ = ("_abandoned", "context", "deadline", "plan", "queue")

    def __init__(self, plan: TurnPlan, context: ConversationContext) -> None:
        self.plan, self.context = plan, context
        self.queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._abandoned = False
        self.deadline = 0.0

    def _respond(self) -> object:  # in the worker
        return self.plan.client.respond(self.context, on_text=self._queued)

    def _queued(self, text: str) -> None:  # in the worker
        if self._abandoned:
            raise Abandoned()
        self.queue.put(text)

    def wake(self) -> None:
        """From any thread: make the waiting turn look at its cancellation now."""
        self.queue.put(_WAKE)

    def events(self) -> Generator[AgentEvent, None, LLMResponse]:
        """Make the call: its text deltas, then its response.

        Raises:
            RetryableLLMError: no answer within the model timeout.
            TurnCancelledError: the turn was force-released while it waited.
            Exception: what the model call raised.
        """
        try:
            item = self._start()
            while True:
                if type(item) is Raised:
                    raise item.error
                if isinstance(item, str):
                    yield self.plan.state.publish_delta(item)
                elif item is not _WAKE:
                    return item  # type: ignore[return-value]
                item = self._next()
        finally:
            self._end()

    def _end(self) -> None:
        """Stop listening: a later delta is dropped (a no-op once the call is done)."""
        self._abandoned = True

    def _start(self) -> object:
        """Hand the call to a worker and wait for its first word."""
        plan = self.plan
        if plan.thinker.cancelled is not None:
            raise cancelled_error(plan)
        timeout = plan.model_timeout_s
        self.deadline = time.monotonic() + timeout
        model_workers().submit(functools.partial(caught, self._respond), self.queue)
        try:
            item = self.queue.get(timeout=timeout)
        except queue.Empty:
            raise timed_out(plan, self.context) from None
        return self._checked(item)

    def _next(self) -> object:
        try:
            item = self.queue.get(timeout=max(self.deadline - time.monotonic(), 0.0))
        except queue.Empty:
            raise timed_out(self.plan, self.context) from None
        return self._checked(item)

    def _checked(self, item: object) -> object:
        """``item``, unless the turn was released: then its cancellation, whatever came (an
        answer that beat the wake-up is dropped: a released turn never adds it)."""
        if self.plan.thinker.cancelled is not None:
            raise cancelled_error(self.plan)
        return item


# -- the sync path's model call, as the driver makes it ----------------------------------------


def model_span(plan: TurnPlan) -> Any:
    if plan.tracer is None:
        return OFF
    spec = plan.client.spec
    return span_on(
        plan.tracer,
        "chat " + spec.id,
        **{"gen_ai.operation.name": "chat", "gen_ai.system": spec.provider},
        **{"gen_ai.request.model": spec.id},
    )


def stream_model(
    plan: TurnPlan, context: ConversationContext
) -> Generator[AgentEvent, None, LLMResponse]:
    """The model call, its text deltas yielded as events (``stream``)."""
    if plan.client.answers_inline:
        deltas: list[str] = []
        try:
            return inline_call(plan, context, deltas)
        finally:  # what streamed before a raise (a truncation, say) streamed all the same
            for text in deltas:
                yield plan.state.publish_delta(text)
    booking, call = _begin_call(plan, context)
    response = None
    try:
        with model_span(plan) as current:
            response = yield from call.events()
            model_attributes(current, response)
            return response
    finally:
        close(booking, response)


def call_model(plan: TurnPlan, context: ConversationContext) -> LLMResponse:
    """The model call of a caller that reads only the reply (``send``), in the turn's own
    thread (no generator, no worker). Each delta goes to the turn's log for joiners; a
    force release, or the model timeout passing, refuses the next one, which ends the call.

    Raises:
        TurnCancelledError: the turn was force-released before the call, during it (at its
            next delta) or while it answered.
        RetryableLLMError: a delta came past the model timeout.
        Exception: what the model call raised.
    """
    if plan.client.answers_inline:
        return inline_call(plan, context, None)
    with waiting():  # the model's wait: a gated turn lets the gate go meanwhile
        _before_call(plan, context)
        booking, response = book(plan, context), None
        try:
            with model_span(plan) as current:
                response = _call_here(plan, context)
                model_attributes(current, response)
                return response
        finally:
            close(booking, response)


def _call_here(plan: TurnPlan, context: ConversationContext) -> LLMResponse:
    thinker = plan.thinker
    if thinker.cancelled is not None:
        raise cancelled_error(plan)
    deadline = time.monotonic() + plan.model_timeout_s
    sink, token = plan.state.text_sink(Abandoned)

    def on_text(text: str) -> None:  # a release or the timeout refuses the delta
        if thinker.cancelled is not None or time.monotonic() > deadline:
            raise Abandoned()
        sink(text)

    try:
        # the SDK bounds a call that streams nothing (no delta to refuse) by this timeout
        response = plan.client.respond(context, on_text=on_text, timeout_s=plan.model_timeout_s)
    except Abandoned:
        if thinker.cancelled is not None:
            raise cancelled_error(plan) from None
        raise timed_out(plan, context) from None
    finally:
        plan.state.stop_stream(token)
    if thinker.cancelled is not None:  # released while it answered: the answer is dropped
        raise cancelled_error(plan)
    return response


def inline_call(
    plan: TurnPlan, context: ConversationContext, deltas: list[str] | None
) -> LLMResponse:
    """The model call of a client that answers inline, in the turn's own thread: it cannot
    block, so there is no timeout to watch and no force release to wake for. A release
    before the call, or during it, raises ``TurnCancelledError`` (an answer that came
    meanwhile is dropped, as a worker's is). Given ``deltas``, its text deltas go into it,
    for the caller to publish and yield; else the whole text is published as one delta,
    for the turn's followers (nobody reads it in pieces, and it comes at once anyway)."""
    _before_call(plan, context)
    if plan.thinker.cancelled is not None:
        raise cancelled_error(plan)
    booking, response = book(plan, context), None
    try:
        with model_span(plan) as current:
            response = plan.client.respond(
                context, on_text=deltas.append if deltas is not None else None
            )
            model_attributes(current, response)
    finally:
        close(booking, response)
    if plan.thinker.cancelled is not None:
        raise cancelled_error(plan)
    if deltas is None and (text := response.text):
        plan.state.publish_text(text)
    return response


def _before_call(plan: TurnPlan, context: ConversationContext) -> None:
    """The application's ``before_model_call`` hook, if any; it may wait, so a gated turn
    lets the gate go for it."""
    if plan.before_model_call is not None:
        with waiting():
            plan.before_model_call(context, plan.ledger)


def _begin_call(
    plan: TurnPlan, context: ConversationContext
) -> tuple[Booking | None, ThreadedCall]:
    """The hook, the booking on the model's limiter if there is one (a force release wakes
    its wait), then the call (cancelled by a force release from now on)."""
    _before_call(plan, context)
    booking = book(plan, context)
    call = ThreadedCall(plan, context)
    plan.thinker.set_cancel_hook(call.wake)
    return booking, call
