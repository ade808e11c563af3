"""The model-call limiter on its own: token buckets on an injected clock, settlement, FIFO
waiters in threads and tasks, gave-up waits, bookings no bucket could hold."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.actors.tuning import Booking, BookingTooLargeError, Limiter
from parlour.runtime import RateLimits
from parlour.runtime.testing import FakeClock

from .limiter_helpers import JumpingTimer, WatchedTimer

_STEP = st.one_of(
    st.tuples(st.just("book"), st.integers(0, 400), st.integers(0, 400)),
    st.tuples(st.just("settle"), st.integers(0, 50), st.floats(0, 1)),
    st.tuples(st.just("advance"), st.floats(0, 30), st.just(0)),
)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(_STEP, max_size=80))
def test_a_bucket_never_lets_more_through_in_any_window_than_its_limit_allows(
    steps: list[tuple[str, float, float]],
) -> None:
    clock = FakeClock()
    capacity = 1_000
    limiter = Limiter("m", RateLimits(tokens_per_minute=capacity), clock, WatchedTimer(clock))
    events: list[tuple[float, float]] = []  # (time, tokens taken; a refund is negative)
    open_: list[tuple[Booking, int]] = []
    for kind, a, b in steps:
        if kind == "book":
            got = limiter.try_book(int(a), int(b))
            if got is not None:
                events.append((clock.now(), a + b))
                open_.append((got, int(a + b)))
        elif kind == "settle" and open_:
            booking, booked = open_.pop(int(a) % len(open_))
            used = int(booked * b)
            before = limiter.statistics().tokens
            booking.settle(used, 0)
            events.append((clock.now(), -(booked - used)))
            assert before is not None
            assert limiter.statistics().tokens == pytest.approx(
                min(capacity, before + booked - used)
            )
        elif kind == "advance":
            clock.advance(a)
    for i, (start, _) in enumerate(events):
        taken = 0.0
        for at, amount in events[i:]:
            taken += amount
            assert taken <= capacity + capacity * (at - start) / 60 + 1e-3


def test_a_refused_booking_fits_once_the_bucket_refills_for_it() -> None:
    clock = FakeClock()
    limiter = Limiter("m", RateLimits(requests_per_minute=6), clock, WatchedTimer(clock))
    for _ in range(6):
        assert limiter.try_book() is not None
    assert limiter.try_book() is None
    clock.advance(9.99)  # one request refills in ten seconds
    assert limiter.try_book() is None
    clock.advance(0.02)
    assert limiter.try_book() is not None


def test_an_input_token_limit_counts_no_cache_reads_and_a_tokens_limit_counts_them() -> None:
    """Anthropic's input limit leaves out the input read from the prompt cache; a limit of
    input plus output tokens (OpenAI's, Bedrock's) counts every input token."""
    clock = FakeClock()
    itpm = Limiter("claude", RateLimits(input_tokens_per_minute=10_000), clock)
    tpm = Limiter("gpt", RateLimits(tokens_per_minute=10_000), clock)
    for limiter in (itpm, tpm):
        booking = limiter.try_book(8_000, 500)
        assert booking is not None
        booking.settle(9_000, 200, cache_read=7_000)  # 2,000 uncached
    assert itpm.statistics().input_tokens == 10_000 - 2_000
    assert tpm.statistics().tokens == 10_000 - 9_200
    assert itpm.try_book(8_000, 0) is not None  # the cached 7,000 left room
    assert tpm.try_book(8_000, 0) is None


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 1_000), min_size=2, max_size=12))
def test_waiting_tasks_are_granted_in_arrival_order_never_overtaken(sizes: list[int]) -> None:
    clock = FakeClock()
    timer = WatchedTimer(clock)
    limiter = Limiter("m", RateLimits(tokens_per_minute=1_000), clock, timer)
    granted: list[int] = []

    async def one(index: int) -> None:
        booking = await limiter.abook(0, sizes[index])
        granted.append(index)
        booking.settle(0, sizes[index])

    async def all_of_them() -> None:
        drain = limiter.try_book(0, 1_000)
        assert drain is not None
        tasks = [asyncio.create_task(one(i)) for i in range(len(sizes))]
        for _ in range(3):
            await asyncio.sleep(0)  # each task runs to its wait
        assert limiter.statistics().waiting == len(sizes)
        drain.settle(0, 1_000)
        while not all(t.done() for t in tasks):
            timer.ring()  # time passes only as the head needs it
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)

    asyncio.run(all_of_them())
    assert granted == list(range(len(sizes)))


def test_waiting_threads_are_granted_in_arrival_order() -> None:
    clock = FakeClock()
    timer = WatchedTimer(clock)
    limiter = Limiter("m", RateLimits(concurrency=1), clock, timer)
    holder = limiter.try_book()
    assert holder is not None
    order: list[int] = []
    threads = []
    for index in range(8):
        queued = threading.Event()

        def one(index: int = index, queued: threading.Event = queued) -> None:
            booking = limiter.book(timeout=30, on_wait=lambda wake: queued.set())
            assert booking is not None
            order.append(index)
            booking.settle(0, 0)

        thread = threading.Thread(target=one)
        thread.start()
        assert queued.wait(10)  # this one is in the queue before the next starts
        threads.append(thread)
    holder.settle(0, 0)
    for thread in threads:
        thread.join(10)
    assert order == list(range(8))
    assert limiter.statistics().in_flight == 0


def test_a_booking_larger_than_a_whole_bucket_is_refused_at_once() -> None:
    limiter = Limiter("claude-x", RateLimits(output_tokens_per_minute=8_000))
    with pytest.raises(BookingTooLargeError) as caught:
        limiter.book(10, 16_000, timeout=600)
    assert str(caught.value) == (
        "A call to claude-x books 16,000 output tokens, more than its limit of 8,000 output "
        "tokens per minute could ever grant: declare a smaller output, or raise the limit "
        "(parlour.actors.tuning.set_model_limits)."
    )
    assert limiter.statistics().waiting == 0 and limiter.statistics().granted == 0


def test_a_wait_given_up_is_never_granted_later_and_leaks_nothing() -> None:
    clock = FakeClock()
    timer = WatchedTimer(clock)
    limiter = Limiter("m", RateLimits(requests_per_minute=1, concurrency=4), clock, timer)
    first = limiter.try_book()
    assert first is not None
    assert limiter.book(timeout=0.01) is None  # timed out
    woken: list[object] = []

    def cancel_at_once(wake: Callable[[], None]) -> None:  # a force release, already made
        woken.append(wake)
        wake()

    assert limiter.book(timeout=30, on_wait=cancel_at_once) is None

    async def cancelled() -> None:
        task = asyncio.create_task(limiter.abook())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    first.settle(0, 0)
    timer.ring()
    clock.advance(600)
    limiter.tick()
    stats = limiter.statistics()
    assert (stats.granted, stats.in_flight, stats.waiting, stats.requests) == (1, 0, 0, 1.0)
    assert len(woken) == 1


def test_a_cancelled_booking_gives_back_its_request_and_a_failed_call_keeps_its_tokens() -> None:
    clock = FakeClock()
    limiter = Limiter(
        "m", RateLimits(requests_per_minute=10, tokens_per_minute=1_000), clock, WatchedTimer(clock)
    )
    never_sent = limiter.try_book(100, 200)
    assert never_sent is not None
    never_sent.cancel()
    assert (limiter.statistics().requests, limiter.statistics().tokens) == (10, 1_000)
    failed = limiter.try_book(100, 200)
    assert failed is not None
    failed.release()
    failed.settle(0, 0)  # closed once: later closes do nothing
    stats = limiter.statistics()
    assert (stats.requests, stats.tokens, stats.in_flight) == (9, 700, 0)


def test_an_answer_that_used_more_than_its_booking_is_taken_from_the_bucket() -> None:
    clock = FakeClock()
    limiter = Limiter("m", RateLimits(tokens_per_minute=1_000), clock, WatchedTimer(clock))
    booking = limiter.try_book(100, 100)
    assert booking is not None
    booking.settle(400, 100)
    assert limiter.statistics().tokens == 500
    assert limiter.try_book(0, 600) is None


def test_many_threads_and_tasks_share_one_limiter_at_its_rate() -> None:
    clock = FakeClock()
    timer = JumpingTimer(clock)
    limiter = Limiter("m", RateLimits(requests_per_minute=30, concurrency=5), clock, timer)
    times: list[float] = []
    lock = threading.Lock()

    def call() -> None:
        booking = limiter.book(timeout=60)
        assert booking is not None
        with lock:
            times.append(clock.now())
        booking.settle(0, 0)

    async def tasks() -> None:
        async def one() -> None:
            booking = await limiter.abook()
            with lock:
                times.append(clock.now())
            booking.settle(0, 0)

        await asyncio.gather(*(one() for _ in range(100)))

    threads = [threading.Thread(target=call) for _ in range(100)]
    threads.append(threading.Thread(target=asyncio.run, args=(tasks(),)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    timer.stop()
    assert len(times) == 200
    times.sort()
    for i, start in enumerate(times):
        for j in range(i, len(times)):
            assert j - i + 1 <= 30 + 30 * (times[j] - start) / 60 + 1e-6


def test_on_the_system_clock_the_alarm_thread_wakes_a_waiter_at_its_refill_time() -> None:
    limiter = Limiter("m", RateLimits(requests_per_minute=600))  # one request a tenth
    for _ in range(600):
        assert limiter.try_book() is not None
    started = limiter.clock.now()
    booking = limiter.book(timeout=30)  # woken by the process's alarm, not by its timeout
    waited = limiter.clock.now() - started
    assert booking is not None
    assert 0.09 <= waited < 10
