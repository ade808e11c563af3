"""The agent factories the cluster tests name (``cluster_agents:scripted``), a gate a tool
waits on, and a turn run from another process. Imported by the shards' worker processes."""

from __future__ import annotations

import asyncio
from typing import Any

from parlour.actors import Agent, Reply
from parlour.runtime import Depth, OutputSize, ScriptedClient

GATE = "parlour-test-gate"
NAMESPACE = "parlour-test"


async def hold() -> str:
    """Waits until the test opens the gate."""
    import ray

    gate = ray.get_actor(GATE, namespace=NAMESPACE)
    await gate.arrive.remote()
    await gate.wait.remote()
    return "released"


def scripted() -> Agent:
    """The scripted model with the ``hold`` tool (a message naming it calls it)."""
    return Agent(
        ScriptedClient(),
        tools=[hold],
        objective="Answer briefly.",
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
        tool_timeout_s=120.0,
    )


def not_an_agent() -> object:
    return object()


class Gate:
    """A one-shot gate across processes (run as a Ray actor): tools arrive, the test opens."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.arrivals = 0
        self._arrived = asyncio.Event()
        self._opened = asyncio.Event()

    async def arrive(self) -> None:
        self.arrivals += 1
        self._arrived.set()

    async def arrived(self) -> int:
        await self._arrived.wait()
        return self.arrivals

    async def wait(self) -> None:
        await self._opened.wait()

    async def open(self) -> None:
        self._opened.set()


def send_from_here(cluster: dict[str, Any], user_id: str, conversation_id: str, text: str) -> Reply:
    """A turn sent from this process through a cluster found by name (a Ray task runs it)."""
    from parlour.actors.cluster import AgentCluster

    chat = AgentCluster(**cluster).chat(user_id=user_id, conversation_id=conversation_id)
    return chat.send(text)
