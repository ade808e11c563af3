"""A running turn's events are numbered (``seq`` 1, 2, 3... in publishing order), and a
follower that has seen them up to some number resumes after it: ``service.join(..., after=n)``
gives every later event exactly once, in order, those already published first; a number the
turn never reached gives the live events; once the turn is over (or the process restarted)
the join ends at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.actors import (
    Agent,
    AgentEvent,
    ConversationService,
    Restarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnDone,
)
from parlour.actors.agent._joiners import TurnState
from parlour.runtime import Depth, LLMResponse, OutputSize, ScriptedClient
from parlour.runtime.blocks import TextBlock
from parlour.runtime.providers import WireRequest
from parlour.stores import LmdbStore, MemorySessionCache

from .agent_helpers import calls, send_in_thread

T = TypeVar("T")
ASK = "Look it up and measure it"


def lookup() -> str:
    """Look the thing up."""
    return "forty-two"


def measure() -> str:
    """Measure the thing."""
    return "twice"


def _agent() -> Agent:
    """A turn of two model calls, each streamed a word per delta: the first calls both tools,
    the second answers."""
    script: list[Any] = [
        calls(("lookup", {}), ("measure", {}), text="Let me look that up first."),
        "It is forty-two, measured twice.",
    ]
    return Agent(
        ScriptedClient(script),
        tools=[lookup, measure],
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )


class _Loop:
    """An event loop on a thread of its own, where the followers run while the test's thread
    drives the turn."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def _next(events: AsyncIterator[Any]) -> Any:
    return await anext(events)


async def _rest(events: AsyncIterator[Any]) -> list[Any]:
    return [e async for e in events]


async def _close(events: AsyncIterator[Any]) -> None:
    await events.aclose()  # type: ignore[attr-defined]


def test_every_event_of_a_turn_is_numbered_in_the_order_it_was_published(
    service: ConversationService,
) -> None:
    streamed = list(_agent().chat(service, user_id="alice").stream(ASK))

    async def astreamed() -> list[AgentEvent]:
        return [e async for e in _agent().chat(service, user_id="alice").astream(ASK)]

    for events in (streamed, asyncio.run(astreamed())):
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert isinstance(events[-1], TurnDone)
        assert sum(isinstance(e, TextDelta) for e in events) > 6  # a word per delta
        assert sum(isinstance(e, ToolCallStarted | ToolCallFinished) for e in events) == 4


ACTIONS = st.lists(st.sampled_from(["step", "read", "cut"]), max_size=80)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(actions=ACTIONS)
def test_a_follower_that_disconnects_anywhere_and_resumes_after_its_last_seq_gets_each_event_once(
    service: ConversationService, actions: list[str]
) -> None:
    """The turn's own caller steps it one event at a time (``stream`` runs the turn only as
    its events are taken), so it waits between any two events for as long as the follower
    needs. The follower reads what has been published, disconnects at any point and joins
    again after the last event it saw. It never disconnects after the last event before
    the turn's done, which is published after the release: a follower must be following
    by then."""
    n = len(list(_agent().chat(service, user_id="ref").stream(ASK)))  # the turn's events
    chat = _agent().chat(service, user_id="alice")
    stream = chat.stream(ASK)
    published: list[AgentEvent] = []  # what the turn's caller was given
    got: list[Any] = []  # what the follower was given, over all its joins
    joined: AsyncIterator[Any] | None = None
    loop = _Loop()

    def read() -> None:
        nonlocal joined
        if joined is None:  # (re)join after the last event seen; 0: the whole turn
            joined = service.join(chat.conversation_id, "alice", after=got[-1].seq if got else 0)
        got.append(loop.run(_next(joined)))

    try:
        for action in actions:
            if action == "step" and len(published) < n - 1:
                published.append(next(stream))
            elif action == "read" and len(got) < len(published):
                read()
            elif action == "cut" and joined is not None and len(got) < n - 1:
                loop.run(_close(joined))
                joined = None
        while len(published) < n - 1:
            published.append(next(stream))
        while len(got) < n - 1:
            read()  # following again, if it was away, before the turn's last step
        published.append(next(stream))
        read()
        assert joined is not None and loop.run(_rest(joined)) == []  # it ended with the done
        assert next(stream, None) is None
    finally:
        stream.close()
        loop.close()
    assert got == published  # each event once, in order
    assert [e.seq for e in got] == list(range(1, n + 1)) and isinstance(got[-1], TurnDone)


