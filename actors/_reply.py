"""The pykka actor the package's actors are: no thread of its own, ``Reply`` futures, and
no global registry for the many.

A ``LightActor``'s mailbox is drained by whichever thread sends to it while nobody else is
draining it (a calling-thread dispatcher, as Akka's and Orleans' schedulers run an
activation on whatever worker has it): an ask to an idle actor is answered in the asker's
own thread, with no thread switch, and a live actor costs no thread at all. It stays a
pykka actor (``ActorRef.ask``/``tell``/``stop``/``proxy`` work) whose one mailbox is
processed by exactly one thread at a time, in FIFO order (see ``Mailbox``).

pykka's ``ThreadingFuture`` waits on a ``threading.Condition``: building, entering,
notifying and waiting on one costs several Python-level lock operations per reply.
``Reply`` waits on a bare lock, held from creation until the value is set.
"""

from __future__ import annotations

import itertools
import logging
import queue
import sys
import threading
import uuid
from types import TracebackType
from typing import Any, ClassVar, Self

import pykka

from ._stopping import Stopped, Tombstone

ExcInfo = tuple[Any, Any, Any]
_UNSET = pykka.Future().__dict__["_get_hook_result"]  # pykka's "no hook result yet"


class Reply(pykka.ThreadingFuture[Any]):
    """One actor reply: set once (by the thread draining the actor), got by any threads.

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
    """What a mailbox holds: pykka's ``Envelope``'s two fields."""

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


_URN_PREFIX = uuid.uuid4().urn[:-12]  # one random draw per process, a counter per actor
_urns = itertools.count(1)
_pykka_log = logging.getLogger("pykka")
_STOP = pykka.messages._ActorStop
# What pykka's own _handle_receive handles (a stop, the proxy's calls); the rest is ours.
_PYKKA_MESSAGES = frozenset(
    {_STOP, pykka.messages.ProxyCall, pykka.messages.ProxyGetAttr, pykka.messages.ProxySetAttr}
)


class Mailbox:
    """A ``LightActor``'s inbox, drained by the threads that put into it.

    ``put`` appends, then, while the queue is not empty and the claim (a bare lock) can be
    taken without waiting, drains the queue until it is empty and lets the claim go. A
    sender that finds the claim taken just returns: the thread holding it re-checks the
    queue after letting the claim go, so a message appended meanwhile is drained by one
    of them, never stranded. So exactly one thread at a time runs the actor's handlers,
    in the order the messages were appended (FIFO, and per sender the order it sent), and
    a handler that sends to its own actor, or to one whose drain is further up its own
    thread's stack, only appends (no deadlock, no reordering). A handler must never wait
    for an answer from such an actor: nobody else will drain it.

    The claim is held from construction until ``open`` (the actor's launch): messages sent
    before queue, and ``on_start`` runs before any of them.

    Once the actor has stopped, the thread draining (or the next to put) answers every
    queued ask with ``pykka.ActorDeadError`` (a queued stop with None), so no ask is ever
    left unanswered.

    Thread-safety: ``put`` from any thread, also from the actor's own handlers.
    """

    __slots__ = ("_actor", "_claim", "_queue")

    def __init__(self, actor: LightActor) -> None:
        # the one strong reference a live actor has (its refs hold this); a tombstone once
        # it stopped
        self._actor: LightActor | Tombstone = actor
        # a list, not a deque: an idle actor's empty list holds no item block (a deque keeps
        # one of about 700 bytes), and the queue is rarely longer than a message or two
        self._queue: list[Any] = []
        self._claim = threading.Lock()
        self._claim.acquire()  # until open(): nothing is handled before on_start

    def put(self, envelope: Any, /) -> None:
        """Append, and drain unless another thread is draining.

        Raises:
            BaseException: what a handler run by this thread raised that is not an
                ``Exception`` (``KeyboardInterrupt``): the actor has stopped, every ask
                still queued is answered ``pykka.ActorDeadError``.
        """
        self._queue.append(envelope)
        self._run()

    def get(self) -> Any:
        """The oldest queued envelope (pykka's inbox protocol; nothing here reads it).

        Raises:
            IndexError: the queue is empty.
        """
        return self._queue.pop(0)

    def empty(self) -> bool:
        return not self._queue

    def open(self) -> None:
        """Let the claim go for the first time (the launch), draining what queued."""
        self._claim.release()
        self._run()

    def bury(self) -> None:
        """The actor has stopped: keep its name and stop flag instead of the actor, so it
        is freed when nothing else holds it (no cycle through its refs)."""
        actor = self._actor
        if isinstance(actor, LightActor):
            self._actor = Tombstone(str(actor.actor_ref), actor.actor_stopped)

    def _run(self) -> None:
        pending, claim = self._queue, self._claim
        while pending and claim.acquire(blocking=False):
            try:
                self._drain()
            except BaseException:
                claim.release()
                self._actor.actor_stopped.set()
                self.reject()  # what queued while this thread held the claim
                raise
            claim.release()

    def _drain(self) -> None:
        """Handle every queued message, the claim held (pykka's loop body, message by
        message, with its answers, logs and failure hooks)."""
        actor, pending = self._actor, self._queue
        if isinstance(actor, Tombstone):
            self.reject()
            return
        stopped = actor.actor_stopped
        while pending:
            if stopped.is_set():
                self.reject()
                return
            envelope = pending.pop(0)
            reply = envelope.reply_to
            try:
                response = actor._handle_receive(envelope.message)
            except Exception:
                if reply is None:
                    actor._fail(sys.exc_info())
                else:
                    _pykka_log.info(f"Exception returned from {actor} to caller:", exc_info=True)
                    reply.set_exception()
            except BaseException:
                actor._interrupted(reply)
                raise
            else:
                if reply is not None:
                    reply.set(response)

    def reject(self) -> None:
        """Answer everything queued as pykka's teardown does (the actor has stopped; safe
        without the claim: each envelope is popped by one thread)."""
        pending = self._queue
        while pending:
            try:
                envelope = pending.pop(0)
            except IndexError:
                return
            reply = envelope.reply_to
            if reply is None:
                continue
            if envelope.message.__class__ is _STOP:
                reply.set(None)
            else:
                reply.set_exception(exc_info=_dead(self._actor, "stopped before handling"))


def _dead(actor: LightActor | Tombstone, what: str) -> ExcInfo:
    error = pykka.ActorDeadError(f"{actor.actor_ref} {what} the message")
    return (pykka.ActorDeadError, error, None)


class LightActor(pykka.Actor):
    """A pykka actor with no thread of its own: its ``Mailbox`` is drained by the threads
    that send to it, its replies are ``Reply`` futures. With ``registered = False`` it
    stays out of pykka's global ``ActorRegistry`` (one lock and a list scan per start and
    stop): whoever starts it is its registry and must stop it (the supervisor, for
    conversation actors). A live actor that nothing references any more is collected.

    Hooks run as pykka's: ``on_start`` before the first message (in the launching thread),
    ``on_stop`` in the handler that stops it, ``on_failure`` after a told message's handler
    raised (the actor then stops; an asked one's exception goes to the asker). A handler
    interrupted by a ``BaseException`` (``KeyboardInterrupt`` in the draining thread)
    stops this actor only (``on_stop``), its ask and every queued one answered
    ``pykka.ActorDeadError``; the exception goes on in the thread it was raised in.
    Handlers run in the sending thread's ``contextvars`` context.

    ``launch`` is pykka's ``start`` in two steps, so a message can be answered between
    construction and launch (``answer_first``)."""

    registered: ClassVar[bool] = True
    actor_inbox: Mailbox

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:  # pykka's, with a cheap URN
        self.actor_urn = f"{_URN_PREFIX}{next(_urns) & 0xFFFFFFFFFFFF:012x}"
        self.actor_inbox = Mailbox(self)
        self.actor_stopped = Stopped()
        self._actor_ref = pykka.ActorRef(self)

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> pykka.ActorRef[Self]:
        return cls(*args, **kwargs).launch()

    def launch(self) -> pykka.ActorRef[Self]:
        """Register (when ``registered``), run ``on_start`` and open the mailbox."""
        if self.registered:
            pykka.ActorRegistry.register(self.actor_ref)
        self._start_actor_loop()
        return self.actor_ref

    def answer_first(self, message: Any) -> Reply:
        """Handle ``message`` in the calling thread, before ``launch``: nobody else can
        reach the actor yet, so this is its first message.

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
        """``on_start`` in the launching thread, the claim still held, then open."""
        try:
            self.on_start()
        except Exception:
            self._handle_failure(*sys.exc_info())
        except BaseException:
            self.actor_stopped.set()
            raise
        finally:
            self.actor_inbox.open()

    def _stop(self) -> None:  # pykka's, without the registry when unregistered
        if self.registered:
            pykka.ActorRegistry.unregister(self.actor_ref)
        self.actor_stopped.set()
        try:
            self.on_stop()
        except Exception:
            self._handle_failure(*sys.exc_info())
        self.actor_inbox.bury()

    def _fail(self, exc_info: ExcInfo) -> None:
        """A told message's handler raised: pykka's failure path (log, stop, on_failure)."""
        self._handle_failure(*exc_info)
        try:
            self.on_failure(*exc_info)
        except Exception:
            self._handle_failure(*sys.exc_info())
        self.actor_inbox.bury()

    def _interrupted(self, reply: Any) -> None:
        """A ``BaseException`` cut a handler short: stop, answering its ask as dead."""
        if reply is not None:
            reply.set_exception(exc_info=_dead(self, "was interrupted handling"))
        self._stop()

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
    def _create_actor_inbox() -> Mailbox:
        raise NotImplementedError("a LightActor's inbox is a Mailbox of its own")

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        return Reply()
