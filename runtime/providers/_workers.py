"""The workers: daemon threads that make the blocking calls a turn or a loop waits for
without making them itself. ``model_workers`` make the model calls of a client over a
blocking SDK awaited on a loop (``LLMClient.arespond``'s default: boto3) and
``Chat.stream``'s (the turn's thread waits for its deltas); the agent keeps its own set for
tool calls. No set has a cap: a call waits for its model or its tool, never for a worker (a
loop's default executor has min(32, CPUs + 4) threads: six model calls at once on two
cores), a call that never returns holds one thread, not a place every other call queues
behind, and a daemon stuck in such a call never holds up the process's exit.

Thread-safety: ``submit`` from any thread (see ``Workers``); a process's set is created
once, under a lock, and again in a forked child (``ProcessWorkers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

from loguru import logger

__all__ = [
    "ProcessWorkers",
    "Raised",
    "Sink",
    "Workers",
    "called_on",
    "caught",
    "model_workers",
]


class Raised:
    """What a job raised, carried back to whoever waits for its result."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class Sink(Protocol):
    """Where a job's result goes: a ``queue.SimpleQueue``, or anything with its ``put``."""

    def put(self, item: object, /) -> None: ...


class _OnLoop:
    """A worker's result handed to a future on its loop (dropped when the loop has closed
    or the future was given up meanwhile)."""

    __slots__ = ("answer", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, answer: asyncio.Future[object]) -> None:
        self.loop, self.answer = loop, answer

    def put(self, item: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self.loop.call_soon_threadsafe(self._settle, item)

    def _settle(self, item: object) -> None:
        if not self.answer.done():
            self.answer.set_result(item)


Job = tuple[Callable[[], object], Sink]


class Workers:
    """Daemon threads, ``count`` started up front and one more whenever a job finds none
    idle (never a cap: a call waits for what it calls, never for a worker; the threads stay
    for the next peak). A job (a function and the queue its result goes to) is handed
    to the worker that went idle last (one wake, of the thread whose caches are warmest: no
    shared queue that wakes whichever waited longest). A worker puts a job's result as its
    very last step before it sleeps again (its bookkeeping done first), so the thread woken
    by the result does not find the worker still holding the interpreter. Lighter than an
    executor (no future, no condition variable).

    Thread-safety: ``submit`` from any thread; one lock orders the idle list. A job reports
    its own errors as its result; one that raises anyway is logged, its worker kept alive.
    """

    def __init__(self, count: int, name: str) -> None:
        self._guard = threading.Lock()
        self.name = name
        self._idle: list[_Worker] = []
        self._started = 0
        for _ in range(count):
            self._idle.append(self._start_one())

    def submit(self, fn: Callable[[], object], result: Sink) -> None:
        """Run ``fn`` on a worker (an idle one, else a new one) and put what it returns
        into ``result``."""
        with self._guard:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = self._start_one()
        worker.job = (fn, result)
        worker.go.release()

    def _start_one(self) -> _Worker:
        with self._guard:
            self._started += 1
            name = f"{self.name}_{self._started}"
        return _Worker(self, name)

    @property
    def started(self) -> int:
        """How many worker threads this set has started."""
        return self._started

    def after(self, worker: _Worker) -> None:
        """``worker`` is idle again."""
        with self._guard:
            self._idle.append(worker)


class _Worker:
    """One worker: its thread sleeps on ``go`` until a job is handed to it."""

    __slots__ = ("_pool", "go", "job")

    def __init__(self, pool: Workers, name: str) -> None:
        self._pool = pool
        self.job: Job | None = None
        self.go = threading.Lock()
        self.go.acquire()
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        after = self._pool.after
        while True:
            self.go.acquire()
            job, self.job = self.job, None
            assert job is not None
            fn, result = job
            del job
            try:
                item = fn()
            except BaseException as exc:  # pragma: no cover - a job reports its own errors
                logger.opt(exception=exc).error("a {} job raised", self._pool.name)
                item = Raised(exc)
            after(self)
            result.put(item)
            del fn, result, item


_PRESTARTED = 8  # enough for a few calls at once without starting a thread for each


class ProcessWorkers:
    """A process's set of ``Workers``, its first few started on the first call (again in a
    forked child, whose parent's threads did not come along)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._workers: Workers | None = None
        self._guard = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def __call__(self) -> Workers:
        workers = self._workers
        if workers is not None:
            return workers
        with self._guard:
            if self._workers is None:
                self._workers = Workers(_PRESTARTED, self.name)
            return self._workers

    def _forget(self) -> None:  # in a forked child: no parent thread, no lock it held
        self._workers, self._guard = None, threading.Lock()


model_workers = ProcessWorkers("parlour-model")


async def called_on(workers: ProcessWorkers, fn: Callable[[], Any]) -> Any:
    """``fn()`` made on one of ``workers`` while the calling task awaits it: what it
    returned, or what it raised, raised here. A cancelled awaiter leaves it to finish (its
    result dropped)."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[object] = loop.create_future()
    workers().submit(functools.partial(caught, fn), _OnLoop(loop, answer))
    value = await answer
    if type(value) is Raised:
        raise value.error
    return value


def caught(fn: Callable[[], object]) -> object:
    """``fn()``, or what it raised as ``Raised``: a job that reports its own errors."""
    try:
        return fn()
    except BaseException as exc:
        return Raised(exc)
