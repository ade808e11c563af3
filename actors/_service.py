"""ConversationService: the facade applications call. It holds no locks of its own.

Its work is done by parts it holds, each with its own state, none holding the service:
``Activator`` obtains (finds or restores the activation, asks it for the lease), ``Saves``
saves at boundaries (with ``DeferredSaves``), ``Leases`` keeps what each job holds and
releases it, ``Registry`` reaches the supervisor, its mirror and the session cache, and
``Lifecycle`` runs the sweep ticker and ``stop``, in its order.

Why this module is long: it is the whole public face of the service, one short method per
operation, each documenting its contract; the work itself lives in the parts above.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Self

import msgspec
from loguru import logger

from parlour.runtime import Clock, ConversationContext, ResponseHandler, SystemClock
from parlour.runtime.errors import IllegalStateError
from parlour.stores import PersistentStore, SessionStore
from parlour.stores._waiting import held_gate

from ._activation import Activator
from ._deferred import DeferredSaves, OnDeleted
from ._gate import gating, turn_gate
from ._leases import Leases
from ._lifecycle import Lifecycle
from ._messages import Evict, ReleaseAllForJob, shutting_down
from ._obtain import Obtaining
from ._registry import Registry
from ._saves import Saves
from ._supervisor import Mirror, Seams, Supervisor
from ._thinker import Event, Joinable, Thinker


class ServiceStats(msgspec.Struct, frozen=True):
    total: int
    owned: int
    idle: int

    def __str__(self) -> str:
        return f"{self.total} total ({self.owned} owned, {self.idle} idle)"


class ConversationService:
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

    A context manager (``with`` and ``async with``) that stops on exit; ``on_stop`` lists
    callables ``stop`` runs last (an agent's MCP servers close there). Thread-safety: every
    method may be called from any thread, also while ``stop()`` runs.
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
        self.store, self.session = store, session
        self.clock = clock = clock or SystemClock()
        # The supervisor's registry, mirrored for lock-free reads on the hot path: only the
        # supervisor writes it; a retiring activation answers Retiring, a dead one raises.
        mirror = Mirror()
        self._live = mirror.refs  # read here only to word a warning
        seams = seams or Seams()
        supervisor = Supervisor.start(clock, max_live, mirror, seams, max_active)
        self._registry = registry = Registry(supervisor, mirror, session)
        self._deferred = deferred = DeferredSaves(store, session, registry.forget)
        self._saves = Saves(store, session, deferred, registry.forget)
        self._leases = leases = Leases(registry, clock)
        listener = OnDeleted(self._on_deleted, session)
        self._lifecycle = lifecycle = Lifecycle(
            registry, leases, deferred, store, session, listener, clock, shutdown_grace_s
        )
        self.on_stop = lifecycle.on_stop
        stopping = lifecycle.stopping
        shared = store is not None and store.shared  # warm copies are checked against it
        self._activator = Activator(
            store, session, shared, clock, conversation_timeout_s, seams, registry, stopping, leases
        )
        lifecycle.start_ticker(cleanup_interval_s)
        self._gated = gating(store, session)

    def _admits(self) -> bool:
        """Whether a call should hold the process's turn gate for its own work: admission
        control, on by default where it pays (``_gate.gating``). An obtain, a save or a
        release holds it, letting it go at every wait inside (the commit, the fsync), so
        thousands of threads driving the service take turns at the interpreter instead of
        thrashing it. Not inside a held gate (``Chat.send`` holds it for its whole turn)
        nor on an event loop's thread (a loop never waits for the gate)."""
        return self._gated and held_gate() is None and asyncio._get_running_loop() is None

    # The settings a caller may change on a running service, kept by the part that reads them.

    @property
    def conversation_timeout_s(self) -> float:
        return self._activator.conversation_timeout_s

    @conversation_timeout_s.setter
    def conversation_timeout_s(self, value: float) -> None:
        self._activator.conversation_timeout_s = value

    @property
    def cleanup_interval_s(self) -> float:
        return self._lifecycle.cleanup_interval_s

    @cleanup_interval_s.setter
    def cleanup_interval_s(self, value: float) -> None:
        self._lifecycle.cleanup_interval_s = value

    @property
    def shutdown_grace_s(self) -> float:
        return self._lifecycle.shutdown_grace_s

    @shutdown_grace_s.setter
    def shutdown_grace_s(self, value: float) -> None:
        self._lifecycle.shutdown_grace_s = value

    @classmethod
    def get_instance(cls) -> ConversationService:
        """The process-wide default service (created on first use, with no stores)."""
        if cls._instance is None or cls._instance.is_stopping():
            cls._instance = cls()
        return cls._instance

    # -- obtaining, saving and releasing -----------------------------------------------------

    def obtain_conversation(
        self,
        conversation_id: str | None,
        thinker: Thinker,
        handler: ResponseHandler | None = None,
        must_exist: bool | None = None,
    ) -> Obtaining:
        """A future of the conversation, owned by ``thinker`` once it completes.

        ``conversation_id`` defaults to the thinker's; ``must_exist`` defaults to True for an
        adopted id. The future fails with ``ConversationUnavailableError`` when no store
        holds a ``must_exist`` conversation, or when the current owner keeps it past
        ``conversation_timeout_s`` (the message names the owner); with ``IllegalStateError``
        after ``stop()``; with ``PermissionError`` for another user's conversation, at once
        and the same in every state. Refusals are failed futures, never raised by this
        call. ``Obtaining.cancel()`` or a shorter ``get(timeout)`` gives the obtain up.
        """
        if self._admits():
            with turn_gate.held():
                return self._activator.obtain(conversation_id, thinker, handler, must_exist)
        return self._activator.obtain(conversation_id, thinker, handler, must_exist)

    async def obtain_async(
        self,
        conversation_id: str | None,
        thinker: Thinker,
        handler: ResponseHandler | None = None,
        must_exist: bool | None = None,
    ) -> ConversationContext:
        """``obtain_conversation`` for asyncio: the grant completes an asyncio future from
        the releasing thread (no thread is parked per waiter). A live activation is asked
        on the loop's thread (its handler takes microseconds and never blocks); the
        supervisor and any store load are reached from the default executor. Cancelling the
        task gives the obtain up: it is never granted, and a grant that raced the cancel is
        released.

        Raises:
            The same errors ``obtain_conversation``'s future fails with.
        """
        return await self._activator.obtain_async(conversation_id, thinker, handler, must_exist)

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
        if self._admits():
            with turn_gate.held():
                return self._saves.save(context, thinker, wait)
        self._saves.save(context, thinker, wait)

    async def save_async(
        self, context: ConversationContext | None, thinker: Thinker | None, *, wait: bool = True
    ) -> None:
        """``save_conversation`` on the running loop, with the same
        contract: durable when it returns, a deferred update (``wait=False``) queued at
        once. The snapshot is taken and (``LmdbStore``) the write planned and encoded on
        the loop, and committed on it after the loop's turn, with every save queued in that
        turn (the fsync holds the loop for that one commit; a writer thread that leads
        meanwhile takes them instead). A store that cannot queue saves in a thread. No turn
        gate is taken (a loop never waits for it).
        Cancelling the awaiting task while the commit is under way waits for its answer,
        records it as a finished save would, then raises ``CancelledError``.

        Raises:
            The errors ``save_conversation`` raises, after the same clean-up.
        """
        await self._saves.save_async(context, thinker, wait)

    def release(self, thinker: Thinker, retain: dt.timedelta | float | None = None) -> None:
        """Give the conversation back; keep it in memory for ``retain`` (default: the
        thinker's retain duration). Zero retention evicts it at once. Never persists.

        The thinker's transcript is captured before the handoff (the conversation exactly
        as it was) and is there when this returns; a raising ``keep_transcript`` hook is
        logged and never stops the handoff. A no-op after ``stop()``.
        """
        if self._admits():
            with turn_gate.held():
                return self._release(thinker, retain)
        self._release(thinker, retain)

    def _release(self, thinker: Thinker, retain: dt.timedelta | float | None) -> None:
        cid = thinker.conversation_id
        if cid is not None and self._deferred:
            self._deferred.settle_quietly(cid)  # the next owner starts from what is durable
        if self._lifecycle.stopped:
            return
        self._leases.release(cid, thinker, retain)

    def release_all_for_job(self, job_id: str) -> list[str]:
        """Safety net at job end: release and evict what the job still owns."""
        for cid in self._leases.drop_job(job_id):
            self._deferred.settle_quietly(cid)
        released: list[str] = self._registry.ask(ReleaseAllForJob(job_id), [])
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
        holder = self._registry.holder(conversation_id, user_id, take_back=True)
        if holder is None:
            if self.store is not None:
                self.store.version_of(conversation_id, user_id)  # a foreign record refuses
            raise ValueError(f"Conversation with ID {conversation_id} does not exist")
        owner = holder.owner
        if owner is None:
            return None
        cancel = getattr(owner.thinker, "cancel_workflow", None)
        if cancel is None:
            self._leases.hand_back(conversation_id, owner.job_id, 0.0)
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
            holder = self._registry.holder(conversation_id, user_id)
        except PermissionError:
            return None
        return None if holder is None or holder.owner is None else holder.owner.thinker

    def get_stats(self) -> ServiceStats:
        """Live conversations; all zero after ``stop()``.

        Asked of the live actors directly (all at once, from the calling thread) through
        the supervisor's lock-free mirror, never through the supervisor, so it never holds
        up a spawn. Each actor answers after the messages this thread sent it before (a
        release included)."""
        if self._lifecycle.stopped:
            return ServiceStats(total=0, owned=0, idle=0)
        total, owned = self._registry.count()
        return ServiceStats(total=total, owned=owned, idle=total - owned)

    def sweep_expired(self) -> int:
        """Evict unowned conversations whose retention ran out, and fail waiters whose
        deadline passed (both on the service's clock); returns how many were evicted.
        The supervisor sweeps in slices, so spawns meanwhile wait for a slice at most."""
        return self._registry.sweep()

    def evict_conversation(self, conversation_id: str) -> bool:
        """Free an unowned conversation's memory; an owned one is left alone with a warning."""
        evicted = bool(self._registry.ask(Evict(conversation_id), False))
        if not evicted and self._live.get(conversation_id) is not None:
            logger.warning("not evicting conversation {}: it is owned", conversation_id)
        return evicted

    def remove_conversation(self, conversation_id: str, user_id: str) -> None:
        """Delete a conversation from memory and from both stores.

        Raises:
            PermissionError: it belongs to another user (live, saved or not, or stored).
            IllegalStateError: a job owns it right now, or the service is stopping.
        """
        if self._lifecycle.stopping.is_set():
            raise shutting_down()
        holder = self._registry.holder(conversation_id, user_id)
        if holder is not None and holder.owner is not None:
            raise IllegalStateError(
                f"Cannot remove conversation {conversation_id} while owned by job "
                f"{holder.owner.job_id}"
            )
        if self.store is not None:
            self.store.delete(conversation_id, user_id)  # its listener forgets the rest
        self._registry.forget(conversation_id, f"Conversation {conversation_id} was removed.")

    def _on_deleted(self, conversation_id: str) -> None:
        """The store's delete listener: nothing here serves the deleted record again; a live
        conversation never saved (another user's record had its id) stays."""
        self._registry.deleted(conversation_id)

    # -- following a running turn, offering it messages -------------------------------------

    def join(
        self, conversation_id: str, user_id: str, *, after: int | None = None
    ) -> AsyncIterator[Event]:
        """Follow the running agent turn on ``conversation_id``: first its text so far, then
        its live events; the iteration ends with the turn (its last event ``TurnDone`` when
        the turn succeeds). It ends at once when no turn runs, and for another user's
        conversation; ``turn_running`` tells the two apart (it refuses another user's).

        Args:
            after: resume a follow: every event of the running turn numbered (``seq``)
                above ``after``, each once and in order, those already published first
                (0: the whole turn). A number the turn has not reached gives its live events.
                The events are kept while the turn runs; once it has ended (or the process
                restarted) the join ends at once, as when no turn runs.

        Thread-safety: iterate it on any event loop; the turn may run anywhere.
        """
        return self._joined(conversation_id, user_id, after)

    async def _joined(
        self, conversation_id: str, user_id: str, after: int | None
    ) -> AsyncIterator[Event]:
        host = self._host(conversation_id, user_id)
        if host is not None:
            # closed if we stop early
            async with contextlib.aclosing(host.follow(after)) as events:
                async for event in events:
                    yield event

    def turn_running(self, conversation_id: str, user_id: str) -> bool:
        """Whether a turn others may join (``join``, ``offer``) runs on the conversation
        now: how a follower whose ``join`` ended at once tells an idle conversation of its
        own (False) from another user's (refused).

        Raises:
            PermissionError: another user's conversation, live or stored; the same refusal
                in every state (busy, idle, stored or not), which says the id is taken.
        """
        if self._registry.holder(conversation_id, user_id) is None and self.store is not None:
            self.store.version_of(conversation_id, user_id)  # a stored one's owner is checked
        return self._host(conversation_id, user_id) is not None

    def _host(self, conversation_id: str, user_id: str) -> Joinable | None:
        """The owning thinker if it hosts a turn others may join; None for nobody, another
        user, or a thinker that hosts none (a plain one)."""
        thinker: object = self.owning_thinker(conversation_id, user_id)  # any type to narrow
        return thinker if isinstance(thinker, Joinable) else None

    def offer(self, conversation_id: str, user_id: str, text: str) -> bool:
        """Offer ``text`` to the running agent turn, which adds it as a user message at its
        next boundary (offers in arrival order) and answers it within the turn. A turn that
        fails keeps its untaken offers as user messages, saved but unanswered.

        Returns:
            False when no turn runs (it has closed, or the conversation is another
            user's): start a fresh turn instead.

        Raises:
            ValueError: ``text`` is blank (empty or only whitespace); nothing was offered.

        Thread-safety: any number of threads may offer at once; none is lost.
        """
        if not text or text.isspace():
            raise ValueError("A message needs text that is not blank.")
        host = self._host(conversation_id, user_id)
        return host is not None and host.offer(text)

    # -- stopping ---------------------------------------------------------------------------

    def is_stopping(self) -> bool:
        return self._lifecycle.stopping.is_set()

    def stop(self) -> None:
        """Refuse new obtains, let owners finish (up to the grace), stop every actor.

        Idempotent. Never persists: the last boundary already did (a deferred save still
        unsettled once the owners are done is waited for, its failure logged). Afterwards
        queries answer empty, ``release`` is a no-op and obtains refuse with
        ``IllegalStateError``.
        """
        self._lifecycle.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)
