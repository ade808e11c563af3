"""The model workers: the threads that make the sync path's model calls while each turn's
thread waits for its answer (``_calls.ThreadedCall``).

Thread-safety: ``submit`` from any thread (see ``Workers``); the process's workers are
created once, under a lock, and again in a forked child.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable

from loguru import logger

from ..tuning import MODEL_WORKERS

__all__ = ["MODEL_WORKERS", "Raised", "Workers", "model_workers"]


class Raised:
    """What a model call raised, carried back to the turn's thread."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


Job = tuple[Callable[[], object], "queue.SimpleQueue[object]"]


class Workers:
    """A fixed set of daemon threads, all started up front, each waiting on a lock of its
    own. A job (a function and the queue its result goes to) is handed to the worker that
    went idle last (one wake, of the thread whose caches are warmest: no shared queue that
    wakes whichever waited longest); with every worker busy it waits in a backlog that the
    next worker to finish takes, in arrival order. A worker puts a job's result as its very
    last step before it sleeps again (its bookkeeping done first), so the thread woken by
    the result does not find the worker still holding the interpreter. Lighter than an
    executor (no future, no condition variable).

    Thread-safety: ``submit`` from any thread; one lock orders the idle list and the
    backlog, so a job never waits while a worker is idle. A job reports its own errors as
    its result; one that raises anyway is logged, its worker kept alive.
    """

    def __init__(self, count: int, name: str) -> None:
        self._guard = threading.Lock()
        self._idle: list[_Worker] = []
        self._backlog: deque[Job] = deque()
        for n in range(count):
            self._idle.append(_Worker(self, f"{name}_{n}"))

    def submit(self, fn: Callable[[], object], result: queue.SimpleQueue[object]) -> None:
        """Run ``fn`` on a worker and put what it returns into ``result``."""
        with self._guard:
            if not self._idle:
                self._backlog.append((fn, result))
                return
            worker = self._idle.pop()
        worker.job = (fn, result)
        worker.go.release()

    def after(self, worker: _Worker) -> Job | None:
        """The backlog's next job for ``worker``, else None and ``worker`` is idle again."""
        with self._guard:
            if self._backlog:
                return self._backlog.popleft()
            self._idle.append(worker)
            return None


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
            while job is not None:
                fn, result = job
                try:
                    item = fn()
                except BaseException as exc:  # pragma: no cover - a job reports its own errors
                    logger.opt(exception=exc).error("a model worker's job raised")
                    item = Raised(exc)
                job = after(self)
                result.put(item)
                del fn, result, item


_model_workers: Workers | None = None
_guard = threading.Lock()


def model_workers() -> Workers:
    """The process's model workers (``MODEL_WORKERS`` threads), started on first use (again
    in a forked child, whose parent's threads did not come along)."""
    global _model_workers
    workers = _model_workers
    if workers is not None:
        return workers
    with _guard:
        if _model_workers is None:
            _model_workers = Workers(MODEL_WORKERS, "parlour-model")
        return _model_workers


def _forget_workers() -> None:  # in a forked child: no parent thread, no lock it held
    global _model_workers, _guard
    _model_workers, _guard = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_workers)
