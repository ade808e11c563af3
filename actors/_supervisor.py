"""Supervisor: the registry of live conversation actors, their spawning, expiry and shutdown.

It is the only place actors are started or stopped, so spawning is race-free: two callers
that ask for the same conversation get the same actor. It asks conversation actors; they
never ask it (no cycle, no deadlock).

It also counts retirements: every activation that leaves the registry (evicted, dead,
dropped) and every deleted record bumps ``Mirror.epoch`` and records the conversation's
retirement with the last version its owners saved. A restore reads the epoch before it
loads; ``Spawn`` refuses (``Reload``) when the conversation retired after that at a version
newer than the loaded one (an owner of the retired activation saved after the load). So a
restore never installs state older than the last acknowledged save, and a load that is
current is never sent back.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from typing import Any

import pykka
from loguru import logger

from parlour.runtime import Clock, ConversationContext

from ._conversation import ConversationActor
from ._messages import (
    Acquire,
    Busy,
    Doom,
    Drop,
    Evict,
    Forward,
    Forwarded,
    Idle,
    Lookup,
    Owners,
    QueryOwner,
    ReleaseAllForJob,
    Released,
    ReleaseForJob,
    Reload,
    Spawn,
    StopAll,
    StopIfIdle,
    Sweep,
    SweepSlice,
)
from ._messages import Owner as Owner
from ._mirror import Mirror as Mirror
from ._mirror import Seams as Seams
from ._reply import LightActor

ActorRef = pykka.ActorRef[ConversationActor]

# How many retirements are remembered one by one; older ones fold into a floor.
_RETIREMENTS_KEPT = 65_536
# How many actors one slice of a sweep asks at once: a spawn waits for one slice at most.
_SWEEP_SLICE = 64
# The version recorded when it is unknown (a dead activation) or gone (a deleted record):
# a restore that loaded before such a retirement always reloads.
_UNKNOWN = 1 << 62
_RETIRE = StopIfIdle(expired_only=False, stop=True)
_RETIRE_EXPIRED = StopIfIdle(expired_only=True, stop=True)


class Supervisor(LightActor):
    """Owns ``{conversation_id: ActorRef}`` and the parked idle conversations; caps the
    live ones (``max_live``, actors and parked) evicting idle ones LRU first, and the actors
    (``max_active``) parking idle ones LRU first. Like every ``LightActor`` it has no
    thread: its handlers run in the thread that is draining its mailbox (a spawn is
    answered in the restoring caller's own thread; a sweep's slices run in the sweeper's,
    interleaved with whatever others send meanwhile)."""

    def __init__(
        self,
        clock: Clock,
        max_live: int,
        mirror: Mirror,
        seams: Seams | None = None,
        max_active: int | None = None,
    ) -> None:
        super().__init__()
        self.clock = clock
        self.max_live = max_live
        self.max_active = max_live if max_active is None else max(max_active, 1)
        # Past max_active, this many idle actors are parked at once (asked together), so
        # the next spawns start without asking anyone.
        self.park_batch = max(1, self.max_active // 16)
        self.live: OrderedDict[str, ActorRef] = OrderedDict()
        self.parked = mirror.parked
        self.mirror = mirror
        self.seams = seams or Seams()
        self.retired: OrderedDict[str, tuple[int, int]] = OrderedDict()  # (epoch, version)
        self.retired_floor = 0
        self.placed: dict[str, int] = {}  # the tick at which each took its place in the LRU
        self.sweeps: dict[int, tuple[pykka.Future[int], int]] = {}  # unfinished: (done, count)

    def on_receive(self, message: Any) -> Any:
        match message:
            case Lookup(conversation_id):
                return self._lookup(conversation_id)
            case Forward(conversation_id, request):
                return self._forward(conversation_id, request)
            case Spawn(context, epoch, request, holder):
                return self._spawn(context, epoch, request, holder)
            case Evict(conversation_id, expired_only):
                return self._evict(conversation_id, expired_only)
            case Sweep(done):
                return self._sweep(done)
            case SweepSlice(remaining, evicted, done):
                return self._sweep_slice(remaining, evicted, done)
            case Owners():
                return self._owners()
            case ReleaseAllForJob(job_id):
                return self._release_all_for_job(job_id)
            case Drop(conversation_id, reason, reload):
                return self._drop(conversation_id, reason, reload)
            case StopAll():
                return self._stop_all()
        raise TypeError(f"Supervisor got an unknown message {message!r}")

    # -- the registry -----------------------------------------------------------------------

    def _lookup(self, conversation_id: str) -> ActorRef | None:
        """The live actor, re-attaching a parked conversation to a new one."""
        ref = self.live.get(conversation_id)
        if ref is None:
            parked = self.parked.pop(conversation_id, None)
            if parked is None:
                return None
            return self._launch(conversation_id, self._new_actor(*parked))
        if not ref.is_alive():  # died without telling us: forget it, callers reload
            logger.warning("conversation actor {} died; dropping it", conversation_id)
            self._unregister(conversation_id)
            return None
        self._to_back(conversation_id)
        return ref

    def _to_back(self, conversation_id: str) -> None:
        """Most recently used: the back of the LRU."""
        self.live.move_to_end(conversation_id)
        self.placed[conversation_id] = next(self.mirror.ticks)

    def _forward(self, conversation_id: str, request: Acquire) -> Forwarded | None:
        if conversation_id not in self.live and conversation_id in self.parked:
            return self._attach(conversation_id, *self.parked.pop(conversation_id), request)
        ref = self._lookup(conversation_id)
        if ref is None:
            return None
        try:
            return Forwarded(ref, ref.ask(request, block=False))
        except pykka.ActorDeadError:
            self._unregister(conversation_id)
            return None

    def _spawn(
        self,
        context: ConversationContext,
        epoch: int,
        request: Acquire,
        holder: Acquire | None = None,
    ) -> Forwarded | Reload:
        conversation_id = context.conversation_id or ""
        existing = self._forward(conversation_id, request)
        if existing is not None:
            return existing  # another caller won the race; its context is live
        if holder is None and self._stale(conversation_id, epoch, context.stored_version):
            return Reload()  # retired since the caller loaded, at a newer version
        if len(self.live) + len(self.parked) >= self.max_live:
            self._evict_lru()
        return self._attach(conversation_id, context, None, request, holder)

    def _attach(
        self,
        conversation_id: str,
        context: ConversationContext,
        expires_at: float | None,
        request: Acquire,
        holder: Acquire | None = None,
    ) -> Forwarded:
        """Start and register the conversation's activation, ``request`` answered as its
        first message (after ``holder``'s, granted: a lease taken over) before it is
        launched and published: before any other message can reach it."""
        actor = self._new_actor(context, expires_at)
        if holder is not None:
            actor.answer_first(holder)
        reply = actor.answer_first(request)
        return Forwarded(self._launch(conversation_id, actor), reply)

    def _new_actor(
        self, context: ConversationContext, expires_at: float | None
    ) -> ConversationActor:
        """An activation not yet launched, parking the least recently used idle ones first
        when the actors are at their cap."""
        if len(self.live) >= self.max_active:
            self._shrink(self.max_active + 1 - self.park_batch, park=True)
        return ConversationActor(context, self.clock, expires_at)

    def _launch(self, conversation_id: str, actor: ConversationActor) -> ActorRef:
        ref = actor.launch()
        self.live[conversation_id] = ref
        self.placed[conversation_id] = next(self.mirror.ticks)
        self.mirror.refs[conversation_id] = ref
        return ref

    def _stale(self, conversation_id: str, epoch: int, loaded_version: int) -> bool:
        seen = self.retired.get(conversation_id)
        if seen is None:
            return self.retired_floor > epoch  # forgotten: assume the worst
        retired_at, version = seen
        return retired_at > epoch and version > loaded_version

    def _retire(self, conversation_id: str, version: int = _UNKNOWN) -> None:
        self.mirror.epoch += 1
        self.retired[conversation_id] = (self.mirror.epoch, version)
        self.retired.move_to_end(conversation_id)
        while len(self.retired) > _RETIREMENTS_KEPT:
            _, (oldest, _) = self.retired.popitem(last=False)
            self.retired_floor = max(self.retired_floor, oldest)

    def _unregister(self, conversation_id: str, version: int = _UNKNOWN) -> ActorRef | None:
        """Drop the actor from the registry and its mirror (it is not stopped)."""
        self.mirror.refs.pop(conversation_id, None)
        self.mirror.touched.pop(conversation_id, None)
        self.placed.pop(conversation_id, None)
        ref = self.live.pop(conversation_id, None)
        if ref is not None:
            self._retire(conversation_id, version)
        return ref

    def _forget(self, conversation_id: str) -> None:
        """Unregister and stop, waiting for the stop."""
        ref = self._unregister(conversation_id)
        if ref is not None:
            ref.stop(block=True)

    # -- eviction ---------------------------------------------------------------------------

    def _evict_lru(self) -> None:
        """Below the live cap: the parked first (the oldest parked is the least recently
        used idle conversation), then actors."""
        while self.parked and len(self.live) + len(self.parked) >= self.max_live:
            conversation_id, (context, _) = self.parked.popitem(last=False)
            self._retire(conversation_id, context.stored_version)
        self._shrink(self.max_live - len(self.parked), park=False)

    def _shrink(self, limit: int, park: bool) -> None:
        """Evict (or park) from the front of the LRU until fewer than ``limit`` actors,
        asking as many victims as are missing at once. One touched by a warm obtain since
        it took its place goes to the back instead (each such move is paid for by a use,
        so the choice of a victim is O(1) amortized), and so does a busy one; every actor
        is looked at once at most."""
        unseen = len(self.live)
        while unseen and len(self.live) >= limit:
            asked: list[tuple[str, pykka.Future[Idle | Busy]]] = []
            while unseen and len(asked) <= len(self.live) - limit:
                unseen -= 1
                conversation_id = next(iter(self.live))
                used = self.mirror.touched.get(conversation_id, 0) > self.placed[conversation_id]
                self._to_back(conversation_id)  # a victim leaves the registry anyway
                if not used:
                    ref = self.live[conversation_id]
                    asked.append((conversation_id, ref.ask(_RETIRE, block=False)))
            for conversation_id, reply in asked:
                self._retire_if_idle(conversation_id, reply, park)

    def _evict(self, conversation_id: str, expired_only: bool, park: bool = False) -> bool:
        ref = self.live.get(conversation_id)
        if ref is None:
            return self._evict_parked(conversation_id, expired_only)
        reply = ref.ask(StopIfIdle(expired_only, stop=True), block=False)
        return self._retire_if_idle(conversation_id, reply, park)

    def _evict_parked(self, conversation_id: str, expired_only: bool) -> bool:
        parked = self.parked.get(conversation_id)
        if parked is None or (expired_only and self.clock.now() < parked[1]):
            return False
        del self.parked[conversation_id]
        self._retire(conversation_id, parked[0].stored_version)
        return True

    def _sweep(self, done: pykka.Future[int] | None) -> int | None:
        """Evict every unowned actor whose retention ran out (failing expired waiters on
        the way); never touches a store. With ``done``, in slices of ``_SWEEP_SLICE``
        actors asked at once, each slice a message of its own, so a spawn queued meanwhile
        waits for one slice, never the whole sweep."""
        remaining = list(self.live)
        evicted = self._sweep_parked()
        if done is not None:
            self.sweeps[id(done)] = (done, evicted)
            self.actor_ref.tell(SweepSlice(remaining, evicted, done))
            return None
        while remaining:
            evicted += self._sweep_some(remaining)
        return evicted

    def _sweep_parked(self) -> int:
        """Forget every parked conversation whose retention ran out (no actor to ask)."""
        now = self.clock.now()
        expired = [cid for cid, (_, expires_at) in self.parked.items() if now >= expires_at]
        for conversation_id in expired:
            self._evict_parked(conversation_id, expired_only=False)
        return len(expired)

    def _sweep_slice(self, remaining: list[str], evicted: int, done: pykka.Future[int]) -> None:
        evicted += self._sweep_some(remaining)  # it logs and skips what fails
        if remaining:
            self.sweeps[id(done)] = (done, evicted)
            self.actor_ref.tell(SweepSlice(remaining, evicted, done))
        else:
            del self.sweeps[id(done)]
            done.set(evicted)

    def _sweep_some(self, remaining: list[str]) -> int:
        """Ask the last ``_SWEEP_SLICE`` of ``remaining`` (removing them) whether they are
        idle and expired, all at once; forget those that agreed."""
        chunk = remaining[-_SWEEP_SLICE:]
        del remaining[-_SWEEP_SLICE:]
        asked = []
        for conversation_id in chunk:
            ref = self.live.get(conversation_id)
            if ref is not None:  # a dead one's future holds ActorDeadError
                asked.append((conversation_id, ref.ask(_RETIRE_EXPIRED, block=False)))
        evicted = 0
        for conversation_id, reply in asked:
            try:
                evicted += self._retire_if_idle(conversation_id, reply)
            except Exception:  # one bad actor must not stop the sweep
                logger.exception("sweep failed on conversation {}", conversation_id)
        return evicted

    def _retire_if_idle(
        self, conversation_id: str, reply: pykka.Future[Idle | Busy], park: bool = False
    ) -> bool:
        try:
            answer = reply.get()
        except pykka.ActorDeadError:
            answer = Idle(_UNKNOWN)
        if isinstance(answer, Busy) or conversation_id not in self.live:
            return False
        if self.seams.after_idle_answer is not None:
            self.seams.after_idle_answer(conversation_id)
        self._unregister(conversation_id, answer.stored_version)  # it has stopped itself
        if park and answer.context is not None:  # held without an actor until obtained
            self.parked[conversation_id] = (answer.context, answer.expires_at)
        return True

    def _drop(self, conversation_id: str, reason: str, reload: bool = False) -> None:
        self.parked.pop(conversation_id, None)
        ref = self._unregister(conversation_id)
        if ref is None:
            self._retire(conversation_id)  # a restore racing a delete must reload too
            return
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(Doom(reason, reload))

    # -- queries and shutdown ---------------------------------------------------------------

    def _owners(self) -> dict[str, Owner | None]:
        owners: dict[str, Owner | None] = {}
        for conversation_id, ref in list(self.live.items()):
            try:
                owners[conversation_id] = ref.ask(QueryOwner(), block=True)
            except pykka.ActorDeadError:
                self._unregister(conversation_id)
        return owners

    def _release_all_for_job(self, job_id: str) -> list[str]:
        released = []
        for conversation_id, ref in list(self.live.items()):
            try:
                outcome: Released = ref.ask(ReleaseForJob(job_id), block=True)
            except pykka.ActorDeadError:
                continue
            if outcome.owned:
                released.append(conversation_id)
                self._evict(conversation_id, expired_only=False)
        return released

    def _stop_all(self) -> None:
        self.parked.clear()
        for conversation_id in list(self.live):
            self._forget(conversation_id)

    def on_stop(self) -> None:
        self._stop_all()
        self._finish_sweeps()

    def _finish_sweeps(self) -> None:
        """A sweep cut short by the stop answers what it evicted so far."""
        for done, evicted in self.sweeps.values():
            done.set(evicted)
        self.sweeps.clear()

    def on_failure(self, *exc_info: Any) -> None:
        logger.error("supervisor failed; stopping its {} conversation actors", len(self.live))
        self._stop_all()
        self._finish_sweeps()
