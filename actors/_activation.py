"""``Activator``: the obtain side of ``ConversationService``. It finds or restores the
conversation's activation, asks it for the lease, and hands back a future (or, for asyncio,
a coroutine) of the grant.

Single activation is enforced here and in the actors: an activation that answers
``Retiring`` (or is dead) is looked up again through the supervisor; a restore reads the
supervisor's retirement epoch before it loads, and ``Spawn`` answers ``Reload`` when the
conversation retired since at a newer version, so stale state is never installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from typing import Any

import pykka
from loguru import logger

from parlour.runtime import Clock, ConversationContext, ResponseHandler
from parlour.runtime.errors import ConversationUnavailableError
from parlour.stores import PersistentStore, SessionStore

from ._conversation import ConversationActor
from ._kept import Kept
from ._leases import Leases, seconds
from ._messages import (
    Acquire,
    Delivery,
    Forward,
    Forwarded,
    FutureDelivery,
    GiveUp,
    Granted,
    LoopDelivery,
    Owner,
    Queued,
    Release,
    Retiring,
    Spawn,
    shutting_down,
)
from ._mirror import Seams
from ._obtain import Obtaining, Waiting, wait_async
from ._registry import Registry
from ._reply import ask_nowait, tell
from ._thinker import Thinker

__all__ = ["Activator"]

_tokens = itertools.count(1)
_ATTEMPTS = 16  # an activation retired between lookup and acquire: look again, this often
ActorRef = pykka.ActorRef[ConversationActor]
Entered = tuple[ActorRef, Acquire, Granted | Queued]  # the activation, the request, its answer


def _abandon_entry(done: asyncio.Future[Entered | None]) -> None:
    """An async obtain cancelled while its acquire was in flight: give up whatever it got
    (a grant is released, a queued request leaves the queue)."""
    if done.cancelled() or done.exception() is not None:
        return
    entered = done.result()
    if entered is None:
        return
    ref, request, _ = entered
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(GiveUp(request.owner.token, release_if_granted=True))


class Activator:
    """Obtains leases for jobs: finds the live activation (the mirror first, then the
    supervisor) or restores one (the session cache, then the store), asks it for the
    lease, and records each grant in ``leases``.

    Args:
        store: the persistent store restores read (None: nothing is durable).
        session: the session cache read before the store.
        shared: the store is shared between processes: a warm copy is checked against it.
        clock: each request's deadline.
        conversation_timeout_s: how long an acquirer waits for a busy conversation.
        seams: test hooks between the steps of a race.
        registry: the supervisor and its mirror.
        stopping: set once the service stops: every later obtain is refused.
        leases: where each grant is recorded.

    Thread-safety: every method from any thread.
    """

    def __init__(
        self,
        store: PersistentStore | None,
        session: SessionStore | None,
        shared: bool,
        clock: Clock,
        conversation_timeout_s: float,
        seams: Seams,
        registry: Registry,
        stopping: threading.Event,
        leases: Leases,
    ) -> None:
        self.store = store
        self.session = session
        self._shared = shared
        self.clock = clock
        self.conversation_timeout_s = conversation_timeout_s
        self._seams = seams
        self._registry = registry
        self._mirror = registry.mirror
        self._live = registry.mirror.refs  # read lock-free on the warm path
        self._stopping = stopping
        self._leases = leases

    def obtain(
        self,
        conversation_id: str | None,
        thinker: Thinker,
        handler: ResponseHandler | None = None,
        must_exist: bool | None = None,
    ) -> Obtaining:
        """``ConversationService.obtain_conversation``: a future of the conversation, owned
        by ``thinker`` once it completes; a refusal is a failed future, never raised."""
        cid = conversation_id or thinker.conversation_id
        context = self._reclaim(cid, thinker)
        if context is not None:
            return Obtaining.ready(context)
        delivery = FutureDelivery()
        try:
            entered = self._enter(cid, thinker, handler, must_exist, delivery)
            assert entered is not None  # None only for warm_only
            ref, request, answer = entered
        except Exception as exc:
            if not isinstance(exc, (ConversationUnavailableError, PermissionError, LookupError)):
                logger.opt(exception=exc).error("obtain failed for {}", cid)
            return Obtaining.refused(exc)
        if isinstance(answer, Granted):
            self._leases.hold(cid, thinker.job_id, answer.context, ref, thinker, request.owner.kept)
            return Obtaining.ready(answer.context)
        waiting = self._waiting(ref, cid, request, thinker)
        waiting.again = lambda: self.obtain(conversation_id, thinker, handler, must_exist)
        return Obtaining(waiting, delivery)

    async def obtain_async(
        self,
        conversation_id: str | None,
        thinker: Thinker,
        handler: ResponseHandler | None = None,
        must_exist: bool | None = None,
    ) -> ConversationContext:
        """``ConversationService.obtain_async``: the grant completes an asyncio future
        from the releasing thread; cancelling the task gives the obtain up.

        Raises:
            The same errors ``obtain``'s future fails with.
        """
        cid = conversation_id or thinker.conversation_id
        context = self._reclaim(cid, thinker)
        if context is not None:
            return context
        delivery = LoopDelivery(asyncio.get_running_loop())
        entered = None
        if cid in self._live and not self._shared:  # warm: the actor answers on this thread
            entered = self._enter(cid, thinker, handler, must_exist, delivery, True)
        if entered is None:
            entered = await self._enter_in_thread(cid, thinker, handler, must_exist, delivery)
        ref, request, answer = entered
        if isinstance(answer, Granted):
            self._leases.hold(cid, thinker.job_id, answer.context, ref, thinker, request.owner.kept)
            return answer.context
        return await wait_async(
            self._waiting(ref, cid, request, thinker),
            delivery,
            lambda: self.obtain_async(conversation_id, thinker, handler, must_exist),
        )

    async def _enter_in_thread(
        self,
        cid: str,
        thinker: Thinker,
        handler: ResponseHandler | None,
        must_exist: bool | None,
        delivery: Delivery,
    ) -> Entered:
        """``_enter`` in the default executor (it may load from the store or wait for the
        supervisor); a cancelled caller gives up whatever the entry got."""
        entering = asyncio.ensure_future(
            asyncio.to_thread(self._enter, cid, thinker, handler, must_exist, delivery)
        )
        try:
            entered = await asyncio.shield(entering)
        except asyncio.CancelledError:
            entering.add_done_callback(_abandon_entry)
            raise
        assert entered is not None  # None only for warm_only
        return entered

    def _waiting(self, ref: ActorRef, cid: str, request: Acquire, thinker: Thinker) -> Waiting:
        return Waiting(
            ref,
            cid,
            request.owner,
            request.deadline,
            request.timeout_s,
            self.clock,
            lambda context: self._leases.hold(
                cid, thinker.job_id, context, ref, thinker, request.owner.kept
            ),
        )

    def _reclaim(self, cid: str, thinker: Thinker) -> ConversationContext | None:
        """The lease ``thinker`` kept since its last turn, when it still holds it: no
        message to the activation (see ``_kept.py``)."""
        if self._stopping.is_set():
            return None  # ``_enter`` refuses
        context = self._leases.reclaim(cid, thinker)
        if context is not None:
            self._mirror.touch(cid)  # the live cap's LRU
        return context

    def _enter(
        self,
        cid: str,
        thinker: Thinker,
        handler: ResponseHandler | None,
        must_exist: bool | None,
        delivery: Delivery,
        warm_only: bool = False,
    ) -> Entered | None:
        """Find or restore the activation and ask it for the lease, looking again while
        the activations it reaches are retiring or dead: ``(ref, request, answer)``. With
        ``warm_only``, only the live activation in the mirror is asked (nothing that can
        wait for the supervisor or the store), and None stands for "not answered"."""
        if self._stopping.is_set():
            logger.error("[ConvSvc] Shutting down, dropping request for {}", cid)
            raise shutting_down()
        timeout_s = self.conversation_timeout_s
        retain_s = seconds(thinker.retain_duration)
        # a thinker that keeps its lease between its turns (never on a shared store: another
        # process's save would go unseen, nor with no retention: it asked to be evicted)
        keeps = retain_s > 0 and not self._shared and hasattr(thinker, "kept_lease")
        owner = Owner(
            thinker.job_id,
            thinker.user_id,
            thinker.workflow_id,
            thinker,
            next(_tokens),
            Kept() if keeps else None,
        )
        request = Acquire(owner, self.clock.now() + timeout_s, retain_s, timeout_s, delivery)
        ref = self._live.get(cid)
        if ref is not None:  # the lock-free fast path
            answer = self._answer(cid, ask_nowait(ref, request))
            if answer is not None and (
                not self._shared or self._current(cid, ref, request, answer)
            ):
                self._mirror.touch(cid)  # the live cap's LRU, without asking the supervisor
                return ref, request, answer
        if warm_only:
            return None
        # Nothing live or parked: restore at once (Spawn forwards to a racing winner).
        look = ref is not None or cid in self._mirror.parked
        for _ in range(_ATTEMPTS):
            forwarded = self._registry.ask_or_refuse(Forward(cid, request)) if look else None
            look = True
            restored = forwarded is None
            if restored:
                forwarded = self._activate(cid, thinker, handler, must_exist, request)
            if forwarded is not None:
                answer = self._answer(cid, forwarded.reply)
                if answer is not None and (
                    restored or self._current(cid, forwarded.ref, request, answer)
                ):
                    return forwarded.ref, request, answer
        raise ConversationUnavailableError(f"Conversation {cid} kept being evicted.")

    def _current(self, cid: str, ref: ActorRef, request: Acquire, answer: Granted | Queued) -> bool:
        """Whether a warm grant may stand: always, unless the store is shared between
        processes and another one saved since this activation's copy. A stale grant is
        released and the activation and cache entry dropped, so the caller restores."""
        if not self._shared or not isinstance(answer, Granted):
            return True
        stored = self._stored_version(cid, request.owner.user_id)
        if stored == answer.context.stored_version:
            return True
        with contextlib.suppress(pykka.ActorDeadError):
            ref.ask(Release(request.owner.job_id, 0.0), block=True)
        self._registry.forget(cid, f"Conversation {cid} was saved by another process.", True)
        return False

    def _stored_version(self, cid: str, user_id: str) -> int:
        assert self.store is not None  # only a shared store asks
        return self.store.version_of(cid, user_id) or 0

    def _answer(self, cid: str, reply: pykka.Future[Any]) -> Granted | Queued | None:
        """The activation's answer to the acquire; None when it is retiring or dead.

        Raises:
            PermissionError: the conversation belongs to another user.
        """
        try:
            answer: Granted | Queued | Retiring = reply.get()
        except pykka.ActorDeadError:
            answer = Retiring()
        if not isinstance(answer, Retiring):
            return answer
        if self._seams.on_look_again is not None:
            self._seams.on_look_again(cid)
        return None

    def _activate(
        self,
        cid: str,
        thinker: Thinker,
        handler: ResponseHandler | None,
        must_exist: bool | None,
        request: Acquire,
    ) -> Forwarded | None:
        """Restore (or create), spawn and forward; None when the load may be stale."""
        if must_exist is None:
            must_exist = cid != thinker.job_id and not thinker.is_conversation_minted()
        epoch = self._mirror.epoch  # read before the load: see Supervisor
        orphaned = self._leases.orphaned(cid)
        if orphaned is not None:  # its activation died while owned: take the lease over
            return self._take_over(epoch, request, *orphaned)
        context = self._restore_or_create(cid, thinker, handler, must_exist)
        if self._seams.after_load is not None:
            self._seams.after_load(cid)
        answer = self._registry.ask_or_refuse(Spawn(context, epoch, request))
        return answer if isinstance(answer, Forwarded) else None

    def _take_over(
        self, epoch: int, request: Acquire, holder: Thinker, context: ConversationContext
    ) -> Forwarded | None:
        """A new activation of ``context`` (the holder's own), granted to the recorded
        holder first, so ``request`` waits for its release as it would have on the dead
        one. The holder's release finds its dead activation and goes to the live one
        (``Leases.hand_back``); one that came before the new activation was live is made
        here, for the taken-over grant alone (its token: a later lease of the same job is
        untouched)."""
        cid = context.conversation_id or ""
        owner = Owner(holder.job_id, holder.user_id, holder.workflow_id, holder, next(_tokens))
        retain_s = seconds(holder.retain_duration)
        granted = Acquire(owner, request.deadline, retain_s, request.timeout_s)
        answer = self._registry.ask_or_refuse(Spawn(context, epoch, request, granted))
        if not isinstance(answer, Forwarded):
            return None
        if not self._leases.holds(cid, holder.job_id):  # released meanwhile, to the dead one
            tell(answer.ref, GiveUp(owner.token, release_if_granted=True))  # this grant only
        return answer

    def _restore_or_create(
        self, cid: str, thinker: Thinker, handler: ResponseHandler | None, must_exist: bool
    ) -> ConversationContext:
        temporary = cid == thinker.job_id
        # a minted id is reserved for its owner before it is looked up, so no other user's
        # create can take it between the lookup and the first save (the thinker holds it
        # until the new context does)
        reserve = self.store.reserve if self.store is not None and not must_exist else None
        if reserve is not None and not temporary and thinker.is_conversation_minted():
            reserve(cid, thinker.user_id, thinker)
        else:
            reserve = None
        context = None if temporary else self._load(cid, thinker, handler)
        if context is None:
            if must_exist:
                raise ConversationUnavailableError(
                    f"Cannot resume conversation {cid}: it is not in memory and no store holds it."
                )
            context = ConversationContext(cid, user_id=thinker.user_id, temporary=temporary)
            if reserve is not None:
                reserve(cid, thinker.user_id, context)
        else:
            context.add_tools(thinker.build_tool_definition_blocks())
        context.temporary = temporary  # identity decides, never a stored or settable flag
        context.grade = thinker.grade
        context.depth = thinker.depth
        context.output_declaration = thinker.output_declaration
        context.interactive = thinker.interactive
        return context

    def _load(
        self, cid: str, thinker: Thinker, handler: ResponseHandler | None
    ) -> ConversationContext | None:
        snapshot = self.session.get(cid, thinker.user_id) if self.session else None
        if (
            snapshot is not None
            and self._shared
            and snapshot.stored_version != self._stored_version(cid, thinker.user_id)
        ):
            assert self.session is not None
            self.session.delete(cid)  # another process saved since: the store decides
            snapshot = None
        if snapshot is None and self.store is not None:
            snapshot = self.store.load(cid, thinker.user_id, thinker)
        return None if snapshot is None else snapshot.to_conversation(handler)
