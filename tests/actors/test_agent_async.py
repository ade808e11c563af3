"""The agent host on asyncio: the loop keeps running, cancellation, joiners and offers."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import httpx2
import pytest

from parlour.actors import (
    Agent,
    AgentEvent,
    ConversationService,
    OfferAccepted,
    Restarted,
    TextDelta,
    ToolCallFinished,
    TurnCancelledError,
    TurnDone,
)
from parlour.actors.agent._events import Event
from parlour.runtime import Depth, OutputSize, ScriptedClient
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    anthropic_sse,
    fake_spec,
    mock_anthropic_sdk,
)

from .agent_helpers import answerable, calls, stored, stored_results, user_texts


def agent_for(client: ScriptedClient, tools: list[Any]) -> Agent:
    return Agent(
        client, tools=tools, objective="Answer.", output=OutputSize.STANDARD, depth=Depth.IMMEDIATE
    )


async def shout(word: str) -> str:
    """Shout a word (an async tool)."""
    await asyncio.sleep(0)
    return word.upper()


def test_asend_and_astream_run_whole_turns_with_async_tools(service: ConversationService) -> None:
    script = [calls(("shout", {"word": "hey"}))]
    chat = agent_for(ScriptedClient(script), [shout]).chat(service, user_id="alice")

    async def main() -> tuple[str, list[AgentEvent]]:
        reply = await chat.asend("Shout hey")
        return reply.text, [e async for e in chat.astream("Again")]

    text, events = asyncio.run(main())
    assert "HEY" in text
    assert isinstance(events[-1], TurnDone) and any(isinstance(e, TextDelta) for e in events)
    assert user_texts(stored(service, chat.conversation_id, "alice")) == ["Shout hey", "Again"]


def test_the_event_loop_keeps_ticking_while_turns_wait_for_the_model(
    service: ConversationService,
) -> None:
    """Ten async turns on the real AsyncAnthropic client whose server answers only after
    the loop has ticked 20 times: a turn that blocked the loop would never be answered."""
    enough = asyncio.Event()

    async def server(request: httpx2.Request) -> httpx2.Response:
        await asyncio.wait_for(enough.wait(), 10)
        body = anthropic_sse(anthropic_message("ok"))
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})

    spec = fake_spec(id="claude-test", provider="anthropic")
    sync_sdk = mock_anthropic_sdk(MockProvider())  # the sync path is not used here
    client = AnthropicClient(spec, client=sync_sdk, async_client=async_sdk(server))
    agent = Agent(client, objective="Answer.", output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
    chats = [agent.chat(service, user_id=f"user-{i}") for i in range(10)]

    async def main() -> int:
        ticks = 0

        async def heartbeat() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1
                if ticks >= 20:
                    enough.set()

        beat = asyncio.ensure_future(heartbeat())
        replies = await asyncio.gather(*(c.asend("Hi") for c in chats))
        beat.cancel()
        assert [r.text for r in replies] == ["ok"] * 10
        return ticks

    assert asyncio.run(main()) >= 20


def async_sdk(handler: Any) -> Any:
    """A real AsyncAnthropic whose transport calls an async server function."""
    import anthropic

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return anthropic.AsyncAnthropic(api_key="test-key", max_retries=0, http_client=http)


def gated() -> tuple[asyncio.Event, asyncio.Event, Any]:
    started, opened = asyncio.Event(), asyncio.Event()

    async def gate() -> str:
        """Waits until the test opens it."""
        started.set()
        await opened.wait()
        return "opened"

    return started, opened, gate


def test_cancelling_asend_saves_an_error_result_for_the_pending_call_and_releases(
    service: ConversationService,
) -> None:
    async def main() -> str:
        started, _, gate = gated()
        chat = agent_for(ScriptedClient([calls(("gate", {}))]), [gate]).chat(
            service, user_id="alice"
        )
        task = asyncio.ensure_future(chat.asend("Open it"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return chat.conversation_id

    cid = asyncio.run(main())
    snapshot = stored(service, cid, "alice")
    assert answerable(snapshot) and stored_results(snapshot)[0].is_error
    assert service.owning_thinker(cid, "alice") is None


def test_force_release_interrupts_an_async_turn_waiting_on_a_tool(
    service: ConversationService,
) -> None:
    async def main() -> str:
        started, _, gate = gated()
        chat = agent_for(ScriptedClient([calls(("gate", {}))]), [gate]).chat(
            service, user_id="alice"
        )
        task = asyncio.ensure_future(chat.asend("Open it"))
        await started.wait()
        assert service.force_release(chat.conversation_id, "alice") is not None
        with pytest.raises(TurnCancelledError, match="force-released by alice"):
            await task
        return chat.conversation_id

    cid = asyncio.run(main())
    (result,) = stored_results(stored(service, cid, "alice"))
    assert result.is_error and "force-released by alice" in result.content
    assert service.owning_thinker(cid, "alice") is None


def test_closing_astream_early_cancels_the_turn_and_releases_it(
    service: ConversationService,
) -> None:
    async def main() -> str:
        started, _, gate = gated()
        chat = agent_for(ScriptedClient([calls(("gate", {}))]), [gate]).chat(
            service, user_id="alice"
        )
        events = chat.astream("Open it")
        await events.__anext__()
        await started.wait()
        await events.aclose()  # type: ignore[attr-defined]
        return chat.conversation_id

    cid = asyncio.run(main())
    assert answerable(stored(service, cid, "alice"))
    assert service.owning_thinker(cid, "alice") is None


def test_a_joiner_gets_the_text_so_far_then_live_events_and_another_user_gets_nothing(
    service: ConversationService,
) -> None:
    async def main() -> None:
        started, opened, gate = gated()
        chat = agent_for(ScriptedClient([calls(("gate", {}), text="Opening it.")]), [gate]).chat(
            service, user_id="alice"
        )
        task = asyncio.ensure_future(chat.asend("Open it"))
        await started.wait()
        cid = chat.conversation_id
        assert [e async for e in service.join(cid, "mallory")] == []
        assert not service.offer(cid, "mallory", "let me in")
        joined = service.join(cid, "alice")
        first = await joined.__anext__()
        opened.set()
        rest = [e async for e in joined]
        reply = await task
        assert first == TextDelta(text="Opening it.", seq=2, turn=first.turn)  # one delta: inline
        assert first.turn and {e.turn for e in rest} == {first.turn}  # one turn's id on each
        assert [e.content for e in rest if isinstance(e, ToolCallFinished)] == ["opened"]
        assert isinstance(rest[-1], TurnDone) and rest[-1].reply == reply
        assert [e async for e in service.join(cid, "alice")] == []  # idle: ends at once

    asyncio.run(main())


def test_concurrent_offers_are_all_answered_in_the_turn_and_a_closed_turn_refuses_one(
    service: ConversationService,
) -> None:
    started, opened = threading.Event(), threading.Event()

    def gate() -> str:
        """Waits until the test opens it."""
        started.set()
        assert opened.wait(10)
        return "opened"

    chat = agent_for(ScriptedClient([calls(("gate", {}))]), [gate]).chat(service, user_id="alice")
    cid = chat.conversation_id
    outcome: dict[str, Any] = {}
    turn = threading.Thread(target=lambda: outcome.setdefault("reply", chat.send("Open it")))
    turn.start()
    assert started.wait(10)
    go = threading.Barrier(8)
    accepted: list[list[bool]] = [[] for _ in range(8)]

    def offerer(n: int) -> None:
        go.wait()
        accepted[n] = [service.offer(cid, "alice", f"offer {n}-{k}") for k in range(10)]

    offerers = [threading.Thread(target=offerer, args=(n,)) for n in range(8)]
    for t in offerers:
        t.start()
    for t in offerers:
        t.join()
    opened.set()
    turn.join(10)
    assert all(all(a) for a in accepted)
    snapshot = stored(service, cid, "alice")
    texts = [t for t in user_texts(snapshot) if t.startswith("offer ")]
    assert sorted(texts) == sorted(f"offer {n}-{k}" for n in range(8) for k in range(10))
    for n in range(8):  # each thread's offers in the order it made them
        mine = [t for t in texts if t.startswith(f"offer {n}-")]
        assert mine == [f"offer {n}-{k}" for k in range(10)]
    assert snapshot.messages[-1].role == "assistant"  # answered within the turn
    assert not service.offer(cid, "alice", "too late")
    assert outcome["reply"].messages[-1].role == "assistant"


def test_an_offer_taken_by_an_async_turn_is_announced_and_answered(
    service: ConversationService,
) -> None:
    async def main() -> list[AgentEvent]:
        started, opened, gate = gated()
        chat = agent_for(ScriptedClient([calls(("gate", {}))]), [gate]).chat(
            service, user_id="alice"
        )
        events: list[AgentEvent] = []

        async def consume() -> None:
            async for event in chat.astream("Open it"):
                events.append(event)

        task = asyncio.ensure_future(consume())
        await started.wait()
        assert service.offer(chat.conversation_id, "alice", "and close it after")
        opened.set()
        await task
        return events

    events = asyncio.run(main())
    offered = [i for i, e in enumerate(events) if isinstance(e, OfferAccepted)]
    assert len(offered) == 1
    turn = events[0].turn
    assert events[offered[0]] == OfferAccepted(
        text="and close it after", seq=offered[0] + 1, turn=turn
    )
    assert turn and {e.turn for e in events} == {turn}  # the offer's answer is the same turn
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # the whole turn
    assert any(isinstance(e, TextDelta) for e in events[offered[0] :])
    assert isinstance(events[-1], TurnDone)


def test_a_model_call_past_its_timeout_is_retried_on_the_async_path(
    service: ConversationService,
) -> None:
    """The server never answers the first request: the call is abandoned at the model
    timeout, announced as a restart, and the retry's answer ends the turn."""
    made = itertools.count()

    async def server(request: httpx2.Request) -> httpx2.Response:
        if next(made) == 0:
            await asyncio.Event().wait()  # hangs until the client gives up
        body = anthropic_sse(anthropic_message("Second try."))
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})

    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    spec = fake_spec(id="claude-test", provider="anthropic")
    client = AnthropicClient(
        spec, client=mock_anthropic_sdk(MockProvider()), async_client=async_sdk(server)
    )
    agent = Agent(
        client,
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
        model_timeout_s=0.2,
        async_sleep=no_wait,
    )
    chat = agent.chat(service, user_id="alice")

    async def main() -> list[AgentEvent]:
        return [e async for e in chat.astream("Hi")]

    events = asyncio.run(main())
    restarts = [e for e in events if isinstance(e, Restarted)]
    assert len(restarts) == 1 and "did not answer within 0.2s" in restarts[0].reason
    assert waits == [0.5]
    assert isinstance(events[-1], TurnDone) and events[-1].reply.text == "Second try."