class _Held(ScriptedClient):
    """Streams ``words`` a delta each (on a model worker: ``send`` hands each straight to the
    turn's log), holding after the first ``held_after`` until ``go`` is set."""

    def __init__(self, words: list[str], held_after: int) -> None:
        super().__init__()
        self.words, self.held_after = words, held_after
        self.held, self.go = threading.Event(), threading.Event()

    def _stream(self, request: WireRequest) -> Iterator[str | LLMResponse]:
        for n, word in enumerate(self.words):
            if n == self.held_after:
                self.held.set()
                assert self.go.wait(10)
            yield word
        yield LLMResponse(model_id="scripted", blocks=[TextBlock(text="".join(self.words))])


def test_a_follower_of_a_sent_turn_resumes_after_the_deltas_it_saw(
    service: ConversationService,
) -> None:
    client = _Held(["One", " two", " three", " four", " five."], held_after=3)
    chat = Agent(client, output=OutputSize.STANDARD, depth=Depth.IMMEDIATE).chat(
        service, user_id="alice"
    )
    turn, raised = send_in_thread(chat, "Count")
    assert client.held.wait(10)
    cid = chat.conversation_id

    async def follow() -> tuple[list[Any], list[Any]]:
        first = service.join(cid, "alice", after=0)
        seen = [await anext(first), await anext(first)]
        await first.aclose()  # type: ignore[attr-defined]
        again = service.join(cid, "alice", after=seen[-1].seq)
        resumed = [await anext(again)]  # published while it was away: it follows again
        client.go.set()
        return seen, resumed + [e async for e in again]

    seen, resumed = asyncio.run(follow())
    turn.join(10)
    assert not raised
    events = seen + resumed
    assert [e.seq for e in events] == [1, 2, 3, 4, 5, 6]
    assert "".join(e.text for e in events[:-1]) == "One two three four five."
    assert isinstance(events[-1], TurnDone) and events[-1].reply.text == "One two three four five."


def test_a_follower_after_a_seq_the_turn_never_reached_gets_the_live_events() -> None:
    async def main() -> None:
        state = TurnState()
        for word in ("one", " two", " three"):
            state.publish_text(word)
        joined = state.follow(after=99)
        assert joined is not None
        follower, at, head = joined
        assert (at, head) == (3, None)
        state.publish_text(" four")
        state.end()
        assert state.read(follower, at) == ([TextDelta(text=" four", seq=4)], True)

    asyncio.run(main())


def test_the_text_so_far_leaves_out_a_restarted_attempt_and_is_numbered_as_the_latest_event() -> (
    None
):
    async def main() -> None:
        state = TurnState()
        state.publish_text("Kept")
        state.commit_text()  # the first call finished
        state.publish_delta(" lost")
        state.publish(Restarted(reason="truncated"))  # the second call is tried again
        state.publish_delta(" found")
        joined = state.follow()
        assert joined is not None
        _, at, head = joined
        assert head == TextDelta(text="Kept found", seq=4) and at == 4
        replayed = state.follow(after=0)
        assert replayed is not None
        events, ended = state.read(replayed[0], replayed[1])
        assert [e.seq for e in events] == [1, 2, 3, 4] and not ended
        assert events[0] == TextDelta(text="Kept", seq=1)  # built for the reader

    asyncio.run(main())


def test_a_follower_after_a_restart_finds_no_running_turn_and_ends_at_once(
    tmp_path: Path,
) -> None:
    store = LmdbStore(tmp_path / "db")
    try:
        with ConversationService(store, MemorySessionCache(), shutdown_grace_s=0.1) as before:
            chat = _agent().chat(before, user_id="alice")
            stream = chat.stream(ASK)
            published = [next(stream) for _ in range(3)]  # the turn is running
            stream.close()  # cancelled: saved at its boundary and released
        with ConversationService(store, MemorySessionCache(), shutdown_grace_s=0.1) as after:

            async def joined(since: int | None) -> list[Any]:
                return [e async for e in after.join(chat.conversation_id, "alice", after=since)]

            assert asyncio.run(joined(published[-1].seq)) == []
            assert asyncio.run(joined(0)) == []
            assert asyncio.run(joined(None)) == []
    finally:
        store.close()
