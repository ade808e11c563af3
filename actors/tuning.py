"""Process knobs, documented together: what a process may tune and what each costs.

- ``turn_gate`` / ``TurnGate``: admission control. A turn's CPU steps take a slot of the
  process's gate, let go at every wait (a model call, a tool, an fsync), so thousands of
  threads do not thrash the interpreter lock (``_gate``). On by default where it pays
  (``_gate.gating``): ``Chat.send`` holds it for its turn, the service for each obtain,
  save and release a thread makes; code may hold it around a whole turn of its own.
- ``set_provider_concurrency(provider, n)``: the one limiter of the model calls in flight to
  one provider across every chat of the process. None by default: a model call waits in its
  turn's own thread (``Chat.send``) or task (``Chat.asend``), so a host's concurrency towards
  a slow model is its number of chats, bounded by its CPU, not by a fixed pool.
- ``POOL_SIZES``: the process-wide thread pools the agent host starts (``obtain``: waits
  that must not block an event loop, a full limiter's included). The asyncio path's saves
  need none: ``ConversationService.save_async`` commits through the store's commit thread.
  ``Chat.stream``'s model calls run on workers started as needed, never capped.
- ``one_core``: keep every thread of the process on one CPU while a block runs.

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
import os
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ._gate import TurnGate, turn_gate

__all__ = [
    "POOL_SIZES",
    "TurnGate",
    "one_core",
    "provider_cap",
    "set_provider_concurrency",
    "turn_gate",
]

if TYPE_CHECKING:
    from parlour.runtime import LLMClient

_TASKS = Path("/proc/self/task")

POOL_SIZES = {"obtain": 32}

_caps: dict[str, queue.SimpleQueue[None]] = {}
_guard = threading.Lock()


Cap = queue.SimpleQueue
"""A provider's cap: a ``queue.SimpleQueue`` holding one ``None`` per free slot; ``get``
takes a slot (waiting for one), ``put(None)`` gives it back (two C calls per model call)."""


def _new_cap(limit: int) -> Cap[None]:
    cap: Cap[None] = queue.SimpleQueue()
    for _ in range(limit):
        cap.put(None)
    return cap


def set_provider_concurrency(provider: str, limit: int | None) -> None:
    """Cap the model calls in flight to ``provider`` across every chat of the process, or
    lift the cap (``None``, the default: no limit but the host's own chats). Calls already
    in flight give their slots back to the cap they took them from.

    Raises:
        ValueError: ``limit`` is below 1.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"The concurrency cap of {provider} must be at least 1, not {limit}.")
    with _guard:
        if limit is None:
            _caps.pop(provider, None)
        else:
            _caps[provider] = _new_cap(limit)


def provider_cap(client: LLMClient) -> Cap[None] | None:
    """The cap the application set for the client's provider, or None (no limit)."""
    return _caps.get(client.spec.provider)


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
