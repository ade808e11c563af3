"""The shard: one ``ConversationService`` and one ``Agent`` in one process, serving the turns
routed to it. ``ShardHost`` is plain Python (no Ray); the cluster runs it as a Ray actor.

Configuration crosses process boundaries, never live objects: the agent comes from an
importable factory (``"package.module:function"``, called once per shard so each shard builds
its own model clients), the store from a PostgreSQL connection string (or a factory too).
"""

from __future__ import annotations

import copyreg
import gc
import importlib
import os
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import msgspec

from parlour.runtime import ModelSpec
from parlour.runtime.errors import StaleVersionError
from parlour.runtime.snapshots import MessageSnapshot
from parlour.stores import PersistentStore

from .._service import ConversationService
from ..agent._agent import Agent
from ..agent._chat import Chat
from ..agent._events import AgentEvent, Reply, TurnDone
from ..agent._joiners import AgentThinker

__all__ = ["ClusterThinker", "ShardHost", "ShardStatus", "load_factory", "open_store"]

_FACTORY = re.compile(r"[\w.]+:[\w.]+")


def _reduce_stale(err: StaleVersionError) -> tuple[Any, ...]:
    return (StaleVersionError, (err.conversation_id, err.expected, err.found))


# The fence's refusal crosses from the shard to the caller as itself (its constructor takes
# the ids, so pickle needs telling how to rebuild it).
copyreg.pickle(StaleVersionError, _reduce_stale)


class ShardStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What a shard reports about itself.

    Attributes:
        shard: its name.
        pid: the process it runs in (a restarted shard has a new one).
        node: the Ray node it runs on ("" outside Ray).
        live: conversations held in memory.
        owned: conversations whose lease is held by a running turn.
        running: the ids of the conversations with a turn running now.
        turns: turns this incarnation has finished.
        started_at: when this incarnation started (seconds since the epoch).
        collector: its process's garbage collector thresholds (``gc.get_threshold()``).
    """

    shard: str
    pid: int
    node: str
    live: int
    owned: int
    running: list[str]
    turns: int
    started_at: float
    collector: tuple[int, int, int]


def load_factory(spec: str) -> Callable[[], Any]:
    """The callable named by ``"package.module:function"``.

    Raises:
        ValueError: ``spec`` is not of that form, or names nothing callable.
        ImportError: the module cannot be imported.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"A factory is named 'package.module:function', not {spec!r}.")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise ValueError(f"Factory {spec!r} names nothing callable.")
    return target  # type: ignore[no-any-return]


def open_store(spec: str) -> PersistentStore:
    """A store from its configuration: a factory (``package.module:function``), or else a
    PostgreSQL connection string (a URL or ``key=value`` pairs) for a ``PostgresStore``.

    Raises:
        ValueError, ImportError: as ``load_factory``, or for a factory that returns no store.
    """
    if not _FACTORY.fullmatch(spec):
        from parlour.stores import PostgresStore

        return PostgresStore(spec)
    store = load_factory(spec)()
    if not isinstance(store, PersistentStore):  # every member the protocol declares
        raise ValueError(
            f"Store factory {spec!r} returned {type(store).__name__}, not a PersistentStore "
            "(parlour.stores's PACKAGE.md lists what a store provides)."
        )
    return store


def portable(reply: Reply) -> Reply:
    """``reply`` as it crosses processes: its messages as ``MessageSnapshot``s (plain,
    frozen data), since a live message belongs to the conversation that holds it."""
    messages = [MessageSnapshot.of(m) for m in reply.messages]
    return msgspec.structs.replace(reply, messages=messages)


def _portable_event(event: AgentEvent) -> AgentEvent:
    if isinstance(event, TurnDone):
        return msgspec.structs.replace(event, reply=portable(event.reply))
    return event


class ClusterThinker(AgentThinker):
    """An agent thinker for a conversation whose id the cluster client minted.

    A ``new`` conversation is created by its first save, as a minted one is; one the store
    already holds (a retried first turn whose user message was saved) is adopted.
    """

    def __init__(self, user_id: str, conversation_id: str, new: bool, **kwargs: Any) -> None:
        super().__init__(user_id, **kwargs)
        self.set_conversation_id(conversation_id)
        self._new = new

    def is_conversation_minted(self) -> bool:
        return self._new


