"""Turn workloads shared by ``parlour demo``, ``parlour bench`` and the benchmarks: many
agent chats driven by a pool of threads, every turn a whole ``Chat.send``; and Ctrl-C as a
request to stop between turns (``ctrl_c_stops``)."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import FrameType

import msgspec

from ..agent._chat import Chat


def get_current_time() -> str:
    """The current date and time in UTC, as ISO 8601."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class TurnStats(msgspec.Struct, frozen=True):
    """What a workload measured: turns, wall time, per-turn latencies (seconds)."""

    turns: int
    seconds: float
    latencies: list[float]

    @property
    def turns_per_second(self) -> float:
        return self.turns / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def drive(
    chats: Sequence[Chat],
    texts: Callable[[int, int], str],
    turns: int,
    workers: int,
    *,
    on_turn: Callable[[], None] | None = None,
    stop: threading.Event | None = None,
) -> TurnStats:
    """Run ``turns`` turns on every chat, ``workers`` threads at once.

    Each chat's turns run in order on one worker; chats interleave. ``on_turn`` is called
    (from the worker threads) after every turn. Once ``stop`` is set (``ctrl_c_stops``
    sets it), no new turn starts.

    Raises:
        KeyboardInterrupt: Ctrl-C (or a turn raising it, or ``stop`` set): no new turn
            starts, the running ones finish, then it is raised. Anything a turn raises
            passes through.
    """
    stop = stop or threading.Event()

    def one_chat(index: int) -> list[float]:
        latencies = []
        for turn in range(turns):
            if stop.is_set():
                break
            start = time.perf_counter()
            chats[index].send(texts(index, turn))
            latencies.append(time.perf_counter() - start)
            if on_turn is not None:
                on_turn()
        return latencies

    start = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        per_chat = [f.result() for f in [pool.submit(one_chat, i) for i in range(len(chats))]]
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if stop.is_set():
        raise KeyboardInterrupt
    seconds = time.perf_counter() - start
    latencies = [x for xs in per_chat for x in xs]
    return TurnStats(turns=len(latencies), seconds=seconds, latencies=latencies)


@contextlib.contextmanager
def ctrl_c_stops() -> Iterator[threading.Event]:
    """Ctrl-C, while inside, sets the event it yields instead of raising in whatever the
    main thread runs: a ``KeyboardInterrupt`` raised inside a store's commit would fail it
    midway (and log the failure), so the work checks the event between turns and stops
    there (``drive`` does, given it). A second Ctrl-C exits at once with status 130, as a
    kill would: every turn saved before it is durable.

    Only from the main thread (signal handlers live there); elsewhere it yields an event
    nothing sets.
    """
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            print("\ninterrupted again: stopped at once", file=sys.stderr, flush=True)
            os._exit(130)
        stop.set()

    previous = signal.signal(signal.SIGINT, handle)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def stop_point(stop: threading.Event) -> None:
    """Raise ``KeyboardInterrupt`` when ``stop`` is set: a clean place to stop, between turns."""
    if stop.is_set():
        raise KeyboardInterrupt
