"""The workers: daemon threads that make the calls a turn waits for without making them
itself. ``model_workers`` make ``Chat.stream``'s model calls while each turn's thread waits
for its deltas and answer (``_calls.ThreadedCall``; ``Chat.send`` makes its model call in
its own thread and needs none); ``tool_workers`` make every sync tool call, and the sync
path's async ones (``_tools``). Neither has a cap: a call waits for its model or its tool,
never for a worker, and a tool that never returns holds one thread, not a place every other
chat's tools queue behind; being daemons, threads stuck in such calls never hold up the
process's exit.

Thread-safety: ``submit`` from any thread (see ``Workers``); the process's workers are
created once, under a lock, and again in a forked child.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from typing import Protocol

from loguru import logger

__all__ = ["OnLoop", "Raised", "Sink", "Workers", "model_workers", "tool_workers"]


class Raised:
    """What a model call raised, carried back to the turn's thread."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class Sink(Protocol):
    """Where a job's result goes: a ``queue.SimpleQueue``, or anything with its ``put``."""

    def put(self, item: object, /) -> None: ...


class OnLoop:
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
    idle (never a cap: a model call waits for its model, never for a worker; the threads
    stay for the next peak). A job (a function and the queue its result goes to) is handed
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
_model_workers: Workers | None = None
_tool_workers: Workers | None = None
_guard = threading.Lock()


def model_workers() -> Workers:
    """The process's model workers (a few started up front, more as needed), started on
    first use (again in a forked child, whose parent's threads did not come along)."""
    global _model_workers
    workers = _model_workers
    if workers is not None:
        return workers
    with _guard:
        if _model_workers is None:
            _model_workers = Workers(_PRESTARTED, "parlour-model")
        return _model_workers


def tool_workers() -> Workers:
    """The process's tool workers, as ``model_workers``."""
    global _tool_workers
    workers = _tool_workers
    if workers is not None:
        return workers
    with _guard:
        if _tool_workers is None:
            _tool_workers = Workers(_PRESTARTED, "parlour-tool")
        return _tool_workers


def _forget_workers() -> None:  # in a forked child: no parent thread, no lock it held
    global _model_workers, _tool_workers, _guard
    _model_workers, _tool_workers, _guard = None, None, threading.Lock()


os.register_at_fork(after_in_child=_forget_workers)
