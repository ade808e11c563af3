"""Process knobs, documented together: what a process may tune and what each costs.

- ``turn_gate`` / ``TurnGate``: admission control. A turn's CPU steps take a slot of the
  process's gate, let go at every wait (a model call, a tool, an fsync), so thousands of
  threads do not thrash the interpreter lock (``_gate``). On by default where it pays
  (``_gate.gating``): ``Chat.send`` holds it for its turn, the service for each obtain,
  save and release a thread makes; code may hold it around a whole turn of its own.
- The interpreter's switch interval (``sys.setswitchinterval``, 5 ms by default) is the
  application's, never changed here; it is the lever for thousands of threads. CPython
  3.11's thread waiting for the interpreter lock wakes every interval to ask for it, so a
  host with N threads ready to run pays N wake-ups per interval: past the CPU's ceiling
  the backlog waits there and the process spends its time in the kernel. Measured with
  ``benchmarks/host.py --chats 5000 --start together`` (a 1 s model, 2 shared cores), 5 ms
  against 50 ms: the hand-written floor 267 against 1,786 turns/s (5.7 against 0.59 ms of
  CPU a turn, 149 against 24 voluntary context switches a turn), the bare service path
  119 against 775 (12.9 against 1.2 ms), ``send`` 406 against 522 (2.6 against 1.8 ms).
  A longer interval lets a CPU-bound thread keep the interpreter longer before another
  runs (latency of the others' short steps), so it is the application's call;
  ``host.py --switch-interval`` measures it on every path alike.
- ``set_model_limits(model_or_provider, ...)``: the one limiter of the model calls to one
  model, or to every model of one provider, across every chat of the process: calls in
  flight, requests per minute, tokens per minute (input plus output, or each apart). A call
  books one request, the conversation's input estimate and its output reserve (the wire
  ``max_tokens``) before it is sent, waits for room in arrival order (``_limiter``), and
  is settled against the reported usage after (an input-token limit counts no tokens read
  from the prompt cache, as Anthropic's does not). ``follow_catalog_limits()`` makes a model
  with no setting follow its catalog entry's ``rate_limits`` (a documented first tier).
  None by default: a model call waits in its turn's own thread (``Chat.send``) or task
  (``Chat.asend``), so a host's concurrency towards a slow model is its number of chats,
  bounded by its CPU, not by a fixed pool. ``set_provider_concurrency(provider, n)`` is
  ``set_model_limits(provider, concurrency=n)``.
- The agent's model and tool workers are started as needed, never capped (a call waits for
  its model or its tool, never for a thread): ``Chat.stream``'s model calls and every sync
  tool call run on them. The asyncio path's saves need none:
  ``ConversationService.save_async`` commits on the loop, once per turn of it.
- ``host_collector``: the cyclic garbage collector's youngest generation grown to 50,000
  objects while a block runs (the interpreter's 700); ``parlour serve`` serves under it.
- ``one_core``: keep every thread of the process on one CPU while a block runs.

``host_collector`` in detail. A turn that waits on its model keeps its state alive for the
model's latency (on ``asend`` about 70 objects the collector tracks: the task's coroutines,
the request, the turn's plan), beside the 64 a live conversation keeps. With the
interpreter's thresholds (700, 10, 10) that state outlives two young collections and is
promoted to the oldest generation, and every quarter the oldest grows by starts a full
collection, which visits every conversation's objects with the interpreter lock held.
Measured with ``benchmarks/host.py --chats 2000 --turns 10`` (a 1 s model, 2 shared
cores), ``asend``: 13 full collections in 16 s, 0.1-0.3 s each, 0.22 ms of the turn's
0.73 ms of CPU spent collecting, and the pauses in every turn's latency. With a young
generation of 50,000 a turn's state mostly ends before a collection finds it: one young
collection a second and no full one in the run (see ``benchmarks/README.md`` for the
figures). parlour's turns make next to no cycles (416 cyclic objects in those 20,000
turns; a test holds it under one in ten), so the bigger generation holds little garbage;
an application that makes many cycles gets them collected less often, in fewer, longer
young collections. Process-wide, so the application's to choose: enter it once, at
start-up, around serving.

``one_core`` in detail. The threads of a Python process take turns at one interpreter lock,
and py-lmdb lets it go around every LMDB call. A thread that lets it go wakes one that waits
for it; when that one sleeps on another CPU the wake is an inter-processor interrupt (on a
virtual machine, an exit to the hypervisor), and the first thread, back a microsecond later,
waits in turn. On one CPU the same hand-over is a plain context switch. Measured with
``benchmarks/turns.py`` on a two-core virtual machine: a durable turn on 8 threads took 0.34
ms of CPU spread over both cores and 0.27 ms on one, at 7% more turns a second (0.25 ms and
15% with the whole process started on one CPU, ``taskset -c 0``), and restores from LMDB ran
at 13,600 a second instead of 7,600. Work that needs no interpreter (the kernel's share of
an fsync) is the one thing one CPU slows: a process that does mostly that, like the hand-
written loop the benchmark measures against, runs slower pinned.

Linux only (``os.sched_setaffinity``); elsewhere the block runs as it is.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from parlour.runtime import Clock, ModelSpec, RateLimits

from ._gate import TurnGate, turn_gate
from ._limiter import Booking, BookingTooLargeError, Limiter, LimiterStatistics, Timer

__all__ = [
    "Booking",
    "BookingTooLargeError",
    "Limiter",
    "LimiterStatistics",
    "TurnGate",
    "follow_catalog_limits",
    "host_collector",
    "limiter_for",
    "limits_for",
    "one_core",
    "set_model_limits",
    "set_provider_concurrency",
    "turn_gate",
]

_TASKS = Path("/proc/self/task")
HOST_YOUNG = 50_000  # objects: ``host_collector``'s youngest generation

_set: dict[str, Limiter] = {}  # the application's, by model id or provider
_followed: dict[str, Limiter] = {}  # the catalog's, by model id, made on first use
_follow: list[tuple[Clock | None, Timer | None]] = []  # one entry: the catalog is followed
_guard = threading.Lock()


def set_model_limits(
    model_or_provider: str,
    *,
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    input_tokens_per_minute: int | None = None,
    output_tokens_per_minute: int | None = None,
    concurrency: int | None = None,
    clock: Clock | None = None,
    timer: Timer | None = None,
) -> Limiter | None:
    """Limit the model calls to one model (its id) or to every model of one provider (its
    name: ``anthropic``, ``openai``, ``bedrock``, ``scripted``) across every chat of the
    process, replacing what was set for that name; with no limit given, lift it. A call
    follows the setting of its model's id, else its provider's, else (when
    ``follow_catalog_limits`` is on) its catalog entry's: the first found, never a mix.
    Calls already in flight settle with the limiter they booked on.

    ``clock`` and ``timer`` are seams for tests (a ``FakeClock``; a timer that moves it).
    Returns the limiter (None when lifted), for its ``statistics()``.

    Raises:
        ValueError: a limit is not a whole number of at least 1.
    """
    limits = RateLimits(
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
        input_tokens_per_minute=input_tokens_per_minute,
        output_tokens_per_minute=output_tokens_per_minute,
        concurrency=concurrency,
    )
    with _guard:
        if limits.empty:
            _set.pop(model_or_provider, None)
            return None
        limiter = _set[model_or_provider] = Limiter(model_or_provider, limits, clock, timer)
        return limiter


def set_provider_concurrency(provider: str, limit: int | None) -> None:
    """``set_model_limits(provider, concurrency=limit)``: cap the model calls in flight to
    ``provider`` (every limit set for it before is replaced), or lift it (``None``).

    Raises:
        ValueError: ``limit`` is below 1.
    """
    if limit is not None and (type(limit) is not int or limit < 1):
        raise ValueError(f"The concurrency cap of {provider} must be at least 1, not {limit}.")
    set_model_limits(provider, concurrency=limit)


def limits_for(model_or_provider: str) -> RateLimits | None:
    """What the application set for this model id or provider (None: nothing)."""
    limiter = _set.get(model_or_provider)
    return None if limiter is None else limiter.limits


def follow_catalog_limits(
    follow: bool = True, *, clock: Clock | None = None, timer: Timer | None = None
) -> None:
    """Make a call to a model the application set nothing for (neither its id nor its
    provider) follow its catalog entry's ``rate_limits``, or stop (``follow=False``). Off by
    default: the catalog's figures are one tier's, and an account of a higher tier would
    be throttled below what it pays for, so a process opts in. ``ModelSpec.custom`` models,
    and entries with no figures, stay unlimited."""
    with _guard:
        _followed.clear()
        _follow.clear()
        if follow:
            _follow.append((clock, timer))


def limiter_for(spec: ModelSpec) -> Limiter | None:
    """The limiter a call to ``spec`` books on: its id's setting, else its provider's, else
    its catalog entry's when followed; None when nothing limits it."""
    if not _set and not _follow:
        return None  # the default: one test on every model call
    limiter = _set.get(spec.id) or _set.get(spec.provider)
    if limiter is not None or not _follow or spec.rate_limits is None:
        return limiter
    with _guard:
        if not _follow:
            return None
        limiter = _followed.get(spec.id)
        if limiter is None or limiter.limits != spec.rate_limits:
            clock, timer = _follow[0]
            limiter = _followed[spec.id] = Limiter(spec.id, spec.rate_limits, clock, timer)
        return limiter