class ShardHost:
    """A shard's service and agent, and the calls the cluster routes to it.

    Args:
        shard: the shard's name.
        agent: the agent factory, ``"package.module:function"``, returning an ``Agent``.
        store: a PostgreSQL connection string, or a store factory.
        conversation_timeout_s: how long a turn waits for a busy conversation.

    Raises:
        ValueError, ImportError: a factory cannot be loaded, or returns the wrong thing.

    Thread-safety: the async methods run on one event loop (Ray's async actor loop); the
    sync ones may be called from any thread.
    """

    def __init__(
        self, shard: str, agent: str, store: str, *, conversation_timeout_s: float = 30.0
    ) -> None:
        built = load_factory(agent)()
        if not isinstance(built, Agent):
            raise ValueError(f"Agent factory {agent!r} returned {type(built).__name__}.")
        self.shard = shard
        self.agent = built
        self.store = open_store(store)
        self.service = ConversationService(
            self.store, conversation_timeout_s=conversation_timeout_s
        )
        self._running: dict[str, int] = {}
        self._turns = 0
        self._started_at = time.time()

    # -- turns ----------------------------------------------------------------------------

    def _chat(self, user_id: str, conversation_id: str, new: bool) -> Chat:
        if new and self.store.exists(conversation_id, user_id):
            new = False  # a retried first turn: its user message is already stored
        chat = self.agent.chat(self.service, user_id=user_id, conversation_id=conversation_id)
        chat.thinker = ClusterThinker(
            user_id,
            conversation_id,
            new,
            depth=self.agent.depth,
            output_declaration=self.agent.output,
            retain_duration=self.agent.retain,
        )
        return chat

    async def send(self, user_id: str, conversation_id: str, text: str, new: bool) -> Reply:
        """One whole turn, run here; the reply's messages are snapshots. Raises what
        ``Chat.asend`` raises; a save the fence refused (``StaleVersionError``) also drops
        this shard's copy of the conversation."""
        chat = self._chat(user_id, conversation_id, new)
        self._enter(conversation_id)
        try:
            return portable(await chat.asend(text))
        except StaleVersionError:
            self.service.evict_conversation(conversation_id)
            raise
        finally:
            self._leave(conversation_id)

    async def stream(
        self, user_id: str, conversation_id: str, text: str, new: bool
    ) -> AsyncIterator[AgentEvent]:
        """One whole turn as its events, ending with ``TurnDone``; raises what ``send`` does."""
        chat = self._chat(user_id, conversation_id, new)
        self._enter(conversation_id)
        try:
            async for event in chat.astream(text):
                yield _portable_event(event)
        except StaleVersionError:
            self.service.evict_conversation(conversation_id)
            raise
        finally:
            self._leave(conversation_id)

    def _enter(self, conversation_id: str) -> None:
        self._running[conversation_id] = self._running.get(conversation_id, 0) + 1

    def _leave(self, conversation_id: str) -> None:
        left = self._running.pop(conversation_id, 1) - 1
        if left:
            self._running[conversation_id] = left
        self._turns += 1

    # -- joiners, offers, release ---------------------------------------------------------

    async def join(
        self, conversation_id: str, user_id: str, after: int | None = None
    ) -> AsyncIterator[AgentEvent]:
        """The running turn's events, as ``ConversationService.join``."""
        async for event in self.service.join(conversation_id, user_id, after=after):
            # an Event to the service: here only AgentThinkers host turns, so an AgentEvent
            yield _portable_event(cast(AgentEvent, event))

    def offer(self, conversation_id: str, user_id: str, text: str) -> bool:
        """As ``ConversationService.offer``."""
        return self.service.offer(conversation_id, user_id, text)

    def force_release(self, conversation_id: str, user_id: str) -> str | None:
        """As ``ConversationService.force_release``."""
        return self.service.force_release(conversation_id, user_id)

    def remove_conversation(self, conversation_id: str, user_id: str) -> None:
        """As ``ConversationService.remove_conversation``."""
        self.service.remove_conversation(conversation_id, user_id)

    # -- operations -----------------------------------------------------------------------

    def model_spec(self) -> ModelSpec:
        """The spec of the model this shard's agent talks to."""
        return self.agent.client.spec

    def status(self, node: str = "") -> ShardStatus:
        stats = self.service.get_stats()
        return ShardStatus(
            shard=self.shard,
            pid=os.getpid(),
            node=node,
            live=stats.total,
            owned=stats.owned,
            running=sorted(self._running),
            turns=self._turns,
            started_at=self._started_at,
            collector=gc.get_threshold(),
        )

    def __enter__(self) -> ShardHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the service (owners finish within its grace) and close the store."""
        self.service.stop()
        self.store.close()
