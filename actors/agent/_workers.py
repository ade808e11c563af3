"""The model workers: the threads that make ``Chat.stream``'s model calls while each turn's
thread waits for its deltas and answer (``_calls.ThreadedCall``). ``Chat.send`` makes its
model call in its own thread and needs none.

Thread-safety: ``submit`` from any thread (see ``Workers``); the process's workers are
created once, under a lock, and again in a forked child.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

from loguru import logger

__all__ = ["Raised", "Workers", "model_workers"]


class Raised:
    """What a model call raised, carried back to the turn's thread."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


Job = tuple[Callable[[], object], "queue.SimpleQueue[object]"]


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
        self._name = name
        self._idle: list[_Worker] = []
        self._started = 0
        for _ in range(count):
            self._idle.append(self._start_one())

    def submit(self, fn: Callable[[], object], result: queue.SimpleQueue[object]) -> None:
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
            name = f"{self._name}_{self._started}"
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
    """One model worker: its thread sleeps on ``go`` until a job is handed to it."""

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
                logger.opt(exception=exc).error("a model worker's job raised")
                item = Raised(exc)
            after(self)
            result.put(item)
            del fn, result, item


_PRESTARTED = 8  # enough for a few streams at once without starting a thread for each
_model_workers: Workers | None = None
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


def _forget_workers() -> None:  # in a forked child: no parent thread, no lock it held
    global _model_workers, _guard
    _model_workers, _guard = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_workers)
