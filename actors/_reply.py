"""A pykka future for actor replies without a condition variable.

pykka's ``ThreadingFuture`` waits on a ``threading.Condition``: building, entering,
notifying and waiting on one costs several Python-level lock operations per reply, and a
turn makes a few replies (the acquire, and on a cold turn the forward, the spawn and a
parking). ``Reply`` waits on a bare lock, held from creation until the value is set.
"""

from __future__ import annotations

import queue
import sys
import threading
from typing import Any

import pykka

ExcInfo = tuple[Any, Any, Any]


class Reply(pykka.ThreadingFuture[Any]):
    """One actor reply: set once (from the actor's thread), got by any number of threads.

    Thread-safety: ``set``/``set_exception`` once from one thread, ``get`` from any.
    """

    def __init__(self) -> None:
        pykka.Future.__init__(self)
        self._settled = False
        self._value: Any = None
        self._error: ExcInfo | None = None
        self._ready = threading.Lock()
        self._ready.acquire()  # released once, by the setter

    def get(self, *, timeout: float | None = None) -> Any:
        if not self._settled:
            if self._get_hook is not None:
                return pykka.Future.get(self, timeout=timeout)
            if not self._ready.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
                raise pykka.Timeout(f"{timeout} seconds")
            self._ready.release()  # stays open for every later get
        if self._error is not None:
            kind, value, traceback = self._error
            raise (kind() if value is None else value).with_traceback(traceback)
        return self._value

    def set(self, value: Any | None = None) -> None:
        self._settle(value, None)

    def set_exception(self, exc_info: Any = None) -> None:
        self._settle(None, sys.exc_info() if exc_info is None else exc_info)

    def set_get_hook(self, func: Any) -> None:
        if self._settled:
            raise queue.Full
        pykka.Future.set_get_hook(self, func)

    def _settle(self, value: Any, error: ExcInfo | None) -> None:
        if self._settled or self._get_hook is not None:
            raise queue.Full
        self._value, self._error = value, error
        self._settled = True
        self._ready.release()


class LightActor(pykka.ThreadingActor):
    """A threading actor with a C inbox (``queue.SimpleQueue``, no condition variables)
    and ``Reply`` futures: about half of pykka's cost per message. Its thread is a daemon."""

    use_daemon_thread = True

    @staticmethod
    def _create_actor_inbox() -> queue.SimpleQueue[Any]:
        return queue.SimpleQueue()

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        return Reply()
