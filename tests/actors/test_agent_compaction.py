"""The agent's turns compact a conversation that outgrows its window, keep a usage ledger
saved with the conversation, and bound every model call by a timeout on the sync path."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from parlour.actors import (
    Agent,
    Compacted,
    CompactionRecord,
    ConversationService,
    ModelCallRecord,
    Restarted,
    TurnCancelledError,
    TurnDone,
)
from parlour.runtime import (
    ConversationContext,
    Depth,
    LLMResponse,
    OutputSize,
    PreparedConversation,
    ScriptedClient,
    Transcript,
    TurnRole,
    Usage,
    tool_from_function,
)
from parlour.runtime.blocks import TextBlock, ToolResultBlock
from parlour.runtime.compaction import ContextWindowManager, summary_model
from parlour.runtime.errors import ContextOverflowError
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    anthropic_sse,
    fake_spec,
    mock_anthropic_sdk,
)
from parlour.stores import LmdbStore, MemorySessionCache

from .agent_helpers import answerable, calls, send_in_thread, stored, user_texts

SMALL = fake_spec(max_context_tokens=6_000)  # a small window, to watch compaction work
REPORT = "The survey site reported readings above the threshold at every station. " * 30


def survey(site: str = "north") -> str:
    """A long survey report of one site.

    Args:
        site: The site's name.
    """
    return f"Site {site}: {REPORT}"


def model(prepared: PreparedConversation) -> LLMResponse:
    """Calls the survey tool for each user question, then answers briefly."""
    last = prepared.turns[-1]
    if any(isinstance(b, ToolResultBlock) for b in last.blocks) or last.role is not TurnRole.USER:
        return LLMResponse(
            model_id="scripted",
            blocks=[TextBlock(text="Every station was above the threshold.")],
            usage=Usage(input_tokens=100, output_tokens=8),
        )
    turn = sum(1 for t in prepared.turns if t.role is TurnRole.ASSISTANT)
    return calls(("survey", {"site": f"site-{turn}"}), round_=turn + 2)


def long_agent(survey_tool: Any = survey, **kwargs: Any) -> Agent:
    client = ScriptedClient(itertools.repeat(model, 400), spec=SMALL)
    return Agent(
        client,
        tools=[survey_tool],
        objective="Answer questions about the survey.",
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
        comfort_tokens=4_000,
        **kwargs,
    )


def restarted(path: Path) -> ConversationService:
    return ConversationService(LmdbStore(path), MemorySessionCache(), cleanup_interval_s=0)


def test_a_long_conversation_compacts_before_model_calls_and_continues(
    service: ConversationService,
) -> None:
    chat = long_agent().chat(service, user_id="alice")
    events = [e for turn in range(12) for e in chat.stream(f"Question {turn}: which sites?")]
    compactions = [e for e in events if isinstance(e, Compacted)]
    assert compactions, "twelve long tool results in a 4,000-token window never compacted"
    assert all(c.tokens_after < c.tokens_before for c in compactions)
    snapshot = stored(service, chat.conversation_id, "alice")
    # every question is kept word for word, every call still has its result
    assert user_texts(snapshot) == [f"Question {t}: which sites?" for t in range(12)]
    assert answerable(snapshot)
    restored = snapshot.to_conversation()
    manager = ContextWindowManager(SMALL, comfort_override=4_000)
    assert manager.measure(restored) <= manager.trigger_tokens() + 2_000  # the last round
    ledger = chat.usage()
    rungs = [e for e in ledger if isinstance(e, CompactionRecord)]
    assert len(rungs) >= len(compactions)
    assert {r.level for r in rungs} <= {"light", "moderate", "aggressive", "maximum"}


def test_a_compaction_inside_a_turn_moves_its_open_record_to_the_turns_own_first_message(
    service: ConversationService,
) -> None:
    """A compaction before a model call may collapse messages before the turn: the stored
    record's start still names the turn's user message afterwards."""
    chat = long_agent().chat(service, user_id="alice")
    shrank = False
    for turn in range(16):
        before = len(stored(service, chat.conversation_id, "alice").messages) if turn else 0
        chat.send(f"Question {turn}: which sites?")
        snapshot = stored(service, chat.conversation_id, "alice")
        assert snapshot.turn is not None and snapshot.turn.start < len(snapshot.messages)
        first = snapshot.messages[snapshot.turn.start].blocks[0]
        assert isinstance(first, TextBlock) and first.text == f"Question {turn}: which sites?"
        shrank = shrank or len(snapshot.messages) < before + 4  # a turn adds four
    assert shrank, "no compaction inside a turn collapsed messages before it"


@pytest.mark.parametrize("path", ["threads", "asyncio"])
def test_a_turn_that_compacts_and_then_parks_for_approval_runs_the_approved_call(
    service: ConversationService, path: str
) -> None:
    """Each turn surveys (a long result), then asks to confirm (a call needing approval):
    the compaction before that second call collapses messages before the turn, and the
    decision still finds the call it waits on; every call runs once, each has its result."""
    confirmed: list[str] = []
    rounds = itertools.count(2)

    def confirm(site: str) -> str:
        """Confirm a site's readings.

        Args:
            site: The site's name.
        """
        confirmed.append(site)
        return f"{site} confirmed"

    def surveys_then_confirms(prepared: PreparedConversation) -> LLMResponse:
        last = prepared.turns[-1]
        results = [b for b in last.blocks if isinstance(b, ToolResultBlock)]
        if not results:
            return calls(("survey", {"site": "north"}), round_=next(rounds))
        if results[0].tool_use_id.endswith("_survey"):
            return calls(("confirm", {"site": "north"}), round_=next(rounds))
        return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Confirmed.")])

    agent = Agent(
        ScriptedClient(itertools.repeat(surveys_then_confirms, 400), spec=SMALL),
        tools=[survey, tool_from_function(confirm, needs_approval=True)],
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
        comfort_tokens=4_000,
    )
    chat = agent.chat(service, user_id="alice")
    collapsed = False
    for turn in range(16):
        before = len(stored(service, chat.conversation_id, "alice").messages) if turn else 0
        if path == "threads":
            parked = chat.send(f"Question {turn}")
        else:
            parked = asyncio.run(chat.asend(f"Question {turn}"))
        after = len(stored(service, chat.conversation_id, "alice").messages)
        collapsed = collapsed or after < before + 4  # question, survey and its result, confirm
        [pending] = parked.pending
        if path == "threads":
            reply = chat.approve(pending.call_id)
        else:
            reply = asyncio.run(chat.aapprove(pending.call_id))
        assert reply.text == "Confirmed." and not reply.pending
    assert collapsed, "no parking turn compacted messages before it"
    assert confirmed == ["north"] * 16  # each turn's approved call, once
    assert answerable(stored(service, chat.conversation_id, "alice"))


def test_the_transcript_shows_the_summary_of_a_compacted_tool_result(
    service: ConversationService,
) -> None:
    chat = long_agent().chat(service, user_id="alice")
    for turn in range(12):
        chat.send(f"Question {turn}")
    restored = stored(service, chat.conversation_id, "alice").to_conversation()
    results = [b for m in restored.messages for b in m.blocks if isinstance(b, ToolResultBlock)]
    summarized = [r for r in results if REPORT not in r.content]
    assert summarized, "no stored tool result was replaced by its summary"
    assert summarized[0].content in Transcript.render(restored)


def test_an_async_turn_compacts_through_afit(service: ConversationService) -> None:
    chat = long_agent().chat(service, user_id="alice")

    async def main() -> list[Any]:
        return [e for t in range(12) async for e in chat.astream(f"Question {t}")]

    events = asyncio.run(main())
    assert any(isinstance(e, Compacted) for e in events)
    assert answerable(stored(service, chat.conversation_id, "alice"))


def test_an_overflow_fails_the_turn_with_context_overflow_after_the_boundary_save(
    service: ConversationService,
) -> None:
    agent = long_agent()
    chat = agent.chat(service, user_id="alice")
    huge = "Please read all of this. " * 2_000  # a user message: never compactable
    with pytest.raises(ContextOverflowError) as failure:
        chat.send(huge)
    overflow = failure.value
    assert overflow.limit == SMALL.max_context_tokens
    assert overflow.tokens is not None and overflow.reserve is not None
    assert overflow.tokens > overflow.limit - overflow.reserve
    assert user_texts(stored(service, chat.conversation_id, "alice")) == [huge]
    assert service.owning_thinker(chat.conversation_id, "alice") is None  # released


def test_the_usage_ledger_survives_a_restart_and_is_never_sent(tmp_path: Path) -> None:
    requests: list[Any] = []
    client = ScriptedClient(requests=requests)

    def make() -> Agent:
        return Agent(client, output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)

    first = restarted(tmp_path / "db")
    try:
        chat = make().chat(first, user_id="alice")
        chat.send("Hello")
        chat.send("Again")
        before = chat.usage()
    finally:
        first.stop()
        first.store.close()  # type: ignore[union-attr]
    assert len(before) == 2 and all(isinstance(e, ModelCallRecord) for e in before)
    second = restarted(tmp_path / "db")
    try:
        agent = make()  # a fresh process's agent: nothing in memory
        resumed = agent.chat(second, user_id="alice", conversation_id=chat.conversation_id)
        assert resumed.usage() == before  # read from the store
        resumed.send("Third")
        after = resumed.usage()
        assert after[:2] == before and len(after) == 3
        snapshot = stored(second, chat.conversation_id, "alice")
    finally:
        second.stop()
        second.store.close()  # type: ignore[union-attr]
    restored = snapshot.to_conversation()
    bare = snapshot.to_conversation()
    bare.usage_ledger = []
    assert restored.get_total_tokens(SMALL) == bare.get_total_tokens(SMALL)
    sent = repr([r.prepared for r in requests])
    assert "model_call" not in sent and "latency" not in sent


def test_a_hung_model_call_on_the_sync_path_times_out_and_is_retried(
    service: ConversationService,
) -> None:
    hung = threading.Event()
    made = itertools.count()

    def sometimes_hangs(prepared: object) -> LLMResponse:
        if next(made) == 0:
            hung.wait(10)  # the first call hangs until the test ends
        return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Second try.")])

    waits: list[float] = []
    agent = Agent(
        ScriptedClient([sometimes_hangs, sometimes_hangs]),
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
        model_timeout_s=0.2,
        sleep=waits.append,
    )
    try:
        events = list(agent.chat(service, user_id="alice").stream("Hi"))
    finally:
        hung.set()
    restarts = [e for e in events if isinstance(e, Restarted)]
    assert len(restarts) == 1 and "did not answer within 0.2s" in restarts[0].reason
    assert waits == [0.5]
    assert isinstance(events[-1], TurnDone) and events[-1].reply.text == "Second try."


def test_force_release_ends_a_streamed_turns_hung_model_call_at_once(
    service: ConversationService,
) -> None:
    # ``stream`` makes its model call on a model worker: the turn's thread wakes at once
    started, hung = threading.Event(), threading.Event()

    def hangs(prepared: object) -> LLMResponse:
        started.set()
        hung.wait(30)
        return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Too late.")])

    chat = Agent(ScriptedClient([hangs]), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE).chat(
        service, user_id="alice"
    )
    outcome: list[BaseException] = []

    def stream() -> None:
        try:
            list(chat.stream("Hi"))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=stream)
    worker.start()
    try:
        assert started.wait(10)
        assert service.force_release(chat.conversation_id, "alice") is not None
        worker.join(10)
        assert not worker.is_alive(), "the turn kept waiting for the hung model call"
    finally:
        hung.set()
        worker.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], TurnCancelledError)
    assert service.owning_thinker(chat.conversation_id, "alice") is None


def test_a_sent_turn_released_during_a_silent_model_call_drops_the_answer_when_it_comes(
    service: ConversationService,
) -> None:
    # ``send`` makes its model call in its own thread: a call that streams nothing is
    # noticed as released when it answers, and its answer is never added
    started, answer = threading.Event(), threading.Event()

    def silent(prepared: object) -> LLMResponse:
        started.set()
        assert answer.wait(10)
        return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Too late.")])

    chat = Agent(ScriptedClient([silent]), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE).chat(
        service, user_id="alice"
    )
    worker, outcome = send_in_thread(chat, "Hi")
    assert started.wait(10)
    assert service.force_release(chat.conversation_id, "alice") is not None
    answer.set()
    worker.join(10)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], TurnCancelledError)
    assert service.owning_thinker(chat.conversation_id, "alice") is None
    kept = stored(service, chat.conversation_id, "alice").messages
    assert [m.role for m in kept] == ["user"]  # the answer that came after the release: dropped


def test_bad_compaction_overrides_are_refused_when_the_agent_is_built() -> None:
    with pytest.raises(ValueError, match="comfort window"):
        Agent(ScriptedClient(), comfort_tokens=0)
    with pytest.raises(ValueError, match="trigger"):
        Agent(ScriptedClient(), compaction_trigger=1.5)


def test_compaction_off_leaves_the_conversation_as_it_grew(
    service: ConversationService,
) -> None:
    chat = long_agent(compaction=False).chat(service, user_id="alice")
    events = [e for turn in range(3) for e in chat.stream(f"Question {turn}")]
    assert not any(isinstance(e, Compacted) for e in events)
    context: ConversationContext = stored(service, chat.conversation_id, "alice").to_conversation()
    results = [b for m in context.messages for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert all(REPORT in r.content for r in results)


def test_an_async_turn_on_anthropic_has_the_small_model_write_the_summaries(
    service: ConversationService,
) -> None:
    """On the real AsyncAnthropic client (mock transport), the summaries of a compaction
    are calls to the provider's smallest model, recorded in the ledger with their usage."""
    spec = fake_spec(id="claude-test", provider="anthropic", max_context_tokens=6_000)
    small = summary_model(spec)
    models: list[str] = []

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        models.append(body["model"])
        if body["model"] == small.id:
            return anthropic_message("Readings were above the threshold.", model=small.id)
        last = body["messages"][-1]["content"]
        if any(b.get("type") == "tool_result" for b in last):
            return anthropic_message("Every station was above it.", model=spec.id)
        call = {"type": "tool_use", "id": f"toolu_{len(models)}", "name": "survey", "input": {}}
        return anthropic_message(None, content=[call], stop_reason="tool_use", model=spec.id)

    async def server(request: httpx2.Request) -> httpx2.Response:
        body = anthropic_sse(answer(json.loads(request.content)))
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(server))
    async_sdk = anthropic.AsyncAnthropic(api_key="test-key", max_retries=0, http_client=http)
    client = AnthropicClient(
        spec, client=mock_anthropic_sdk(MockProvider()), async_client=async_sdk
    )
    agent = Agent(
        client,
        tools=[survey],
        objective="Answer questions about the survey.",
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
        comfort_tokens=4_000,
    )
    chat = agent.chat(service, user_id="alice")

    async def main() -> list[Any]:
        return [e for t in range(10) async for e in chat.astream(f"Question {t}")]

    events = asyncio.run(main())
    assert any(isinstance(e, Compacted) for e in events)
    assert small.id in models and small.id != spec.id
    summaries = [
        e for e in chat.usage() if isinstance(e, ModelCallRecord) and e.purpose == "summary"
    ]
    assert summaries and all(s.model == small.id and s.output_tokens == 5 for s in summaries)
    assert answerable(stored(service, chat.conversation_id, "alice"))
