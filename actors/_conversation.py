"""ConversationActor: one live conversation, its owner, and the queue waiting for it.

Ownership is a lease handed through the mailbox. The actor never blocks its thread: a
busy conversation queues the acquirer's future (FIFO) and completes it at handoff.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, NamedTuple

import pykka
from loguru import logger

from parlour.actors._thinker import Thinker
from parlour.runtime import Clock, ConversationContext
from parlour.runtime.errors import ConversationUnavailableError


class Owner(NamedTuple):
    """Who holds the lease: the job, its user and workflow, the thinker, a unique token."""

    job_id: str
    user_id: str
    workflow_id: str
    thinker: Thinker | None
    token: int


class Acquire(NamedTuple):
    owner: Owner
    deadline: float  # time.monotonic() after which the waiter has given up
    retain_s: float
    timeout_s: float
    # set by the actor when the request has to wait; completed at handoff
    future: pykka.ThreadingFuture[ConversationContext] | None = None


class Queued(NamedTuple):
    """The answer to an ``Acquire`` that must wait: its future completes at handoff."""

    future: pykka.ThreadingFuture[ConversationContext]


class Abandon(NamedTuple):
    """The waiter ``token`` gives up: answers the context if it was granted meanwhile."""

    token: int


class Release(NamedTuple):
    job_id: str
    retain_s: float


class ReleaseForJob(NamedTuple):
    job_id: str


class QueryOwner(NamedTuple):
    pass


class QueryHolder(NamedTuple):
    """Answer (owner, the conversation's user id)."""


class StopIfIdle(NamedTuple):
    """Answer True (and accept being stopped) when unowned with nobody waiting."""

    expired_only: bool = False


class NotifyIdle(NamedTuple):
    future: pykka.Future[None]


# What ``Release`` answers.
NOT_OWNER, KEPT, EVICT = "not_owner", "kept", "evict"


def timeout_error(
    conversation_id: str, timeout_s: float, owner_job: str
) -> ConversationUnavailableError:
    return ConversationUnavailableError(
        f"Timed out after {round(timeout_s * 1000)}ms waiting for conversation "
        f"{conversation_id} (owned by {owner_job})"
    )


class ConversationActor(pykka.ThreadingActor):
    """Holds one ``ConversationContext``; serializes who may touch it.

    The context itself is mutated by the owner in the owner's thread for the length of the
    lease; everything that crosses owners (acquire, release, eviction) goes through here.
    """

    def __init__(self, context: ConversationContext, clock: Clock) -> None:
        super().__init__()
        self.context = context
        self.conversation_id = context.conversation_id or ""
        self.clock = clock
        self.owner: Owner | None = None
        self.waiters: deque[Acquire] = deque()
        self.idle_watchers: list[pykka.Future[None]] = []
        self.expires_at = clock.now()

    def on_receive(self, message: Any) -> Any:
        match message:
            case Acquire():
                return self._acquire(message)
            case Release(job_id, retain_s):
                return self._release(job_id, retain_s)
            case Abandon(token):
                return self._abandon(token)
            case QueryOwner():
                return self.owner
            case QueryHolder():
                return (self.owner, self.context.user_id)
            case StopIfIdle(expired_only):
                return self._idle(expired_only)
            case ReleaseForJob(job_id):
                return self._release(job_id, 0.0) if self._owned_by(job_id) else NOT_OWNER
            case NotifyIdle(future):
                if self.owner is None:
                    future.set(None)
                else:
                    self.idle_watchers.append(future)
                return None
        raise TypeError(f"ConversationActor got an unknown message {message!r}")

    def _owned_by(self, job_id: str) -> bool:
        return self.owner is not None and self.owner.job_id == job_id

    def _acquire(self, request: Acquire) -> ConversationContext | Queued:
        """Answer the context (granted now) or ``Queued`` (its future completes at handoff).

        Raises:
            PermissionError: the conversation belongs to another user (the asker gets it).
        """
        if self.owner is None or self.owner.job_id == request.owner.job_id:
            granted = self._grant(request)
            if isinstance(granted, BaseException):
                raise granted
            return granted
        future: pykka.ThreadingFuture[ConversationContext] = pykka.ThreadingFuture()
        self.waiters.append(request._replace(future=future))
        return Queued(future)

    def _grant(self, request: Acquire) -> ConversationContext | BaseException:
        owner = request.owner
        if self.context.user_id is not None and self.context.user_id != owner.user_id:
            return PermissionError(
                f"User {owner.user_id} does not own conversation {self.conversation_id}"
            )
        self.owner = owner
        self.context.user_id = owner.user_id
        self.context.workflow_id = owner.workflow_id
        self.expires_at = self.clock.now() + request.retain_s  # safety net while owned
        return self.context

    def _release(self, job_id: str, retain_s: float) -> str:
        if not self._owned_by(job_id):
            return NOT_OWNER
        released = self.owner
        self.owner = None
        keep = getattr(released.thinker, "keep_transcript", None) if released else None
        if keep is not None:  # a shallow copy: the transcript as it was at release (B109)
            keep(self.context.messages)
        now = time.monotonic()
        while self.waiters:
            waiter = self.waiters.popleft()
            if now > waiter.deadline:
                assert released is not None
                _fail(
                    waiter, timeout_error(self.conversation_id, waiter.timeout_s, released.job_id)
                )
                continue
            granted = self._grant(waiter)
            if isinstance(granted, BaseException):
                _fail(waiter, granted)
                continue
            assert waiter.future is not None  # every queued request has one
            waiter.future.set(granted)
            return KEPT
        for watcher in self.idle_watchers:
            watcher.set(None)
        self.idle_watchers.clear()
        self.expires_at = self.clock.now() + retain_s
        return EVICT if retain_s <= 0 else KEPT

    def _abandon(self, token: int) -> tuple[str, Any]:
        if self.owner is not None and self.owner.token == token:
            return ("granted", self.context)
        self.waiters = deque(w for w in self.waiters if w.owner.token != token)
        return ("gave_up", self.owner.job_id if self.owner else "nobody")

    def _idle(self, expired_only: bool) -> bool:
        if self.owner is not None or self.waiters:
            return False
        return not expired_only or self.clock.now() >= self.expires_at

    def on_stop(self) -> None:
        for waiter in self.waiters:
            _fail(
                waiter,
                ConversationUnavailableError(
                    f"Conversation {self.conversation_id} was stopped while waited for."
                ),
            )
        self.waiters.clear()
        for watcher in self.idle_watchers:
            watcher.set(None)
        logger.debug("conversation actor {} stopped", self.conversation_id)


def _fail(waiter: Acquire, exc: BaseException) -> None:
    if waiter.future is not None:
        waiter.future.set_exception(_exc_info(exc))


def _exc_info(exc: BaseException) -> tuple[type[BaseException], BaseException, None]:
    return (type(exc), exc, None)