@contextlib.contextmanager
def host_collector(young: int = HOST_YOUNG) -> Iterator[tuple[int, int, int]]:
    """Let the garbage collector's youngest generation grow to ``young`` tracked objects
    while the block runs, the older generations' thresholds as they were; after the block
    the thresholds before it are back. Yields the thresholds in effect. Process-wide: enter
    it once, around serving (see the module's docstring for what it gains).

    Raises:
        ValueError: ``young`` is not a whole number of at least 1.
    """
    if type(young) is not int or young < 1:
        raise ValueError(f"The young generation's threshold must be at least 1, not {young!r}.")
    before = gc.get_threshold()
    gc.set_threshold(young, *before[1:])
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*before)


@contextlib.contextmanager
def one_core(cpu: int | None = None) -> Iterator[int | None]:
    """Keep every thread of this process on ``cpu`` (default: the lowest this thread may
    use) while the block runs; threads started meanwhile inherit it. After the block every
    thread gets back the CPUs it had (one started inside: those this thread had). Yields
    the CPU, or None where threads cannot be pinned (no ``os.sched_setaffinity``).

    A thread started during the entry by a thread not yet pinned may stay unpinned: enter
    at start-up, before the threads that do the work, or around them.

    Raises:
        ValueError: ``cpu`` is not one this thread may run on.
    """
    if not hasattr(os, "sched_setaffinity") or not _TASKS.is_dir():
        yield None
        return
    allowed = os.sched_getaffinity(0)
    chosen = min(allowed) if cpu is None else cpu
    if chosen not in allowed:
        raise ValueError(f"CPU {chosen} is not one this process may use: {sorted(allowed)}.")
    before: dict[int, set[int]] = {}
    for tid in _threads():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {chosen})
    try:
        yield chosen
    finally:
        for tid in _threads():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, before.get(tid, allowed))


def _threads() -> list[int]:
    """The ids of this process's threads now (the kernel's, as ``threading.get_native_id``)."""
    return [int(entry.name) for entry in _TASKS.iterdir()]
