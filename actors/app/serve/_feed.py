"""One turn's events in their wire form, kept for the request that started the turn and
for every joiner; and the conversion of an agent's events to that form.

Everything here runs on the server's one event loop (no locks): pushes and follows are
plain list appends and reads, and waiters are woken with futures.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from ...agent._events import AgentEvent, TurnDone

__all__ = ["TurnFeed", "wire_event"]

WireEvent = dict[str, Any]


def wire_event(event: AgentEvent) -> WireEvent:
    """An agent event as the JSON object an SSE ``data`` line carries (``type`` first).

    The final ``done`` event carries the reply's text and usage, not its message objects.
    Every event carries its ``seq``, the SSE id the host sends it with.
    """
    if isinstance(event, TurnDone):
        reply = event.reply
        return {
            "type": "done",
            "seq": event.seq,
            "text": reply.text,
            "usage": msgspec.to_builtins(reply.usage),
            "rounds_exhausted": reply.rounds_exhausted,
        }
    built: WireEvent = msgspec.to_builtins(event)
    return built


class TurnFeed:
    """The events of one turn, in order, from its start; ``finish`` ends every follower.

    Thread-safety: none; use it from the server's event loop only.
    """

    def __init__(self, conversation_id: str, text: str) -> None:
        self.conversation_id = conversation_id
        self.text = text
        self.events: list[WireEvent] = []
        self.started = False
        self.done = False
        self._waiters: list[asyncio.Future[None]] = []

    def push(self, event: WireEvent) -> None:
        self.events.append(event)
        self._wake()

    def index_after(self, seq: int) -> int:
        """Where a follower that has seen this turn's events up to the one numbered ``seq``
        (its SSE id) resumes: just past that event; at the turn's start for 0; at the end,
        the live events, for a number the turn has not reached."""
        if seq <= 0:
            return 0
        for at, event in enumerate(self.events):
            if event.get("seq") == seq:
                return at + 1
        return len(self.events)

    def finish(self) -> None:
        self.done = True
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def follow(self, start: int = 0) -> AsyncIterator[list[WireEvent]]:
        """The events from index ``start`` on, live, until the turn has finished, in
        batches: whatever has arrived since the follower last looked (at least one event).
        A slow reader gets bigger batches, so a busy server makes fewer socket writes."""
        at = start
        while True:
            if at < len(self.events):
                batch = self.events[at:]
                at += len(batch)
                yield batch
                continue
            if self.done:
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