def test_a_joiner_on_a_loop_follows_a_turn_running_in_a_thread(
    service: ConversationService,
) -> None:
    started, opened = threading.Event(), threading.Event()

    def gate() -> str:
        """Waits until the test opens it."""
        started.set()
        assert opened.wait(10)
        return "opened"

    chat = agent_for(ScriptedClient([calls(("gate", {}), text="Opening.")]), [gate]).chat(
        service, user_id="alice"
    )
    outcome: dict[str, Any] = {}
    turn = threading.Thread(target=lambda: outcome.setdefault("reply", chat.send("Open")))
    turn.start()
    assert started.wait(10)

    async def follow() -> list[Event]:  # what join yields: the agent's events, by their base
        joined = service.join(chat.conversation_id, "alice")
        first = await joined.__anext__()
        opened.set()
        return [first] + [e async for e in joined]

    events = asyncio.run(follow())
    turn.join(10)
    assert events[0] == TextDelta(text="Opening.", seq=2, turn=events[0].turn)  # as the call
    assert events[0].turn and {e.turn for e in events} == {events[0].turn}
    assert isinstance(events[-1], TurnDone) and events[-1].reply == outcome["reply"]


def test_an_async_turn_on_bedrock_streams_its_deltas_from_the_worker_thread(
    service: ConversationService,
) -> None:
    """boto3 has no async client: the call runs on a worker thread and its deltas reach
    the loop in order, then the reply."""
    from parlour.runtime.providers import BedrockClient
    from parlour.runtime.testing import (
        ConverseStreamMock,
        converse_stream_events,
        dummy_bedrock_client,
    )

    boto = dummy_bedrock_client()
    ConverseStreamMock(boto, converse_stream_events("Delivery at nine tomorrow.", chunk=3))
    spec = fake_spec(id="anthropic.claude-test", provider="bedrock")
    agent = Agent(
        BedrockClient(spec, client=boto),
        objective="Answer.",
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )
    chat = agent.chat(service, user_id="alice")

    async def main() -> list[AgentEvent]:
        return [e async for e in chat.astream("When?")]

    events = asyncio.run(main())
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1 and "".join(deltas) == "Delivery at nine tomorrow."
    assert isinstance(events[-1], TurnDone)
    assert events[-1].reply.text == "Delivery at nine tomorrow."
