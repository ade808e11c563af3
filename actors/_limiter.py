"""The model-call limiter: how many calls one model (or provider) gets in flight, requests
per minute and tokens per minute, across every chat of the process.

A call books before it is sent: one request, its input estimate and its output reserve (the
exact wire ``max_tokens``: Anthropic and Bedrock pre-debit it from their own bucket, so a
smaller local booking would overflow theirs). Each per-minute limit is a token bucket of
that capacity, full at the start, refilled continuously at capacity/60 a second on an
injected ``Clock``, never above capacity; so in any window of ``w`` seconds a bucket lets at
most ``capacity + capacity * w / 60`` through, as the providers' own buckets do. After the
answer the booking is settled against the reported usage: what was not used goes back (an
overrun is taken, the level may go below zero and the next bookings wait for it). A call
that raised keeps its tokens (the provider may have counted them) and gives its slot back.

Waiters are served in arrival order: only the head of the queue is ever granted, so a large
booking is never starved by small ones behind it. A waiter is woken when room frees: a
settle, a release, or the head's refill time, for which the limiter arms a ``Timer`` (a
process-wide alarm thread unless one is injected; with a ``FakeClock`` tests move time and
call ``tick``). A thread waits on an event of its own (``book``), a task on a loop future
completed with ``call_soon_threadsafe`` (``abook``: never blocking the loop); a wait that
is given up (timeout, a force release, a cancelled task) leaves the queue and is never
granted later (a grant that raced it is given back whole). A booking larger than a
bucket's whole capacity could never be granted: ``BookingTooLargeError`` at once.

Why this module is long: the buckets, the FIFO queue, its two kinds of waiter and the
alarm that wakes them share one lock and one set of invariants, so they stay together.

Thread-safety: one lock per limiter; every method may be called from any thread.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol

import msgspec
from loguru import logger

from parlour.runtime import Clock, RateLimits, SystemClock
from parlour.runtime.errors import UncorrectableLLMError

__all__ = [
    "Booking",
    "BookingTooLargeError",
    "Limiter",
    "LimiterStatistics",
    "Timer",
]

_MEASURES = (  # a bucket's limit field, and what of a booking it counts
    ("requests_per_minute", "requests"),
    ("tokens_per_minute", "tokens"),
    ("input_tokens_per_minute", "input tokens"),
    ("output_tokens_per_minute", "output tokens"),
)


class BookingTooLargeError(UncorrectableLLMError):
    """A call books more than a limit's whole bucket: no wait could ever grant it."""


class Timer(Protocol):
    """Calls ``fn`` once, ``delay`` seconds on the limiter's clock from now, from another
    thread (never before ``call_later`` returns)."""

    def call_later(self, delay: float, fn: Callable[[], None]) -> None: ...


class LimiterStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A limiter now: calls in flight, waiters, bookings granted so far, and what each
    bucket holds (None: that measure is unlimited)."""

    in_flight: int
    waiting: int
    granted: int
    requests: float | None
    tokens: float | None
    input_tokens: float | None
    output_tokens: float | None


class _Bucket:
    """One per-minute limit. ``slack`` forgives the float error of a refill (a billionth of
    the capacity), so a waiter woken at its refill time is granted, never re-armed by a
    hair's breadth that the clock's resolution cannot pass."""

    __slots__ = ("at", "capacity", "level", "measure", "rate", "slack")

    def __init__(self, capacity: int, measure: str, now: float) -> None:
        self.capacity, self.measure = capacity, measure
        self.level, self.rate, self.at = float(capacity), capacity / 60.0, now
        self.slack = max(capacity * 1e-9, 1e-6)

    def refill(self, now: float) -> None:
        if now > self.at:
            self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
            self.at = now

    def amount(self, input_tokens: int, output_tokens: int, cache_read: int = 0) -> int:
        """What a call of these tokens takes from this bucket: input tokens count but the
        ones read from the prompt cache (as Anthropic counts its input limit), tokens all
        of them (as OpenAI and Bedrock count theirs)."""
        measure = self.measure
        if measure == "requests":
            return 1
        if measure == "input tokens":
            return input_tokens - cache_read
        if measure == "output tokens":
            return output_tokens
        return input_tokens + output_tokens

    def give(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)


class Booking:
    """Room booked on a limiter for one call; closed exactly once (later closes do nothing).

    Attributes:
        input_tokens, output_tokens: what was booked (the estimate, the output reserve).
    """

    __slots__ = ("_closed", "input_tokens", "limiter", "output_tokens")

    def __init__(self, limiter: Limiter, input_tokens: int, output_tokens: int) -> None:
        self.limiter, self.input_tokens, self.output_tokens = limiter, input_tokens, output_tokens
        self._closed = False

    def settle(self, input_tokens: int, output_tokens: int, cache_read: int = 0) -> None:
        """The call answered with this usage (``input_tokens`` the whole input, of which
        ``cache_read`` came from the prompt cache): the unused part goes back, an overrun
        is taken."""
        self.limiter._close(self, input_tokens, output_tokens, cache_read, request_back=False)

    def release(self) -> None:
        """The call was sent and raised: its tokens stay booked (the provider may have
        counted them), its slot is free."""
        self.limiter._close(self, self.input_tokens, self.output_tokens, request_back=False)

    def cancel(self) -> None:
        """The call was never sent: everything booked goes back, the request included."""
        self.limiter._close(self, 0, 0, request_back=True)


class _Ticket:
    """One waiter: a thread's (``event``) or a task's (``future`` on ``loop``)."""

    __slots__ = ("booking", "event", "future", "input_tokens", "loop", "output_tokens")

    def __init__(self, input_tokens: int, output_tokens: int) -> None:
        self.input_tokens, self.output_tokens = input_tokens, output_tokens
        self.booking: Booking | None = None
        self.event: threading.Event | None = None
        self.future: asyncio.Future[Booking] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None


class Limiter:
    """The limits of one model (or provider), shared by every call to it.

    Args:
        name: the model id or provider it limits (for messages).
        limits: what it allows; an empty ``RateLimits`` allows anything.
        clock: the clock buckets refill on (``SystemClock`` unless given).
        timer: wakes the head waiter at its refill time (the process's alarm thread, on
            real seconds, unless given).
    """

    def __init__(
        self,
        name: str,
        limits: RateLimits,
        clock: Clock | None = None,
        timer: Timer | None = None,
    ) -> None:
        self.name, self.limits = name, limits
        self.clock = clock or SystemClock()
        self.timer = timer or _alarm()
        now = self.clock.now()
        self._buckets = [
            _Bucket(capacity, measure, now)
            for field, measure in _MEASURES
            if (capacity := getattr(limits, field)) is not None
        ]
        self.counts_input = any(b.measure in ("tokens", "input tokens") for b in self._buckets)
        self.counts_output = any(b.measure in ("tokens", "output tokens") for b in self._buckets)
        self._concurrency = limits.concurrency
        self._in_flight = self._granted = 0
        self._queue: deque[_Ticket] = deque()
        self._armed_at: float | None = None
        self._lock = threading.Lock()

    # -- booking ---------------------------------------------------------------------------------

    def try_book(self, input_tokens: int = 0, output_tokens: int = 0) -> Booking | None:
        """Book now if nobody waits and there is room, else None (nothing queued).

        Raises:
            BookingTooLargeError: the booking is larger than a bucket's capacity.
        """
        self._check(input_tokens, output_tokens)
        with self._lock:
            if not self._queue and self._fits(input_tokens, output_tokens):
                return self._grant(input_tokens, output_tokens)
        return None

    def book(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        *,
        timeout: float | None = None,
        on_wait: Callable[[Callable[[], None]], None] | None = None,
    ) -> Booking | None:
        """Book, waiting in this thread in arrival order for room; None when the wait was
        given up: ``timeout`` passed, or the wake-up ``on_wait`` was handed (called once,
        as the wait begins: a cancellation hook) was called. A wait given up is never
        granted later.

        Raises:
            BookingTooLargeError: the booking is larger than a bucket's capacity.
        """
        booking = self.try_book(input_tokens, output_tokens)
        if booking is not None:
            return booking
        ticket = _Ticket(input_tokens, output_tokens)
        ticket.event = event = threading.Event()
        with self._lock:
            self._queue.append(ticket)
            self._pump()
        if on_wait is not None:
            on_wait(event.set)
        event.wait(timeout)
        return self._leave(ticket)

    async def abook(self, input_tokens: int = 0, output_tokens: int = 0) -> Booking:
        """Book, awaiting room in arrival order without blocking the loop. Cancelling the
        awaiting task gives the wait up: it is never granted later (a grant that raced the
        cancellation is given back whole).

        Raises:
            BookingTooLargeError: the booking is larger than a bucket's capacity.
        """
        booking = self.try_book(input_tokens, output_tokens)
        if booking is not None:
            return booking
        ticket = _Ticket(input_tokens, output_tokens)
        ticket.loop = loop = asyncio.get_running_loop()
        future: asyncio.Future[Booking] = loop.create_future()
        ticket.future = future
        with self._lock:
            self._queue.append(ticket)
            self._pump()
        try:
            return await future
        except asyncio.CancelledError:
            granted = self._leave(ticket)
            if granted is not None:
                granted.cancel()
            raise

    def tick(self) -> None:
        """Grant what the clock's time has made room for (the timer calls it; a test that
        moved a ``FakeClock`` calls it too)."""
        with self._lock:
            self._pump()

    def statistics(self) -> LimiterStatistics:
        """In flight, waiting, granted so far, and each bucket's level now."""
        with self._lock:
            now = self.clock.now()
            levels: dict[str, float | None] = dict.fromkeys(m for _, m in _MEASURES)
            for bucket in self._buckets:
                bucket.refill(now)
                levels[bucket.measure] = bucket.level
            return LimiterStatistics(
                in_flight=self._in_flight,
                waiting=len(self._queue),
                granted=self._granted,
                requests=levels["requests"],
                tokens=levels["tokens"],
                input_tokens=levels["input tokens"],
                output_tokens=levels["output tokens"],
            )

    # -- inside ----------------------------------------------------------------------------------

    def _check(self, input_tokens: int, output_tokens: int) -> None:
        for bucket in self._buckets:
            amount = bucket.amount(input_tokens, output_tokens)
            if amount > bucket.capacity:
                raise BookingTooLargeError(
                    f"A call to {self.name} books {amount:,} {bucket.measure}, more than its "
                    f"limit of {bucket.capacity:,} {bucket.measure} per minute could ever "
                    "grant: declare a smaller output, or raise the limit "
                    "(parlour.actors.tuning.set_model_limits)."
                )

    def _fits(self, input_tokens: int, output_tokens: int) -> bool:
        if self._concurrency is not None and self._in_flight >= self._concurrency:
            return False
        if not self._buckets:
            return True
        now = self.clock.now()
        for bucket in self._buckets:
            bucket.refill(now)
            if bucket.level + bucket.slack < bucket.amount(input_tokens, output_tokens):
                return False
        return True

    def _grant(self, input_tokens: int, output_tokens: int) -> Booking:
        for bucket in self._buckets:
            bucket.level -= bucket.amount(input_tokens, output_tokens)
        self._in_flight += 1
        self._granted += 1
        return Booking(self, input_tokens, output_tokens)

    def _undo(self, booking: Booking) -> None:
        booking._closed = True
        for bucket in self._buckets:
            bucket.give(bucket.amount(booking.input_tokens, booking.output_tokens))
        self._in_flight -= 1
        self._granted -= 1

    def _pump(self) -> None:
        """Grant the queue's head while it fits; arm the timer for the head's refill time
        when only time can make room for it. Called with the lock held."""
        queue = self._queue
        while queue:
            head = queue[0]
            if not self._fits(head.input_tokens, head.output_tokens):
                self._arm(head)
                return
            queue.popleft()
            head.booking = booking = self._grant(head.input_tokens, head.output_tokens)
            if head.event is not None:
                head.event.set()
                continue
            assert head.loop is not None and head.future is not None
            try:
                head.loop.call_soon_threadsafe(_resolve, head.future, booking)
            except RuntimeError:  # its loop is closed: nobody will take it
                self._undo(booking)

    def _arm(self, head: _Ticket) -> None:
        if self._concurrency is not None and self._in_flight >= self._concurrency:
            return  # a slot given back wakes it
        now = self.clock.now()
        delay = max(
            (b.amount(head.input_tokens, head.output_tokens) - b.level) / b.rate
            for b in self._buckets
        )
        due = now + max(delay, 0.0)
        if self._armed_at is not None and self._armed_at <= due and self._armed_at > now:
            return  # an earlier alarm is pending; it re-arms if need be
        self._armed_at = due
        self.timer.call_later(max(delay, 0.0), self._alarm_rang)

    def _alarm_rang(self) -> None:
        with self._lock:
            self._armed_at = None
            self._pump()

    def _leave(self, ticket: _Ticket) -> Booking | None:
        """The waiter's booking if it was granted; else it leaves the queue for good."""
        with self._lock:
            if ticket.booking is not None:
                return ticket.booking
            self._queue.remove(ticket)  # only a grant takes it out, and that sets booking
            self._pump()  # the next waiter may fit now
            return None

    def _close(
        self,
        booking: Booking,
        input_tokens: int,
        output_tokens: int,
        cache_read: int = 0,
        *,
        request_back: bool,
    ) -> None:
        with self._lock:
            if booking._closed:
                return
            booking._closed = True
            self._in_flight -= 1
            now = self.clock.now()
            for bucket in self._buckets:
                bucket.refill(now)
                if bucket.measure == "requests":
                    if request_back:
                        bucket.give(1)
                    continue
                booked = bucket.amount(booking.input_tokens, booking.output_tokens)
                bucket.give(booked - bucket.amount(input_tokens, output_tokens, cache_read))
            self._pump()


def _resolve(future: asyncio.Future[Booking], booking: Booking) -> None:
    """On the waiter's loop: hand it its booking (a cancelled waiter gives it back itself)."""
    if not future.done():
        future.set_result(booking)


class _Alarm:
    """The process's alarm thread: calls each function at its time on the system clock
    (one daemon thread, started on first use, asleep when nothing is due)."""

    def __init__(self) -> None:
        self._clock = SystemClock()
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._changed = threading.Condition()
        threading.Thread(target=self._run, name="parlour-limiter-alarm", daemon=True).start()

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        with self._changed:
            heapq.heappush(self._due, (self._clock.now() + delay, next(self._seq), fn))
            self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > self._clock.now():
                    wait = self._due[0][0] - self._clock.now() if self._due else None
                    self._changed.wait(wait)
                _, _, fn = heapq.heappop(self._due)
            try:
                fn()
            except Exception as exc:  # an alarm's failure must not stop the others
                logger.opt(exception=exc).error("a limiter's alarm failed")


_the_alarm: _Alarm | None = None
_alarm_guard = threading.Lock()


def _alarm() -> _Alarm:
    global _the_alarm
    with _alarm_guard:
        if _the_alarm is None:
            _the_alarm = _Alarm()
        return _the_alarm
