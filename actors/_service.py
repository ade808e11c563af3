"""ConversationService: the facade applications call. It holds no locks of its own.

Obtaining a conversation goes: the supervisor finds (or race-free spawns) the conversation's
actor, loading it from the session cache or the persistent store on a miss; then the
actor hands the lease over, at once or when the current owner releases.
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
import time
from collections.abc import AsyncIterator
from typing import Any, cast

import msgspec
import pykka
from loguru import logger

from parlour.actors import _joiners
from parlour.actors._conversation import (
    EVICT,
    Abandon,
    Acquire,
    ConversationActor,
    NotifyIdle,
    Owner,
    QueryHolder,
    QueryOwner,
    Queued,
    Release,
    timeout_error,
)
from parlour.actors._events import AgentEvent
from parlour.actors._supervisor import (
    Evict,
    Forget,
    Lookup,
    Owners,
    ReleaseAllForJob,
    Spawn,
    StopAll,
    Supervisor,
    Sweep,
)
from parlour.actors._thinker import Thinker
from parlour.runtime import Clock, ConversationContext, ResponseHandler, SystemClock
from parlour.runtime.errors import ConversationUnavailableError, IllegalStateError
from parlour.stores import PersistentStore, SessionStore

_tokens = itertools.count(1)


class ServiceStats(msgspec.Struct, frozen=True):
    total: int
    owned: int
    idle: int

    def __str__(self) -> str:
        return f"{self.total} total ({self.owned} owned, {self.idle} idle)"


def _seconds(value: dt.timedelta | float) -> float:
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


def _failed(exc: BaseException) -> pykka.Future[Any]:
    future: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
    future.set_exception((type(exc), exc, None))
    return future


class ConversationService:
    """Ownership, persistence and lifecycle of live conversations.

    Args:
        store: the persistent store (None: nothing is durable).
        session: the session cache consulted before the store.
        clock: retention time; inject a fake one in tests.
        conversation_timeout_s: how long an acquirer waits for a busy conversation.
        cleanup_interval_s: how often the retention sweep runs (0 disables the timer).
        max_live: most live conversation actors (each is a thread).
        shutdown_grace_s: how long ``stop`` lets owners finish.

    Thread-safety: every method may be called from any thread.
    """

    _instance: ConversationService | None = None

    def __init__(
        self,
        store: PersistentStore | None = None,
        session: SessionStore | None = None,
        *,
        clock: Clock | None = None,
        conversation_timeout_s: float = 30.0,
        cleanup_interval_s: float = 300.0,
        max_live: int = 4096,
        shutdown_grace_s: float = 5.0,
    ) -> None:
        self.store = store
        self.session = session
        self.clock = clock or SystemClock()
        self.conversation_timeout_s = conversation_timeout_s
        self.cleanup_interval_s = cleanup_interval_s
        self.shutdown_grace_s = shutdown_grace_s
        self._stopping = threading.Event()
        # The supervisor's registry, mirrored for lock-free reads on the hot path: only the
        # supervisor writes it; a stale entry shows up as ActorDeadError and is dropped.
        self._live: dict[str, pykka.ActorRef[ConversationActor]] = {}
        self._supervisor = Supervisor.start(self.clock, max_live, self._live)
        self._ticker: threading.Thread | None = None
        if cleanup_interval_s > 0:
            self._ticker = threading.Thread(target=self._tick, name="parlour-sweep", daemon=True)
            self._ticker.start()

    @classmethod
    def get_instance(cls) -> ConversationService:
        """The process-wide default service (created on first use, with no stores)."""
        if cls._instance is None or cls._instance.is_stopping():
            cls._instance = cls()
        return cls._instance

    # -- obtaining --------------------------------------------------------------------------

    def obtain_conversation(
        self,
        conversation_id: str | None,
        thinker: Thinker,
        handler: ResponseHandler | None = None,
        must_exist: bool | None = None,
    ) -> pykka.Future[ConversationContext]:
        """A future of the conversation, owned by ``thinker`` once it completes.

        ``conversation_id`` defaults to the thinker's; ``must_exist`` defaults to True for an
        adopted id. The future fails with ``ConversationUnavailableError`` when no store
        holds a ``must_exist`` conversation, or when the current owner keeps it past
        ``conversation_timeout_s`` (the message names the owner); with ``IllegalStateError``
        after ``stop()``; with ``PermissionError`` for another user's conversation. Refusals
        are failed futures, never raised by this call.
        """
        cid = conversation_id or thinker.conversation_id
        if must_exist is None:
            must_exist = cid != thinker.job_id and not thinker.is_conversation_minted()
        if self._stopping.is_set():
            logger.error("[ConvSvc] Shutting down, dropping request for {}", cid)
            return _failed(IllegalStateError("ConversationService is shutting down"))
        for _ in range(3):  # an actor evicted between lookup and acquire: look again
            try:
                ref = self._ref(cid)
                if ref is None:
                    context = self._restore_or_create(cid, thinker, handler, must_exist)
                    ref = self._supervisor.ask(Spawn(context), block=True)
                return self._acquire(ref, cid, thinker, _seconds(thinker.retain_duration))
            except pykka.ActorDeadError:
                self._live.pop(cid, None)
                continue
            except (ConversationUnavailableError, PermissionError, LookupError) as exc:
                return _failed(exc)
            except Exception as exc:  # a corrupt record, a store failure: fail the future
                logger.opt(exception=exc).error("obtain failed for {}", cid)
                return _failed(exc)
        return _failed(ConversationUnavailableError(f"Conversation {cid} kept being evicted."))

    def _restore_or_create(
        self, cid: str, thinker: Thinker, handler: ResponseHandler | None, must_exist: bool
    ) -> ConversationContext:
        temporary = cid == thinker.job_id
        context = None if temporary else self._load(cid, thinker, handler)
        if context is None:
            if must_exist:
                raise ConversationUnavailableError(
                    f"Cannot resume conversation {cid}: it is not in memory and no store holds it."
                )
            context = ConversationContext(cid, user_id=thinker.user_id, temporary=temporary)
        else:
            context.add_tools(thinker.build_tool_definition_blocks())
        context.grade = thinker.grade
        context.depth = thinker.depth
        context.output_declaration = thinker.output_declaration
        context.interactive = thinker.interactive
        return context

    def _load(
        self, cid: str, thinker: Thinker, handler: ResponseHandler | None
    ) -> ConversationContext | None:
        snapshot = self.session.get(cid, thinker.user_id) if self.session else None
        if snapshot is None and self.store is not None:
            snapshot = self.store.load(cid, thinker.user_id, thinker)
        return None if snapshot is None else snapshot.to_conversation(handler)

    def _acquire(
        self,
        ref: pykka.ActorRef[ConversationActor],
        cid: str,
        thinker: Thinker,
        retain_s: float,
    ) -> pykka.Future[ConversationContext]:
        owner = Owner(thinker.job_id, thinker.user_id, thinker.workflow_id, thinker, next(_tokens))
        timeout_s = self.conversation_timeout_s
        deadline = time.monotonic() + timeout_s
        reply = ref.ask(Acquire(owner, deadline, retain_s, timeout_s), block=False)
        try:
            answer = reply.get()
        except pykka.ActorDeadError:
            raise  # evicted meanwhile: the caller looks again
        except Exception:
            return reply  # refused (another user's conversation): a failed future
        if not isinstance(answer, Queued):
            return reply  # free, or already ours: granted in this one round trip
        granted = answer.future

        def wait(timeout: float | None) -> ConversationContext:
            left = deadline - time.monotonic()
            if timeout is not None and timeout < left:
                # the caller's own, shorter timeout
                return cast(ConversationContext, granted.get(timeout=timeout))
            try:
                return cast(ConversationContext, granted.get(timeout=max(left, 0.0)))
            except pykka.Timeout:
                pass
            try:
                outcome, value = ref.ask(Abandon(owner.token), block=True)
            except pykka.ActorDeadError as exc:
                raise ConversationUnavailableError(
                    f"Conversation {cid} was stopped while waited for."
                ) from exc
            if outcome == "granted":
                return cast(ConversationContext, value)
            raise timeout_error(cid, timeout_s, value)

        waiting: pykka.ThreadingFuture[ConversationContext] = pykka.ThreadingFuture()
        waiting.set_get_hook(wait)
        return waiting

    # -- saving and releasing ---------------------------------------------------------------

    def save_conversation(
        self, context: ConversationContext | None, thinker: Thinker | None
    ) -> None:
        """Persist at a boundary: the first save of a minted conversation creates the record,
        every other save updates it; temporary conversations are never persisted.

        Raises:
            ConversationNotFoundError: the record was deleted mid-conversation.
            PermissionError: the record belongs to another user.
        """
        if self.store is None or context is None or thinker is None or context.temporary:
            return
        snapshot = context.to_snapshot()
        if not context.stored and thinker.is_conversation_minted():
            version = self.store.create_context(snapshot, thinker.user_id, thinker)
        else:
            version = self.store.save_context(snapshot, thinker.user_id, thinker)
        context.stored_version = snapshot.stored_version = version
        if self.session is not None:  # write-through after the durable commit: never stale
            self.session.put(snapshot)

    def release(self, thinker: Thinker, retain: dt.timedelta | float | None = None) -> None:
        """Give the conversation back; keep it in memory for ``retain`` (default: the
        thinker's retain duration). Zero retention evicts it at once. Never persists."""
        cid = thinker.conversation_id
        retain_s = _seconds(thinker.retain_duration if retain is None else retain)
        ref = self._ref(cid)
        if ref is None:
            return
        try:
            if retain_s > 0:  # nothing to wait for: later messages queue behind it (FIFO)
                ref.tell(Release(thinker.job_id, retain_s))
            elif ref.ask(Release(thinker.job_id, retain_s), block=True) == EVICT:
                self._supervisor.ask(Evict(cid), block=True)
        except pykka.ActorDeadError:
            self._live.pop(cid, None)

    def release_all_for_job(self, job_id: str) -> list[str]:
        """Safety net at job end: release and evict what the job still owns."""
        released: list[str] = self._supervisor.ask(ReleaseAllForJob(job_id), block=True)
        return released

    def force_release(self, conversation_id: str, user_id: str) -> str | None:
        """User-initiated release of a live conversation (security-checked).

        It cancels the owning turn's whole workflow through its thinker's
        ``cancel_workflow`` hook and lets that turn's own ``finally`` release the holder, so
        no second turn can acquire the context while the dying one still mutates it. Only an
        owner with no live thinker is released directly.

        Returns:
            The owning job id, or None when nobody owns the conversation.

        Raises:
            ValueError: no live conversation has this id.
            PermissionError: it belongs to another user.
        """
        ref = self._ref(conversation_id)
        holder = None
        if ref is not None:
            try:
                holder = ref.ask(QueryHolder(), block=True)
            except pykka.ActorDeadError:
                holder = None
        if holder is None:
            raise ValueError(f"Conversation with ID {conversation_id} does not exist")
        owner, owner_user = holder
        if owner_user is not None and owner_user != user_id:
            raise PermissionError(f"User {user_id} does not own conversation {conversation_id}")
        if owner is None:
            return None
        cancel = getattr(owner.thinker, "cancel_workflow", None)
        if cancel is None:
            assert ref is not None
            ref.ask(Release(owner.job_id, 0.0), block=True)
            self._supervisor.ask(Evict(conversation_id), block=True)
        else:
            cancel(f"Conversation force-released by {user_id}")
        return cast(str, owner.job_id)

    # -- queries ----------------------------------------------------------------------------

    def owning_thinker(self, conversation_id: str, user_id: str) -> Thinker | None:
        """The live thinker driving a turn on this conversation, if ``user_id`` owns it."""
        owner = self._owner(conversation_id)
        if owner is None or owner.user_id != user_id:
            return None
        return owner.thinker

    def _ref(self, conversation_id: str) -> pykka.ActorRef[ConversationActor] | None:
        ref = self._live.get(conversation_id)
        return ref if ref is not None else self._supervisor.ask(Lookup(conversation_id), block=True)

    def _owner(self, conversation_id: str) -> Owner | None:
        ref = self._ref(conversation_id)
        if ref is None:
            return None
        try:
            return cast(Owner | None, ref.ask(QueryOwner(), block=True))
        except pykka.ActorDeadError:
            return None

    def get_stats(self) -> ServiceStats:
        owners = self._supervisor.ask(Owners(), block=True)
        owned = sum(1 for o in owners.values() if o is not None)
        return ServiceStats(total=len(owners), owned=owned, idle=len(owners) - owned)

    def sweep_expired(self) -> int:
        """Evict unowned conversations whose retention ran out; returns how many."""
        evicted: int = self._supervisor.ask(Sweep(), block=True)
        return evicted

    def evict_conversation(self, conversation_id: str) -> bool:
        """Free an unowned conversation's memory; an owned one is left alone with a warning."""
        evicted = bool(self._supervisor.ask(Evict(conversation_id), block=True))
        if not evicted and self._owner(conversation_id) is not None:
            logger.warning("not evicting conversation {}: it is owned", conversation_id)
        return evicted

    def remove_conversation(self, conversation_id: str, user_id: str) -> None:
        """Delete a conversation from memory and from both stores.

        Raises:
            PermissionError: it belongs to another user.
            IllegalStateError: a job owns it right now.
        """
        owner = self._owner(conversation_id)
        if owner is not None:
            if owner.user_id != user_id:
                raise PermissionError(f"User {user_id} does not own conversation {conversation_id}")
            raise IllegalStateError(
                f"Cannot remove conversation {conversation_id} while owned by job {owner.job_id}"
            )
        if self.store is not None:
            self.store.delete(conversation_id, user_id)
        if self.session is not None:
            self.session.delete(conversation_id)
        self._supervisor.ask(Forget(conversation_id), block=True)

    # -- lifecycle --------------------------------------------------------------------------

    def is_stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Refuse new obtains, let owners finish (up to the grace), stop every actor.

        Idempotent. Never persists: the last boundary already did.
        """
        if self._stopping.is_set():
            return
        self._stopping.set()
        deadline = time.monotonic() + self.shutdown_grace_s
        try:
            for cid, owner in self._supervisor.ask(Owners(), block=True).items():
                if owner is None:
                    continue
                ref = self._ref(cid)
                if ref is None:
                    continue
                idle: pykka.ThreadingFuture[None] = pykka.ThreadingFuture()
                ref.tell(NotifyIdle(idle))
                try:
                    idle.get(timeout=max(deadline - time.monotonic(), 0.0))
                except pykka.Timeout:
                    logger.warning(
                        "stopping with conversation {} still owned by {}", cid, owner.job_id
                    )
            self._supervisor.ask(StopAll(), block=True)
        finally:
            self._supervisor.stop()
        if self._ticker is not None:
            self._ticker.join()

    def _tick(self) -> None:
        while not self._stopping.wait(self.cleanup_interval_s):
            try:
                self._supervisor.ask(Sweep(), block=True)
            except pykka.ActorDeadError:
                return
            except Exception:
                logger.exception("periodic sweep failed; the next one still runs")

    # -- agents: following a running turn, offering it messages ------------------------------

    def join(self, conversation_id: str, user_id: str) -> AsyncIterator[AgentEvent]:
        """Follow the running agent turn on ``conversation_id``: first its text so far, then
        its live events; the iteration ends with the turn (its last event ``TurnDone`` when
        the turn succeeds). It ends at once when no turn runs, and for another user's
        conversation, which is indistinguishable from an idle one.

        Thread-safety: iterate it on any event loop; the turn may run anywhere.
        """
        return _joiners.join(self, conversation_id, user_id)

    def offer(self, conversation_id: str, user_id: str, text: str) -> bool:
        """Offer ``text`` to the running agent turn, which adds it as a user message at its
        next boundary (offers in arrival order) and answers it within the turn. A turn that
        fails keeps its untaken offers as user messages, saved but unanswered.

        Returns:
            False when no turn runs (it has closed, or the conversation is another
            user's): start a fresh turn instead.

        Thread-safety: any number of threads may offer at once; none is lost.
        """
        return _joiners.offer(self, conversation_id, user_id, text)
