"""Text deltas of a turn driven by ``send`` (whose caller reads only the reply): joiners still
get each one live and in order, and a force release stops the model's stream at its next
delta with nothing published after it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

from parlour.actors import (
    Agent,
    AgentEvent,
    ConversationService,
    TextDelta,
    TurnCancelledError,
    TurnDone,
)
from parlour.runtime import Depth, LLMResponse, OutputSize, ScriptedClient
from parlour.runtime.blocks import TextBlock
from parlour.runtime.providers import WireRequest

from .agent_helpers import send_in_thread


class HeldStream(ScriptedClient):
    """Streams ``words`` one delta each, holding after the first until ``go`` is set;
    ``delivered`` lists the deltas the caller's callback accepted."""

    def __init__(self, words: list[str]) -> None:
        super().__init__()
        self.words = words
        self.held, self.go, self.finished = threading.Event(), threading.Event(), threading.Event()
        self.delivered: list[str] = []

    def respond(self, *args: Any, **kwargs: Any) -> LLMResponse:
        try:
            return super().respond(*args, **kwargs)
        finally:
            self.finished.set()

    def _stream(self, request: WireRequest) -> Iterator[str | LLMResponse]:
        yield self.words[0]
        self.delivered.append(self.words[0])
        self.held.set()
        assert self.go.wait(10)
        for word in self.words[1:]:
            yield word
            self.delivered.append(word)
        yield LLMResponse(model_id="scripted", blocks=[TextBlock(text="".join(self.words))])


def _agent(client: ScriptedClient) -> Agent:
    return Agent(client, output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)


async def _follow(service: ConversationService, cid: str) -> tuple[AsyncIterator[Any], Any]:
    """A joiner of the running turn, and its first event (the text so far): once it has
    come, the joiner follows the turn."""
    joined = service.join(cid, "alice")
    return joined, await anext(joined)


def test_a_joiner_of_a_sent_turn_gets_every_text_delta_live_and_in_order(
    service: ConversationService,
) -> None:
    client = HeldStream(["One", " two", " three", " four."])
    chat = _agent(client).chat(service, user_id="alice")
    outcome: dict[str, Any] = {}
    turn = threading.Thread(target=lambda: outcome.setdefault("reply", chat.send("Go")))
    turn.start()
    assert client.held.wait(10)

    async def follow() -> list[AgentEvent]:
        joined, first = await _follow(service, chat.conversation_id)
        client.go.set()
        return [first] + [e async for e in joined]

    events = asyncio.run(follow())
    turn.join(10)
    # the text so far, then each later delta as it came, then the end of the turn
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == ["One", " two", " three", " four."]
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]  # each numbered as the turn published it
    assert isinstance(events[-1], TurnDone) and events[-1].reply == outcome["reply"]
    assert outcome["reply"].text == "One two three four."


def test_force_release_stops_a_sent_turns_stream_at_its_next_delta(
    service: ConversationService,
) -> None:
    client = HeldStream(["First", " second", " third."])
    chat = _agent(client).chat(service, user_id="alice")
    turn, outcome = send_in_thread(chat, "Go")
    assert client.held.wait(10)

    async def follow() -> list[AgentEvent]:
        joined, first = await _follow(service, chat.conversation_id)
        assert service.force_release(chat.conversation_id, "alice") is not None
        client.go.set()  # the model streams on, in the turn's own thread: its next delta is refused
        turn.join(10)
        assert client.finished.wait(10)
        return [first] + [e async for e in joined]

    events = asyncio.run(follow())
    assert not turn.is_alive() and isinstance(outcome[0], TurnCancelledError)
    assert client.delivered == ["First"]  # the delta after the release was refused
    # nothing published after the release
    assert events == [TextDelta(text="First", seq=1, turn=events[0].turn)]
    assert service.owning_thinker(chat.conversation_id, "alice") is None


class SlowAfterFirst(ScriptedClient):
    """Its first call streams one delta, then its next only once ``pause`` seconds have
    passed; later calls answer at once."""

    def __init__(self, pause: float) -> None:
        super().__init__()
        self.pause, self.calls = pause, 0
        self.late: list[str] = []

    def _stream(self, request: WireRequest) -> Iterator[str | LLMResponse]:
        self.calls += 1
        if self.calls == 1:
            yield "Slow"
            threading.Event().wait(self.pause)  # the model dawdles past the timeout
            yield " and late."
            self.late.append(" and late.")
        yield LLMResponse(model_id="scripted", blocks=[TextBlock(text="On time.")])


def test_a_sent_turns_model_call_past_the_timeout_ends_at_its_next_delta_and_is_retried(
    service: ConversationService,
) -> None:
    client, waits = SlowAfterFirst(0.4), list[float]()
    agent = Agent(
        client,
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
        model_timeout_s=0.2,
        sleep=waits.append,
    )
    reply = agent.chat(service, user_id="alice").send("Go")
    assert client.late == []  # the delta after the deadline was refused
    assert client.calls == 2 and waits == [0.5]
    assert reply.text == "On time."
