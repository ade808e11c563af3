"""Every message the actors exchange, and the typed answers they give.

A conversation actor answers ``Acquire`` with ``Granted``, ``Queued`` or ``Retiring`` (or
raises ``PermissionError`` to the asker); ``GiveUp`` with ``Granted`` or ``GaveUp``;
``Release`` with ``Released``; ``QueryHolder`` with ``Holder``. The supervisor answers
``Forward`` with ``Forwarded`` or None, ``Spawn`` with ``Forwarded`` or ``Reload``.
No answer is a bare string or tuple.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from typing import Any, Protocol

import msgspec
import pykka
from loguru import logger

from parlour.runtime import ConversationContext
from parlour.runtime.errors import ConversationUnavailableError, IllegalStateError

from ._kept import Kept
from ._thinker import Thinker

# -- delivery of a queued grant -------------------------------------------------------------


class Delivery(Protocol):
    """How a conversation actor hands a queued grant (or a failure) to a waiter.

    Both methods run in the thread draining the actor's mailbox and never block. ``grant``
    answers False when the waiter can no longer take the lease (its event loop is closed);
    the actor then grants the next waiter instead.
    """

    def prepare(self) -> None:
        """Called by the actor when the request is queued, before it answers ``Queued``."""
        ...

    def grant(self, context: ConversationContext) -> bool: ...

    def fail(self, exc: BaseException) -> None: ...


class FutureDelivery:
    """Delivers into a ``pykka.ThreadingFuture`` that a waiting thread blocks on; the future
    is made only when the request is queued (a grant at once needs none)."""

    __slots__ = ("_future",)

    def __init__(self) -> None:
        self._future: pykka.ThreadingFuture[ConversationContext] | None = None

    @property
    def future(self) -> pykka.ThreadingFuture[ConversationContext]:
        assert self._future is not None, "read only after a Queued answer"
        return self._future

    def prepare(self) -> None:
        self._future = pykka.ThreadingFuture()

    def grant(self, context: ConversationContext) -> bool:
        try:
            self.future.set(context)
        except queue.Full:  # the waiter was cancelled first: it must not get the lease
            return False
        return True

    def fail(self, exc: BaseException) -> None:
        with contextlib.suppress(queue.Full):  # already completed: the first outcome stands
            self.future.set_exception((type(exc), exc, None))


class LoopDelivery:
    """Delivers into an asyncio future through its loop (``call_soon_threadsafe``): no
    thread is parked per waiter."""

    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[ConversationContext] = loop.create_future()

    def prepare(self) -> None:
        pass

    def grant(self, context: ConversationContext) -> bool:
        return self._call(_set_result, context)

    def fail(self, exc: BaseException) -> None:
        self._call(_set_exception, exc)

    def _call(self, fn: object, value: object) -> bool:
        try:
            self.loop.call_soon_threadsafe(fn, self.future, value)  # type: ignore[arg-type]
        except RuntimeError:  # the loop is closed: nobody is there to take it
            logger.debug("an asyncio waiter's loop is closed; skipping it")
            return False
        return True


def _set_result(future: asyncio.Future[ConversationContext], value: ConversationContext) -> None:
    if not future.done():  # a cancelled waiter: its cancel path releases the lease
        future.set_result(value)


def _set_exception(future: asyncio.Future[ConversationContext], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


# -- to a conversation actor ------------------------------------------------------------------


class Owner(msgspec.Struct, frozen=True):
    """Who holds the lease: the job, its user and workflow, the thinker, a unique token,
    and, for a job that keeps its lease between its turns, its ``Kept``."""

    job_id: str
    user_id: str
    workflow_id: str
    thinker: Thinker | None
    token: int
    kept: Kept | None = None


class Acquire(msgspec.Struct, frozen=True):
    """Ask for the lease; a busy conversation queues ``delivery`` until handoff."""

    owner: Owner
    deadline: float  # on the service's clock: after it the waiter has given up
    retain_s: float
    timeout_s: float
    delivery: Delivery | None = None


class GiveUp(msgspec.Struct, frozen=True, gc=False):
    """The waiter ``token`` gives up. With ``release_if_granted`` a grant that raced the
    give-up is released (the caller never sees it); without, it is answered ``Granted``."""

    token: int
    release_if_granted: bool = False


class Release(msgspec.Struct, frozen=True, gc=False):
    """``released_at`` is the releaser's clock reading: retention counts from the release
    call, not from when the actor got to it (None: the actor's own reading)."""

    job_id: str
    retain_s: float
    released_at: float | None = None


class ReleaseForJob(msgspec.Struct, frozen=True, gc=False):
    """Release the lease with no retention if ``job_id`` holds it (the job has ended);
    answered ``Released`` (``owned`` False when that job did not hold it)."""

    job_id: str


class QueryOwner(msgspec.Struct, frozen=True, gc=False):
    """Answered with the ``Owner`` holding the lease, or None when nobody holds it (a lease
    kept between its owner's turns counts as nobody's while no turn runs)."""


class QueryHolder(msgspec.Struct, frozen=True, gc=False):
    """Answered with ``Holder``; with ``take_back_for`` (the asking user), a lease kept
    between its owner's turns is taken back first when that user's (a running turn gives it
    back at its end)."""

    take_back_for: str | None = None


class StopIfIdle(msgspec.Struct, frozen=True, gc=False):
    """Answer ``Idle`` and from then on refuse every acquire (``Retiring``) when unowned with
    nobody waiting (and, with ``expired_only``, past retention); else ``Busy``. Expired
    waiters are failed first. With ``stop`` an activation that answers ``Idle`` also stops
    in the same step (the supervisor unregisters it when it reads the answer; whatever
    reaches it later finds it dead, which every caller treats as retiring)."""

    expired_only: bool = False
    stop: bool = False


class Doom(msgspec.Struct, frozen=True, gc=False):
    """The activation must not be served again (its record was deleted, or a save found it
    stale): fail the waiters, refuse every later acquire, stop once unowned. With
    ``reload`` (a stale copy: the record is there) each waiter is failed with ``Reobtain``,
    and its obtain starts again on a fresh load instead of failing."""

    reason: str
    reload: bool = False


class NotifyIdle(msgspec.Struct, frozen=True):
    """Set ``future`` (to None) once nobody holds the lease: at once when nobody does, else
    at the first release that hands it to nobody. ``stop`` waits on it within its grace."""

    future: pykka.Future[None]


# -- answers from a conversation actor --------------------------------------------------------


class Granted(msgspec.Struct, frozen=True):
    """The lease is the asker's: ``context`` is the conversation, mutated only by the
    owner's thread until it releases."""

    context: ConversationContext


class Queued(msgspec.Struct, frozen=True, gc=False):
    """The request waits; its delivery completes at handoff."""


class Retiring(msgspec.Struct, frozen=True, gc=False):
    """This activation has agreed to stop: look the conversation up again (never a grant)."""


class GaveUp(msgspec.Struct, frozen=True, gc=False):
    """The waiter was removed; ``owner_job`` held the lease at the time (None: nobody)."""

    owner_job: str | None


class Released(msgspec.Struct, frozen=True, gc=False):
    """``owned``: the releaser held the lease. ``evict``: nobody took it over and the
    retention is zero, so the caller should evict now."""

    owned: bool
    evict: bool = False


class Idle(msgspec.Struct, frozen=True):
    """The activation agreed to stop; ``stored_version`` is the last version its owners
    saved (every acknowledged save of this activation is at or below it). ``context`` and
    ``expires_at`` are what the supervisor may park (None from one already retiring)."""

    stored_version: int
    context: ConversationContext | None = None
    expires_at: float = 0.0


class Busy(msgspec.Struct, frozen=True, gc=False):
    """Owned or waited for (or not yet expired): not stopping."""


class Holder(msgspec.Struct, frozen=True):
    """Who holds the lease (``owner``; None: nobody) and whose conversation it is
    (``user_id``; None: nobody's yet), so the asker can refuse a foreign user; ``stored``:
    whether its context has a record (False: minted and not saved yet)."""

    owner: Owner | None
    user_id: str | None
    stored: bool = True


# -- to the supervisor --------------------------------------------------------------------------


class Lookup(msgspec.Struct, frozen=True, gc=False):
    """Answered with the live activation's ref (a parked conversation is re-attached to a
    new one first), or None when the conversation is not live."""

    conversation_id: str


class Forward(msgspec.Struct, frozen=True):
    """Send ``request`` to the live activation from the supervisor's handler, so it is in
    the activation's mailbox before any eviction the supervisor asks later: answered
    ``Forwarded``, or None when no activation is live."""

    conversation_id: str
    request: Acquire


class Spawn(msgspec.Struct, frozen=True):
    """Install ``context`` unless an actor is live, then forward ``request`` to the
    activation (``Forwarded``); ``epoch`` is the supervisor's retirement count read before
    the context was loaded (``Reload`` when the load may be stale). With ``holder`` (the
    recorded lease of an activation that died while owned, ``context`` its holder's own)
    the new activation grants ``holder`` first, so ``request`` waits behind it: the lease
    is taken over, never granted twice."""

    context: ConversationContext
    epoch: int
    request: Acquire
    holder: Acquire | None = None


class Forwarded(msgspec.Struct, frozen=True):
    """The activation and the future of its answer to the forwarded ``Acquire``."""

    ref: pykka.ActorRef[Any]  # a ConversationActor's (that module imports this one)
    reply: pykka.Future[Any]


class Reload(msgspec.Struct, frozen=True, gc=False):
    """An activation of this conversation retired (or its record was deleted) after the
    caller loaded it: the loaded state may be stale, load again."""


class Evict(msgspec.Struct, frozen=True, gc=False):
    """Retire the conversation if nobody holds or waits for it (with ``expired_only``:
    only once its retention ran out), live or parked; answered True when it was evicted."""

    conversation_id: str
    expired_only: bool = False


class Sweep(msgspec.Struct, frozen=True):
    """Evict what expired. Without ``done`` the answer is the count; with it the answer is
    None at once and ``done`` gets the count when the last slice has run."""

    done: pykka.Future[int] | None = None


class SweepSlice(msgspec.Struct, frozen=True):
    """The rest of a sweep: the conversations still to look at and the count so far."""

    remaining: list[str]
    evicted: int
    done: pykka.Future[int]


class Owners(msgspec.Struct, frozen=True, gc=False):
    """Answer {conversation_id: Owner | None} for every live actor."""


class ReleaseAllForJob(msgspec.Struct, frozen=True, gc=False):
    """Release and evict every live conversation ``job_id`` holds (the job has ended);
    answered with their ids."""

    job_id: str


class Drop(msgspec.Struct, frozen=True, gc=False):
    """Unregister the conversation's activation at once and doom it (see ``Doom``, and
    ``reload``); record a retirement even when none is live, so a restore racing this never
    installs."""

    conversation_id: str
    reason: str
    reload: bool = False


class StopAll(msgspec.Struct, frozen=True, gc=False):
    """Stop every conversation actor (waiting for each stop) and forget the parked ones;
    ``stop`` sends it once the owners are done, before it stops the supervisor."""


def timeout_error(
    conversation_id: str, timeout_s: float, owner_job: str | None
) -> ConversationUnavailableError:
    return ConversationUnavailableError(
        f"Timed out after {round(timeout_s * 1000)}ms waiting for conversation "
        f"{conversation_id} (owned by {owner_job or 'nobody'})"
    )


class Reobtain(ConversationUnavailableError):
    """What a queued obtain's delivery fails with when its activation was dropped as a
    stale copy (``Doom(reload=True)``): the waiting side obtains again, from a fresh load;
    a waiter that cannot sees it as the unavailable conversation it is."""


def shutting_down() -> IllegalStateError:
    """What every obtain (and ``remove_conversation``) meets once the service is stopping."""
    return IllegalStateError("ConversationService is shutting down")
