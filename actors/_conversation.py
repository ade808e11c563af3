"""ConversationActor: one activation of a live conversation, its owner, and its waiters.

Ownership is a lease handed through the mailbox. The actor has no thread of its own (its
handlers run in whichever thread is draining its mailbox, usually the sender's) and never
blocks it: a busy conversation queues the acquirer's delivery (FIFO) and completes it at
handoff.

Single activation: once the actor has agreed to stop (``StopIfIdle`` answered ``Idle``) or been
doomed (``Doom``), it is *retiring* and answers every later ``Acquire`` with ``Retiring``,
never a grant, so a caller that reached it through a stale reference looks again.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pykka
from loguru import logger

from parlour.runtime import Clock, ConversationContext
from parlour.runtime.errors import ConversationUnavailableError, not_owned

from ._messages import (
    Acquire,
    Busy,
    Doom,
    GaveUp,
    GiveUp,
    Granted,
    Holder,
    Idle,
    NotifyIdle,
    Owner,
    QueryHolder,
    QueryOwner,
    Queued,
    Release,
    Released,
    ReleaseForJob,
    Reobtain,
    Retiring,
    StopIfIdle,
    timeout_error,
)
from ._reply import LightActor

# nobody waits: one shared empty deque, never appended to (a deque's first block is about
# 700 bytes, a tenth of what an idle conversation holds otherwise); a queued request gets
# a deque of its own
_NO_WAITERS: deque[Acquire] = deque()
_NOT_OWNED = Released(owned=False)  # the answers are immutable: one of each
_RELEASED = Released(owned=True)
_RELEASED_TO_EVICT = Released(owned=True, evict=True)


class ConversationActor(LightActor):
    """Holds one ``ConversationContext``; serializes who may touch it.

    The context itself is mutated by the owner in the owner's thread for the length of the
    lease; everything that crosses owners (acquire, release, eviction) goes through here,
    one message at a time. It holds no thread, so a process that forgets ``stop()`` still
    exits. It is kept out of pykka's global registry: the supervisor is its registry and
    stops it.
    """

    registered = False

    def __init__(
        self, context: ConversationContext, clock: Clock, expires_at: float | None = None
    ) -> None:
        super().__init__()
        self.context = context
        self.conversation_id = context.conversation_id or ""
        self.clock = clock
        self.owner: Owner | None = None
        self.lease_retain_s = 0.0
        self.waiters = _NO_WAITERS
        self.idle_watchers: list[pykka.Future[None]] = []
        self.expires_at = clock.now() if expires_at is None else expires_at
        self.retiring = False
        self.doomed: str | None = None

    def on_receive(self, message: Any) -> Any:
        match message:
            case Acquire():
                return self._acquire(message)
            case Release(job_id, retain_s, released_at):
                return self._release(job_id, retain_s, released_at)
            case GiveUp(token, release_if_granted):
                return self._give_up(token, release_if_granted)
            case QueryOwner():
                return self._turn_owner()
            case QueryHolder(take_back_for):
                if take_back_for is not None and take_back_for == self.context.user_id:
                    self._take_back()
                return Holder(self._turn_owner(), self.context.user_id, self.context.stored)
            case StopIfIdle(expired_only, stop):
                return self._stop_if_idle(expired_only, stop)
            case ReleaseForJob(job_id):
                return self._release(job_id, 0.0)
            case Doom(reason, reload):
                return self._doom(reason, reload)
            case NotifyIdle(future):
                return self._notify_idle(future)
        raise TypeError(f"ConversationActor got an unknown message {message!r}")

    # -- the lease --------------------------------------------------------------------------

    def _acquire(self, request: Acquire) -> Granted | Queued | Retiring:
        """Grant now, queue, or refuse as retiring.

        Raises:
            PermissionError: the conversation belongs to another user; checked before
                anything else, so a foreign caller is never queued and learns nothing.
        """
        if self.retiring:
            return Retiring()
        user = self.context.user_id
        if user is not None and user != request.owner.user_id:
            raise not_owned(self.conversation_id, request.owner.user_id)
        owner = self.owner
        if owner is not None and owner.kept is not None and owner.job_id != request.owner.job_id:
            self._take_back()  # kept between its owner's turns: another owner needs it
        if self.owner is None or self.owner.job_id == request.owner.job_id:
            return Granted(self._grant(request))
        if request.delivery is None:
            raise ValueError(f"An Acquire of {self.conversation_id} that may wait needs a delivery")
        request.delivery.prepare()
        if self.waiters is _NO_WAITERS:
            self.waiters = deque()
        self.waiters.append(request)
        return Queued()

    def _grant(self, request: Acquire) -> ConversationContext:
        owner = request.owner
        previous = self.owner
        if previous is not None and previous.kept is not None and previous.kept is not owner.kept:
            previous.kept.take()  # the same job again: its older kept lease is spent
        if owner.kept is not None and self.waiters:
            owner.kept.wanted = True  # others wait: given back at this turn's end, not kept
        self.owner = owner
        self.lease_retain_s = request.retain_s
        self.context.user_id = owner.user_id
        self.context.workflow_id = owner.workflow_id
        return self.context  # expires_at is read only while unowned: set at release

    def _release(self, job_id: str, retain_s: float, released_at: float | None = None) -> Released:
        if self.owner is None or self.owner.job_id != job_id:
            return _NOT_OWNED
        released_job = self.owner.job_id
        if self.owner.kept is not None:  # its owner's next turn must not find it kept
            self.owner.kept.take()
        self.owner = None
        if self.doomed is not None:
            self.stop()  # already unregistered: nobody may take it over
            return _RELEASED
        if self._hand_over(released_job):
            return _RELEASED
        if self.idle_watchers:
            for watcher in self.idle_watchers:
                watcher.set(None)
            self.idle_watchers.clear()
        self.expires_at = (self.clock.now() if released_at is None else released_at) + retain_s
        return _RELEASED if retain_s > 0 else _RELEASED_TO_EVICT

    def _hand_over(self, released_job: str) -> bool:
        """Grant the first waiter still waiting (FIFO); True when one took the lease."""
        if not self.waiters:
            return False
        self._expire_waiters(released_job)
        while self.waiters:
            waiter = self.waiters.popleft()
            if not self.waiters:
                self.waiters = _NO_WAITERS
            context = self._grant(waiter)
            assert waiter.delivery is not None  # every queued request has one
            if waiter.delivery.grant(context):
                return True
            self.owner = None  # that waiter is gone (cancelled, or its loop closed)
        return False

    def _take_back(self, want: bool = True) -> None:
        """Take a lease kept between its owner's turns back when no turn of its runs (it is
        then released as it was at that turn's end, and handed to the first waiter). With
        ``want``, a running turn gives it back at its end."""
        owner = self.owner
        if owner is not None and owner.kept is not None and owner.kept.take(want):
            self._release(owner.job_id, self.lease_retain_s, owner.kept.idle_since)

    def _turn_owner(self) -> Owner | None:
        """The owner, or None while it keeps the lease between its turns."""
        owner = self.owner
        if owner is not None and owner.kept is not None and not owner.kept.in_turn():
            return None
        return owner

    def _expire_waiters(self, owner_job: str | None) -> None:
        if not self.waiters:
            return
        now = self.clock.now()
        keep: deque[Acquire] = deque()
        for waiter in self.waiters:
            if now > waiter.deadline:
                _fail(waiter, timeout_error(self.conversation_id, waiter.timeout_s, owner_job))
            else:
                keep.append(waiter)
        self.waiters = keep or _NO_WAITERS

    def _give_up(self, token: int, release_if_granted: bool) -> Granted | GaveUp:
        owner = self.owner
        if owner is not None and owner.token == token:
            if not release_if_granted:
                return Granted(self.context)
            self._release(owner.job_id, self.lease_retain_s)
            return GaveUp(owner_job=None)
        if self.waiters:
            self.waiters = deque(w for w in self.waiters if w.owner.token != token) or _NO_WAITERS
        return GaveUp(owner.job_id if owner else None)

    # -- retirement -------------------------------------------------------------------------

    def _stop_if_idle(self, expired_only: bool, stop: bool = False) -> Idle | Busy:
        if self.retiring:
            return Idle(self.context.stored_version)
        kept = None if self.owner is None else self.owner.kept
        if kept is not None and not (
            expired_only and self.clock.now() < kept.idle_since + self.lease_retain_s
        ):
            self._take_back(want=False)  # idle past retention, or parked: a turn keeps it
        self._expire_waiters(self.owner.job_id if self.owner else None)
        if self.owner is not None or self.waiters:
            return Busy()
        if expired_only and self.clock.now() < self.expires_at:
            return Busy()
        self.retiring = True  # from here on, every Acquire is told to look again
        if stop:
            self._stop()  # pykka's stop, now: the loop ends after this answer
        return Idle(self.context.stored_version, self.context, self.expires_at)

    def _doom(self, reason: str, reload: bool = False) -> None:
        self.retiring = True
        self.doomed = reason
        self._fail_waiters(Reobtain(reason) if reload else ConversationUnavailableError(reason))
        kept = None if self.owner is None else self.owner.kept
        if kept is not None and kept.take():  # kept between turns: nobody holds it now
            self.owner = None
        if self.owner is None:
            self.stop()

    def _notify_idle(self, future: pykka.Future[None]) -> None:
        self._take_back()
        if self.owner is None:
            future.set(None)
        else:
            self.idle_watchers.append(future)

    def _fail_waiters(self, exc: BaseException) -> None:
        waiters, self.waiters = self.waiters, _NO_WAITERS
        for waiter in waiters:
            _fail(waiter, exc)

    def _end(self, crashed: bool = False) -> None:
        if self.owner is not None and self.owner.kept is not None:
            self.owner.kept.take()  # taken for good; a running turn gives it back at its end
        self.retiring = True
        if self.waiters:
            why = f"Conversation {self.conversation_id} was stopped while waited for."
            # after a crash the conversation is still there: each waiter obtains again (the
            # next activation takes an owner's lease over, so they wait for its release)
            self._fail_waiters(Reobtain(why) if crashed else ConversationUnavailableError(why))
        for watcher in self.idle_watchers:
            watcher.set(None)
        self.idle_watchers.clear()

    def on_stop(self) -> None:
        self._end()  # no log line: a restore-heavy process stops thousands a second

    def on_failure(self, *exc_info: Any) -> None:
        """A handler crashed on a told message: its waiters obtain again at once (never
        stranded), from the next activation."""
        logger.error("conversation actor {} failed; its waiters obtain again", self.conversation_id)
        self._end(crashed=True)


def _fail(waiter: Acquire, exc: BaseException) -> None:
    if waiter.delivery is not None:
        waiter.delivery.fail(exc)
