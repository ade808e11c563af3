"""Where the HTTP host's turns run: the seam between ``ChatHost`` and either a local
``Agent`` on a ``ConversationService`` (``LocalTurns``) or an ``AgentCluster``
(``ClusterTurns``), whose shards run each turn where its conversation lives.

The host asks both the same few things: a chat for a conversation, an offer to its running
turn, the events of a turn some other code runs, a forced release and a removal.
The usage ledger shown is the one saved with the conversation, read from the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, cast

from parlour.runtime import (
    ContentFormatter,
    GenericContentFormatter,
    ModelSpec,
    NativeToolsFormatter,
)
from parlour.runtime.errors import IllegalStateError

from ..._service import ConversationService
from ...agent._agent import Agent
from ...agent._chat import Chat
from ...agent._events import AgentEvent, TurnError

if TYPE_CHECKING:
    from ...cluster import AgentCluster, ClusterChat

__all__ = ["ClusterTurns", "HostedChat", "LocalTurns", "Turns"]


class HostedChat(Protocol):
    """One user's conversation, one turn at a time: a local ``Chat`` or a ``ClusterChat``."""

    @property
    def conversation_id(self) -> str: ...

    @property
    def user_id(self) -> str: ...

    def astream(self, text: str) -> AsyncIterator[AgentEvent]: ...


class Turns(Protocol):
    """What the host asks of whatever runs its turns.

    ``offer``, ``force_release`` and ``remove`` may block (the host calls them off its
    loop); ``chat`` does not; ``join_running`` is iterated on the loop.
    """

    @property
    def spec(self) -> ModelSpec: ...

    @property
    def formatter(self) -> ContentFormatter:
        """How the model's client renders tools (natively, or as text), for the inspector's
        view of what the model is sent."""
        ...

    def chat(self, user_id: str, conversation_id: str | None = None) -> HostedChat: ...

    def offer(self, conversation_id: str, user_id: str, text: str) -> bool: ...

    def join_running(
        self, conversation_id: str, user_id: str, *, after: int | None = None
    ) -> AsyncIterator[AgentEvent]: ...

    def force_release(self, conversation_id: str, user_id: str) -> str | None: ...

    def remove(self, conversation_id: str, user_id: str) -> None: ...


class LocalTurns:
    """Turns on ``agent`` over ``service`` in this process (``parlour serve``'s default).

    Thread-safety: as the agent's and the service's.
    """

    def __init__(self, agent: Agent, service: ConversationService) -> None:
        self.agent = agent
        self.service = service

    @property
    def spec(self) -> ModelSpec:
        return self.agent.client.spec

    @property
    def formatter(self) -> ContentFormatter:
        return self.agent.client.formatter

    def chat(self, user_id: str, conversation_id: str | None = None) -> Chat:
        return self.agent.chat(self.service, user_id=user_id, conversation_id=conversation_id)

    def offer(self, conversation_id: str, user_id: str, text: str) -> bool:
        return self.service.offer(conversation_id, user_id, text)

    async def join_running(
        self, conversation_id: str, user_id: str, *, after: int | None = None
    ) -> AsyncIterator[AgentEvent]:
        """The turn some owner runs on the conversation (after the event numbered
        ``after``, as ``service.join``); nothing when none does (asked off the loop: it is
        an actor round trip)."""
        owner = await asyncio.to_thread(self.service.owning_thinker, conversation_id, user_id)
        if owner is None:
            return
        async for event in self.service.join(conversation_id, user_id, after=after):
            # an Event to the service: here only AgentThinkers host turns, so an AgentEvent
            yield cast(AgentEvent, event)

    def force_release(self, conversation_id: str, user_id: str) -> str | None:
        return self.service.force_release(conversation_id, user_id)

    def remove(self, conversation_id: str, user_id: str) -> None:
        self.service.remove_conversation(conversation_id, user_id)


class ClusterTurns:
    """Turns on an ``AgentCluster``: each runs on its conversation's shard, its events
    streamed back. A lost shard is a failed turn (``ShardLostError``, retryable); for an
    offer, a join or a release it is the answer "no turn runs there now".

    Args:
        cluster: the cluster (``ray.init`` has run in this process).

    Thread-safety: any thread; the model spec is asked of the first shard once, here.
    """

    def __init__(self, cluster: AgentCluster) -> None:
        self.cluster = cluster
        self._spec = cluster.model_spec()

    @property
    def spec(self) -> ModelSpec:
        return self._spec

    @property
    def formatter(self) -> ContentFormatter:
        """The offline model renders tools as text; every provider's client, natively."""
        native = self._spec.provider != "scripted"
        return NativeToolsFormatter() if native else GenericContentFormatter()

    def chat(self, user_id: str, conversation_id: str | None = None) -> ClusterChat:
        return self.cluster.chat(user_id=user_id, conversation_id=conversation_id)

    def offer(self, conversation_id: str, user_id: str, text: str) -> bool:
        try:
            return self.cluster.offer(conversation_id, user_id, text)
        except TurnError as exc:
            _unless_lost(exc)
            return False  # the send becomes a turn of its own, which reports the loss

    async def join_running(
        self, conversation_id: str, user_id: str, *, after: int | None = None
    ) -> AsyncIterator[AgentEvent]:
        """The turn running on the conversation's shard, from any process that started it
        (after the event numbered ``after``, as ``service.join``)."""
        try:
            async for event in self.cluster.join(conversation_id, user_id, after=after):
                yield event
        except TurnError as exc:
            _unless_lost(exc)

    def force_release(self, conversation_id: str, user_id: str) -> str | None:
        try:
            return self.cluster.force_release(conversation_id, user_id)
        except TurnError as exc:
            _unless_lost(exc)
            return None

    def remove(self, conversation_id: str, user_id: str) -> None:
        """Raises ``IllegalStateError`` when a turn owns it, or its shard was lost."""
        try:
            self.cluster.remove_conversation(conversation_id, user_id)
        except TurnError as exc:
            _unless_lost(exc)
            raise IllegalStateError(str(exc)) from exc


def _unless_lost(exc: TurnError) -> None:
    """Re-raise ``exc`` unless it is a retryable loss (the cluster's ``ShardLostError``;
    matched by its kind, since this module does not import the cluster)."""
    if not getattr(exc, "retryable", False):
        raise exc
