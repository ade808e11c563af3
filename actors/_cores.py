"""``one_core``: keep every thread of the process on one CPU while a block runs.

The threads of a Python process take turns at one interpreter lock, and py-lmdb lets it go
around every LMDB call. A thread that lets it go wakes one that waits for it; when that one
sleeps on another CPU the wake is an inter-processor interrupt (on a virtual machine, an
exit to the hypervisor), and the first thread, back a microsecond later, waits in turn.
On one CPU the same hand-over is a plain context switch. Measured with
``benchmarks/turns.py`` on a two-core virtual machine: a durable turn on 8 threads took
0.34 ms of CPU spread over both cores and 0.27 ms on one, at 7% more turns a second (0.25
ms and 15% with the whole process started on one CPU, ``taskset -c 0``), and restores from
LMDB ran at 13,600 a second instead of 7,600. Work that needs no interpreter
(the kernel's share of an fsync) is the one thing one CPU slows: a process that does mostly
that, like the hand-written loop the benchmark measures against, runs slower pinned.

Linux only (``os.sched_setaffinity``); elsewhere the block runs as it is.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["one_core"]

_TASKS = Path("/proc/self/task")


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
