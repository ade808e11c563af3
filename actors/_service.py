"""ConversationService: the facade applications call. It holds no locks of its own.

Obtaining a conversation goes: the supervisor finds (or race-free spawns) the conversation's
actor, loading it from the session cache or the persistent store on a miss; then the
actor hands the lease over, at once or when the current owner releases.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pykka
from loguru import logger

from parlour.runtime import Clock, ConversationContext, SystemClock
from parlour.runtime.errors import IllegalStateError, StaleVersionError, not_owned
from parlour.runtime.snapshots import message_snapshots
from parlour.stores import PersistentStore, SessionStore

from ._activation import Activations, seconds, shutting_down
from ._conversation import ConversationActor
from ._deferred import DeferredSaves, OnDeleted, weakly
from ._lifecycle import Lifecycle
from ._messages import (
    Drop,
    Evict,
    Holder,
    Lookup,
    QueryHolder,
    QueryOwner,
    Release,
    ReleaseAllForJob,
    Released,
    Sweep,
)
from ._reply import tell
from ._supervisor import Mirror, Seams, Supervisor
from ._thinker import Thinker, keep_transcript
from .agent import _joiners
from .agent._events import AgentEvent

ActorRef = pykka.ActorRef[ConversationActor]


class ServiceStats(msgspec.Struct, frozen=True):
    total: int
    owned: int
    idle: int

    def __str__(self) -> str:
        return f"{self.total} total ({self.owned} owned, {self.idle} idle)"


class ConversationService(Activations, Lifecycle):
    """Ownership, persistence and lifecycle of live conversations.

    Args:
        store: the persistent store (None: nothing is durable).
        session: the session cache consulted before the store.
        clock: every deadline and retention (inject ``FakeClock`` in tests).
        conversation_timeout_s: how long an acquirer waits for a busy conversation.
        cleanup_interval_s: how often the retention sweep runs (0 disables the timer).
        max_live: most live conversations (actors and parked ones); past it the least
            recently used idle one is evicted.
        max_active: most conversation actors (None: ``max_live``); past it the least
            recently used idle one is parked: held as its bare context, without an actor,
            re-attached to a new actor when next obtained.
        shutdown_grace_s: how long ``stop`` lets owners finish.
        seams: test hooks between the steps of a race (see ``Seams``).

    A context manager (``with`` and ``async with``) that stops on exit. Thread-safety:
    every method may be called from any thread, also while ``stop()`` runs.
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
        max_live: int = 16384,
        max_active: int | None = None,
        shutdown_grace_s: float = 5.0,
        seams: Seams | None = None,
    ) -> None:
        self.store = store
        self.session = session
        self._shared = bool(getattr(store, "shared", False))
        self.clock = clock or SystemClock()
        self.conversation_timeout_s = conversation_timeout_s
        self.cleanup_interval_s = cleanup_interval_s
        self.shutdown_grace_s = shutdown_grace_s
        self._seams = seams or Seams()
        self._stopping = threading.Event()
        self._stopped = False
        # The supervisor's registry, mirrored for lock-free reads on the hot path: only the
        # supervisor writes it; a retiring activation answers Retiring, a dead one raises.
        self._mirror = Mirror()
        self._live = self._mirror.refs
        # What each job holds, for the transcript at release: {(conversation, job): context}.
        self._held: dict[tuple[str, str], tuple[ConversationContext, ActorRef]] = {}
        self._deferred = DeferredSaves(store, session, weakly(self._forget_everywhere))
        self._supervisor = Supervisor.start(
            self.clock, max_live, self._mirror, self._seams, max_active
        )
        self._listener = OnDeleted(self._on_deleted, session)
        if store is not None:
            store.add_delete_listener(self._listener)
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

    # -- saving and releasing ---------------------------------------------------------------

    def save_conversation(
        self, context: ConversationContext | None, thinker: Thinker | None, *, wait: bool = True
    ) -> None:
        """Persist at a boundary: the first save of a minted conversation creates the record,
        every other save updates it. Identity decides persistence: a conversation keyed by
        the thinker's job id is temporary and never persisted, whatever ``context.temporary``
        says. The save is durable when this returns.

        With ``wait=False`` an update is deferred where the store can queue it (``LmdbStore``):
        captured now, written with the next commit, not waited for. The owner's next waited
        save (one commit for both), its release or ``stop`` waits for it and raises (at a
        release: logs) its error. For a boundary the turn works on past (the user's message
        before the model call). A create, or a store that cannot queue, waits as usual.

        Raises:
            ConversationNotFoundError: the record was deleted mid-conversation.
            PermissionError: the record belongs to another user.
            StaleVersionError: another owner saved since this copy was loaded; the service
                has dropped its activation and cache entry, so obtaining again loads the
                newer state.
            Exception: what a deferred save of this conversation raised (before this save's
                own error); the service has dropped the conversation from memory and from
                the session cache.
        """
        if self.store is None or context is None or thinker is None:
            return
        cid = context.conversation_id
        if cid is None or cid == thinker.job_id:
            return
        snapshot = context.to_snapshot()
        if not wait and self._deferred.later is not None and context.stored:
            settle = self._deferred.later(snapshot, thinker.user_id, thinker)
            self._deferred.add(cid, settle)
            context.stored_version = snapshot.stored_version + 1  # what the update will make
            return
        try:
            if not context.stored and thinker.is_conversation_minted():
                version = self.store.create_context(snapshot, thinker.user_id, thinker)
            else:
                version = self.store.save_context(snapshot, thinker.user_id, thinker)
        except Exception as exc:
            self._deferred.settle(cid)  # queued before this save; its error goes first
            if isinstance(exc, StaleVersionError):
                self._forget_everywhere(cid, f"Conversation {cid} was saved by another owner.")
            raise
        self._deferred.settle(cid)  # committed with this save or before: no wait
        context.stored_version = snapshot.stored_version = version
        if self.session is not None:  # write-through after the durable commit: never stale
            self.session.put(snapshot)

    def release(self, thinker: Thinker, retain: dt.timedelta | float | None = None) -> None:
        """Give the conversation back; keep it in memory for ``retain`` (default: the
        thinker's retain duration). Zero retention evicts it at once. Never persists.

        The thinker's transcript is captured before the handoff (the conversation exactly
        as it was) and is there when this returns; a raising ``keep_transcript`` hook is
        logged and never stops the handoff. A no-op after ``stop()``.
        """
        cid = thinker.conversation_id
        if cid is not None and self._deferred:
            self._deferred.settle_quietly(cid)  # the next owner starts from what is durable
        if self._stopped:
            return
        held = self._held.pop((cid, thinker.job_id), None)
        # the conversation as it is: what the last save kept, built only for what changed
        kept = None if held is None else message_snapshots(held[0])
        retain_s = seconds(thinker.retain_duration if retain is None else retain)
        try:
            self._hand_back(cid, thinker.job_id, retain_s, None if held is None else held[1])
        finally:
            if kept is not None:
                keep_transcript(thinker, kept)

    def _hand_back(
        self, cid: str, job_id: str, retain_s: float, ref: ActorRef | None = None
    ) -> None:
        ref = ref or self._live.get(cid) or self._lookup(cid)
        if ref is None:
            return
        try:
            if retain_s > 0:  # nothing to wait for: later messages queue behind it (FIFO)
                tell(ref, Release(job_id, retain_s, self.clock.now()))
                return
            released: Released = ref.ask(Release(job_id, retain_s), block=True)
        except pykka.ActorDeadError:
            return
        if released.evict:
            self._ask(Evict(cid), False)

    def release_all_for_job(self, job_id: str) -> list[str]:
        """Safety net at job end: release and evict what the job still owns."""
        for key in [k for k in self._held if k[1] == job_id]:
            self._held.pop(key, None)
            self._deferred.settle_quietly(key[0])
        released: list[str] = self._ask(ReleaseAllForJob(job_id), [])
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
            ValueError: no live conversation has this id (and it is not another user's).
            PermissionError: it belongs to another user, live or stored, busy or idle.
        """
        holder = self._holder(conversation_id, user_id)
        if holder is None:
            if self.store is not None:
                self.store.version_of(conversation_id, user_id)  # a foreign record refuses
            raise ValueError(f"Conversation with ID {conversation_id} does not exist")
        owner = holder.owner
        if owner is None:
            return None
        cancel = getattr(owner.thinker, "cancel_workflow", None)
        if cancel is None:
            self._hand_back(conversation_id, owner.job_id, 0.0)
        else:
            try:
                cancel(f"Conversation force-released by {user_id}")
            except Exception:
                logger.exception("cancel_workflow failed for {}", conversation_id)
        return owner.job_id

    # -- queries ----------------------------------------------------------------------------

    def owning_thinker(self, conversation_id: str, user_id: str) -> Thinker | None:
        """The live thinker driving a turn on this conversation, if ``user_id`` owns it."""
        try:
            holder = self._holder(conversation_id, user_id)
        except PermissionError:
            return None
        return None if holder is None or holder.owner is None else holder.owner.thinker

    def _lookup(self, conversation_id: str) -> ActorRef | None:
        ref: ActorRef | None = self._ask(Lookup(conversation_id), None)
        return ref

    def _holder(self, conversation_id: str, user_id: str) -> Holder | None:
        """The live activation's holder; None when none is live.

        Raises:
            PermissionError: the live conversation belongs to another user.
        """
        ref = self._live.get(conversation_id) or self._lookup(conversation_id)
        if ref is None:
            return None
        try:
            holder: Holder = ref.ask(QueryHolder(), block=True)
        except pykka.ActorDeadError:
            return None
        if holder.user_id is not None and holder.user_id != user_id:
            raise not_owned(conversation_id, user_id)
        return holder

    def get_stats(self) -> ServiceStats:
        """Live conversations; all zero after ``stop()``.

        Asked of the live actors directly (all at once, from the calling thread) through
        the supervisor's lock-free mirror, never through the supervisor, so it never holds
        up a spawn. Each actor answers after the messages this thread sent it before (a
        release included)."""
        if self._stopped:
            return ServiceStats(total=0, owned=0, idle=0)
        asked = [ref.ask(QueryOwner(), block=False) for ref in self._live.copy().values()]
        total, owned = len(self._mirror.parked), 0  # parked: idle, held without an actor
        for reply in asked:
            try:
                owner = reply.get()
            except pykka.ActorDeadError:
                continue  # stopped meanwhile: no longer live
            total += 1
            owned += owner is not None
        return ServiceStats(total=total, owned=owned, idle=total - owned)

    def sweep_expired(self) -> int:
        """Evict unowned conversations whose retention ran out, and fail waiters whose
        deadline passed (both on the service's clock); returns how many were evicted.
        The supervisor sweeps in slices, so spawns meanwhile wait for a slice at most."""
        done: pykka.ThreadingFuture[int] = pykka.ThreadingFuture()
        try:
            self._supervisor.ask(Sweep(done), block=True)
        except pykka.ActorDeadError:
            return 0
        evicted: int = done.get()  # the supervisor completes it, also when it stops
        return evicted

    def evict_conversation(self, conversation_id: str) -> bool:
        """Free an unowned conversation's memory; an owned one is left alone with a warning."""
        evicted = bool(self._ask(Evict(conversation_id), False))
        if not evicted and self._live.get(conversation_id) is not None:
            logger.warning("not evicting conversation {}: it is owned", conversation_id)
        return evicted

    def remove_conversation(self, conversation_id: str, user_id: str) -> None:
        """Delete a conversation from memory and from both stores.

        Raises:
            PermissionError: it belongs to another user (live, saved or not, or stored).
            IllegalStateError: a job owns it right now, or the service is stopping.
        """
        if self._stopping.is_set():
            raise shutting_down()
        holder = self._holder(conversation_id, user_id)
        if holder is not None and holder.owner is not None:
            raise IllegalStateError(
                f"Cannot remove conversation {conversation_id} while owned by job "
                f"{holder.owner.job_id}"
            )
        if self.store is not None:
            self.store.delete(conversation_id, user_id)  # its listener forgets the rest
        self._forget_everywhere(conversation_id, f"Conversation {conversation_id} was removed.")

    def _forget_everywhere(self, conversation_id: str, reason: str) -> None:
        """No cache and no warm activation serves the conversation after this."""
        if self.session is not None:
            self.session.delete(conversation_id)
        self._ask(Drop(conversation_id, reason), None)

    def _on_deleted(self, conversation_id: str) -> None:
        """The store's delete listener: whoever deleted, nothing here serves it again."""
        self._forget_everywhere(conversation_id, f"Conversation {conversation_id} was deleted.")

    def _ask(self, message: Any, default: Any) -> Any:
        """Ask the supervisor; ``default`` once it has stopped."""
        try:
            return self._supervisor.ask(message, block=True)
        except pykka.ActorDeadError:
            return default

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
