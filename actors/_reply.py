"""The lighter pykka actor the package's actors are: ``Reply`` futures, a C inbox, pooled
threads, and no global registry for the many.

pykka's ``ThreadingFuture`` waits on a ``threading.Condition``: building, entering,
notifying and waiting on one costs several Python-level lock operations per reply, and a
turn makes a few replies (the acquire, and on a cold turn the spawn). ``Reply`` waits on a
bare lock, held from creation until the value is set.

pykka starts a ``threading.Thread`` per actor; a ``LightActor`` runs its loop on a daemon
thread of ``_Loops``, which serves the next actor once this one's loop has ended: still one
thread per live actor, but a restore reuses the thread a parked or evicted actor left.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import os
import queue
import sys
import threading
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any, ClassVar, Self

import pykka
from loguru import logger

ExcInfo = tuple[Any, Any, Any]
_UNSET = pykka.Future().__dict__["_get_hook_result"]  # pykka's "no hook result yet"


class Reply(pykka.ThreadingFuture[Any]):
    """One actor reply: set once (from the actor's thread), got by any number of threads.

    Its unset state lives in class attributes (pykka's ``Future.__init__`` is not run):
    building one is a lock and two attribute stores.

    Thread-safety: ``set``/``set_exception`` once from one thread, ``get`` from any.
    """

    _get_hook: Any = None  # pykka.Future's, unset
    _get_hook_result: Any = _UNSET
    _settled = False
    _value: Any = None
    _error: ExcInfo | None = None

    def __init__(self) -> None:
        self._ready = threading.Lock()
        self._ready.acquire()  # released once, by the setter

    @classmethod
    def settled(cls, value: Any = None, error: ExcInfo | None = None) -> Self:
        """A reply set already, built without a lock (``set`` on it raises ``queue.Full``)."""
        reply = cls.__new__(cls)
        reply._settled, reply._value, reply._error = True, value, error
        return reply

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


class _Envelope:
    """What pykka's actor loop reads from an inbox (its ``Envelope``'s two fields)."""

    __slots__ = ("message", "reply_to")

    def __init__(self, message: Any, reply_to: Reply | None = None) -> None:
        self.message = message
        self.reply_to = reply_to


def ask_nowait(ref: pykka.ActorRef[Any], message: Any) -> Reply:
    """``ref.ask(message, block=False)`` for a ``LightActor``, without pykka's generic
    steps; the reply holds ``pykka.ActorDeadError`` when the actor has stopped.

    Thread-safety: any thread."""
    reply = Reply()
    if ref.actor_stopped.is_set():
        dead = pykka.ActorDeadError(f"{ref} not found")
        reply._settle(None, (pykka.ActorDeadError, dead, None))
    else:
        ref.actor_inbox.put(_Envelope(message, reply))  # type: ignore[arg-type]
    return reply


def tell(ref: pykka.ActorRef[Any], message: Any) -> None:
    """``ref.tell(message)`` for a ``LightActor``, without pykka's generic steps.

    Raises:
        pykka.ActorDeadError: the actor has stopped.
    """
    if ref.actor_stopped.is_set():
        raise pykka.ActorDeadError(f"{ref} not found")
    ref.actor_inbox.put(_Envelope(message))  # type: ignore[arg-type]


class _Loops:
    """Daemon threads that run actor loops, one after another: a thread whose loop ended
    waits for the next one (at most ``keep_idle`` wait; any more end). When none waits, a
    starter thread starts a new one, so ``run`` never waits for a thread to start (a
    ``Thread.start`` waits for the new thread to get the GIL and signal: hundreds of µs
    under load); the loop waits in the queue meanwhile, its inbox filling as usual.

    Thread-safety: ``run`` from any thread. A forked child starts over with no threads.
    """

    def __init__(self, keep_idle: int, on_idle: Callable[[bool], None] | None = None) -> None:
        self._on_idle = on_idle  # a test seam: called True when a thread waits, False as it ends
        self._keep_idle = keep_idle
        self._names = itertools.count(1)
        self._reset()

    def _reset(self) -> None:
        self._loops: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._starts: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a loop, less the loops queued for them
        self._starter: threading.Thread | None = None

    def run(self, loop: Callable[[], None]) -> None:
        """Run ``loop`` on a waiting thread, or on a new one when none waits."""
        self._loops.put(loop)
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                return
            if self._starter is None:
                self._starter = self._thread(self._start_threads, "parlour-actor-starter")
        self._starts.put(None)

    def _start_threads(self) -> None:
        while True:
            self._starts.get()
            try:
                self._thread(self._serve, f"parlour-actor-{next(self._names)}")
            except RuntimeError:  # out of threads: the loop waits for one to end
                logger.exception("could not start a thread for an actor loop")

    @staticmethod
    def _thread(target: Callable[[], None], name: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread

    def _serve(self) -> None:
        while True:
            contextvars.Context().run(self._loops.get())  # each as on a thread of its own
            with self._lock:
                keep = self._idle < self._keep_idle
                self._idle += keep
            if self._on_idle is not None:
                self._on_idle(keep)
            if not keep:
                return


_LOOPS = _Loops(keep_idle=256)
os.register_at_fork(after_in_child=_LOOPS._reset)
_URN_PREFIX = uuid.uuid4().urn[:-12]  # one random draw per process, a counter per actor
_urns = itertools.count(1)
_pykka_log = logging.getLogger("pykka")
# What pykka's own _handle_receive handles (a stop, the proxy's calls); the rest is ours.
_PYKKA_MESSAGES = frozenset(
    {
        pykka.messages._ActorStop,
        pykka.messages.ProxyCall,
        pykka.messages.ProxyGetAttr,
        pykka.messages.ProxySetAttr,
    }
)


class LightActor(pykka.ThreadingActor):
    """A threading actor with a C inbox (``queue.SimpleQueue``, no condition variables)
    and ``Reply`` futures: about half of pykka's cost per message. Its loop runs on a
    pooled daemon thread (``_Loops``). With ``registered = False`` it stays out of pykka's
    global ``ActorRegistry`` (one lock and a list scan per start and stop): whoever starts
    it is its registry and must stop it (the supervisor, for conversation actors).

    ``launch`` is pykka's ``start`` in two steps, so a message can be answered between
    construction and launch (``answer_first``)."""

    use_daemon_thread = True
    registered: ClassVar[bool] = True

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:  # pykka's, with a cheap URN
        self.actor_urn = f"{_URN_PREFIX}{next(_urns) & 0xFFFFFFFFFFFF:012x}"
        self.actor_inbox = self._create_actor_inbox()
        self.actor_stopped = threading.Event()
        self._actor_ref = pykka.ActorRef(self)

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> pykka.ActorRef[Self]:
        return cls(*args, **kwargs).launch()

    def launch(self) -> pykka.ActorRef[Self]:
        """Register (when ``registered``) and start the actor's loop; its ref."""
        if self.registered:
            pykka.ActorRegistry.register(self.actor_ref)
        self._start_actor_loop()
        return self.actor_ref

    def answer_first(self, message: Any) -> Reply:
        """Handle ``message`` in the calling thread, before ``launch``: nobody else can
        reach the actor yet, so this is its first message, answered without a thread hop.

        Thread-safety: only by the thread that constructed the actor, before ``launch``.
        """
        try:
            return Reply.settled(self.on_receive(message))
        except Exception:
            return Reply.settled(None, sys.exc_info())

    def _handle_receive(self, message: Any) -> Any:
        """pykka's, with our own messages first: one set lookup instead of four isinstance."""
        if message.__class__ in _PYKKA_MESSAGES:
            return super()._handle_receive(message)
        return self.on_receive(message)

    def _start_actor_loop(self) -> None:
        _LOOPS.run(self._actor_loop)

    def _stop(self) -> None:  # pykka's, without the registry when unregistered
        if self.registered:
            pykka.ActorRegistry.unregister(self.actor_ref)
        self.actor_stopped.set()
        try:
            self.on_stop()
        except Exception:
            self._handle_failure(*sys.exc_info())

    def _handle_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:  # pykka's, without the registry when unregistered
        _pykka_log.error(
            f"Unhandled exception in {self}:",
            exc_info=(exception_type, exception_value, traceback),  # type: ignore[arg-type]
        )
        if self.registered:
            pykka.ActorRegistry.unregister(self.actor_ref)
        self.actor_stopped.set()

    @staticmethod
    def _create_actor_inbox() -> queue.SimpleQueue[Any]:
        return queue.SimpleQueue()

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        return Reply()
