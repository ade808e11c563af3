"""Supervisor: the registry of live conversation actors, their spawning, expiry and shutdown.

It is the only place actors are started or stopped, so spawning is race-free: two callers
that ask for the same conversation get the same actor. It asks conversation actors; they
never ask it (no cycle, no deadlock).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, NamedTuple

import pykka
from loguru import logger

from parlour.actors._conversation import (
    ConversationActor,
    Owner,
    QueryOwner,
    ReleaseForJob,
    StopIfIdle,
)
from parlour.runtime import Clock, ConversationContext


class Lookup(NamedTuple):
    conversation_id: str


class Spawn(NamedTuple):
    context: ConversationContext


class Evict(NamedTuple):
    conversation_id: str
    expired_only: bool = False


class Sweep(NamedTuple):
    pass


class Owners(NamedTuple):
    """Answer {conversation_id: Owner | None} for every live actor."""


class ReleaseAllForJob(NamedTuple):
    job_id: str


class Forget(NamedTuple):
    """Stop and drop an actor whatever its state (used by remove and shutdown)."""

    conversation_id: str


class StopAll(NamedTuple):
    pass


class Supervisor(pykka.ThreadingActor):
    """Owns ``{conversation_id: ActorRef}``; caps live actors, evicting idle ones LRU first."""

    def __init__(
        self,
        clock: Clock,
        max_live: int,
        mirror: dict[str, pykka.ActorRef[ConversationActor]] | None = None,
    ) -> None:
        super().__init__()
        self.clock = clock
        self.max_live = max_live
        self.live: OrderedDict[str, pykka.ActorRef[ConversationActor]] = OrderedDict()
        # A read-only view for the service's hot path; written here only, one atomic dict
        # operation at a time.
        self.mirror = mirror if mirror is not None else {}

    def on_receive(self, message: Any) -> Any:
        match message:
            case Lookup(conversation_id):
                return self._lookup(conversation_id)
            case Spawn(context):
                return self._spawn(context)
            case Evict(conversation_id, expired_only):
                return self._evict(conversation_id, expired_only)
            case Sweep():
                return self._sweep()
            case Owners():
                return self._owners()
            case ReleaseAllForJob(job_id):
                return self._release_all_for_job(job_id)
            case Forget(conversation_id):
                return self._forget(conversation_id)
            case StopAll():
                for conversation_id in list(self.live):
                    self._forget(conversation_id)
                return None
        raise TypeError(f"Supervisor got an unknown message {message!r}")

    def _lookup(self, conversation_id: str) -> pykka.ActorRef[ConversationActor] | None:
        ref = self.live.get(conversation_id)
        if ref is None:
            return None
        if not ref.is_alive():  # died without telling us: forget it, callers reload
            logger.warning("conversation actor {} died; dropping it", conversation_id)
            self._unregister(conversation_id)
            return None
        self.live.move_to_end(conversation_id)
        return ref

    def _spawn(self, context: ConversationContext) -> pykka.ActorRef[ConversationActor]:
        conversation_id = context.conversation_id or ""
        existing = self._lookup(conversation_id)
        if existing is not None:
            return existing  # another caller won the race; its context is the live one
        if len(self.live) >= self.max_live:
            self._evict_lru()
        ref = ConversationActor.start(context, self.clock)
        self.live[conversation_id] = ref
        self.mirror[conversation_id] = ref
        return ref

    def _evict_lru(self) -> None:
        for conversation_id in list(self.live):
            if len(self.live) < self.max_live:
                return
            self._evict(conversation_id, expired_only=False)

    def _evict(self, conversation_id: str, expired_only: bool) -> bool:
        ref = self.live.get(conversation_id)
        if ref is None:
            return False
        try:
            idle = ref.ask(StopIfIdle(expired_only), block=True)
        except pykka.ActorDeadError:
            idle = True
        if idle:
            self._forget(conversation_id)
        return bool(idle)

    def _unregister(self, conversation_id: str) -> pykka.ActorRef[ConversationActor] | None:
        """Drop the actor from the registry and its mirror; it is not stopped."""
        self.mirror.pop(conversation_id, None)
        return self.live.pop(conversation_id, None)

    def _forget(self, conversation_id: str) -> bool:
        ref = self._unregister(conversation_id)
        if ref is None:
            return False
        ref.stop()
        return True

    def _sweep(self) -> int:
        """Evict every unowned actor whose retention ran out; never touches a store."""
        evicted = 0
        for conversation_id in list(self.live):
            try:
                evicted += self._evict(conversation_id, expired_only=True)
            except Exception:  # one bad actor must not stop the sweep
                logger.exception("sweep failed on conversation {}", conversation_id)
        return evicted

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
                outcome = ref.ask(ReleaseForJob(job_id), block=True)
            except pykka.ActorDeadError:
                continue
            if outcome != "not_owner":
                released.append(conversation_id)
                self._evict(conversation_id, expired_only=False)
        return released

    def on_stop(self) -> None:
        for conversation_id in list(self.live):
            self._forget(conversation_id)

    def on_failure(self, *exc_info: Any) -> None:
        logger.error("supervisor failed; stopping its {} conversation actors", len(self.live))
        self.on_stop()
