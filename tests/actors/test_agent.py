"""The agent host from threads: whole turns, tools, retries, cancellation, the save discipline."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest

from parlour.actors import (
    Agent,
    ConversationService,
    ModelCallRecord,
    Restarted,
    RetryPolicy,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCancelledError,
    TurnDone,
    TurnError,
)
from parlour.runtime import Depth, LLMResponse, OutputSize, ScriptedClient, StopReason, Usage
from parlour.runtime.blocks import ImageBlock, TextBlock
from parlour.runtime.errors import (
    IllegalStateError,
    RetryableLLMError,
    UncorrectableLLMError,
)
from parlour.stores import LmdbStore, MemorySessionCache

from .agent_helpers import answerable, calls, stored, stored_results, user_texts


def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city's name.
    """
    return f"Sunny in {city}"


def broken(city: str) -> str:
    """A tool that always fails."""
    raise RuntimeError(f"the weather service is down for {city}")


def agent_for(client: ScriptedClient, **kwargs: object) -> Agent:
    kwargs.setdefault("tools", [weather, broken])
    return Agent(
        client,
        objective="Answer briefly.",
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_turn_runs_the_tool_with_its_arguments_and_answers_the_result(
    service: ConversationService,
) -> None:
    chat = agent_for(ScriptedClient([calls(("weather", {"city": "Paris"}))])).chat(
        service, user_id="alice"
    )
    reply = chat.send("Weather in Paris?")
    assert "Sunny in Paris" in reply.text
    snapshot = stored(service, chat.conversation_id, "alice")
    assert [r.content for r in stored_results(snapshot)] == ["Sunny in Paris"]
    assert snapshot.objective[0].block == TextBlock(text="Answer briefly.")
    assert [d.name for d in snapshot.declared_tools] == ["weather", "broken"]
    assert len(reply.messages) == 4 and reply.messages[0].raw_content == "Weather in Paris?"
    assert reply.usage.input_tokens > 0 and chat.durable


def test_an_agent_with_a_new_tool_declares_it_on_a_conversation_resumed_without_it(
    service: ConversationService,
) -> None:
    """A turn declares only what the conversation lacks: the tools it has are not declared
    again, a tool the agent gained since is, and the model is offered it."""
    first = agent_for(ScriptedClient(["Hello."]), tools=[weather]).chat(service, user_id="alice")
    first.send("Hi")
    client = ScriptedClient([calls(("broken", {"city": "Oslo"}))])
    later = agent_for(client, tools=[weather, broken])
    resumed = later.chat(service, user_id="alice", conversation_id=first.conversation_id)
    reply = resumed.send("And Oslo?")
    assert "the weather service is down for Oslo" in " ".join(
        r.content for r in stored_results(stored(service, first.conversation_id, "alice"))
    )
    assert reply.text
    snapshot = stored(service, first.conversation_id, "alice")
    assert [d.name for d in snapshot.declared_tools] == ["weather", "broken"]


def test_a_raising_tool_becomes_an_error_result_and_the_turn_goes_on(
    service: ConversationService,
) -> None:
    chat = agent_for(ScriptedClient([calls(("broken", {"city": "Oslo"}))])).chat(
        service, user_id="alice"
    )
    reply = chat.send("Weather in Oslo?")
    (result,) = stored_results(stored(service, chat.conversation_id, "alice"))
    assert result.is_error
    assert "RuntimeError: the weather service is down for Oslo" in result.content
    assert "down for Oslo" in reply.text  # the model saw the message and answered


def test_an_unknown_tool_and_bad_arguments_become_error_results(
    service: ConversationService,
) -> None:
    script = [calls(("teleport", {}), ("weather", {"town": "Rome"}))]
    chat = agent_for(ScriptedClient(script)).chat(service, user_id="alice")
    events = list(chat.stream("Go"))
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert [(e.name, e.is_error) for e in finished] == [("teleport", True), ("weather", True)]
    assert "There is no tool named teleport (the tools are: broken, weather)" in finished[0].content
    assert "do not fit its parameters" in finished[1].content
    assert isinstance(events[-1], TurnDone)


def test_parallel_tool_calls_run_concurrently(service: ConversationService) -> None:
    both_running = threading.Barrier(2, timeout=10)

    def meet(name: str) -> str:
        """Wait until the other call runs too."""
        both_running.wait()  # breaks (an error result) unless both run at once
        return f"met {name}"

    script = [calls(("meet", {"name": "a"}), ("meet", {"name": "b"}))]
    chat = agent_for(ScriptedClient(script), tools=[meet]).chat(service, user_id="alice")
    chat.send("Meet")
    results = stored_results(stored(service, chat.conversation_id, "alice"))
    assert [(r.content, r.is_error) for r in results] == [("met a", False), ("met b", False)]


def test_a_tool_past_its_timeout_gets_an_error_result_and_the_turn_goes_on(
    service: ConversationService,
) -> None:
    never = threading.Event()

    def hang() -> str:
        """Never returns on its own."""
        never.wait(30)
        return "late"

    agent = agent_for(ScriptedClient([calls(("hang", {}))]), tools=[hang], tool_timeout_s=0.2)
    chat = agent.chat(service, user_id="alice")
    try:
        reply = chat.send("Hang")
    finally:
        never.set()
    (result,) = stored_results(stored(service, chat.conversation_id, "alice"))
    assert result.is_error and "did not finish within its timeout of 0.2s" in result.content
    assert "timeout" in reply.text and service.owning_thinker(chat.conversation_id, "alice") is None


def test_a_truncated_answer_is_retried_once_at_the_ceiling_and_announced(
    service: ConversationService,
) -> None:
    truncated = LLMResponse(
        model_id="scripted",
        blocks=[TextBlock(text="Half an ans")],
        stop_reason=StopReason.MAX_TOKENS,
        usage=Usage(input_tokens=10, output_tokens=16_000),
    )
    client = ScriptedClient([truncated, "The whole answer."])
    chat = agent_for(client).chat(service, user_id="alice")
    events = list(chat.stream("Tell me everything"))
    kinds = [type(e) for e in events]
    restart = kinds.index(Restarted)
    assert TextDelta in kinds[:restart] and "truncated" in events[restart].reason  # type: ignore[union-attr]
    done = events[-1]
    assert isinstance(done, TurnDone) and done.reply.text == "The whole answer."
    snapshot = stored(service, chat.conversation_id, "alice")
    assert snapshot.messages[0].requested_output_tokens == client.spec.max_output_tokens
    assert [m.role for m in snapshot.messages] == ["user", "assistant"]


def test_retryable_errors_are_retried_with_backoff_within_the_turn_budget(
    service: ConversationService,
) -> None:
    failures = iter([True, True])

    def flaky(prepared: object) -> LLMResponse:
        if next(failures, False):
            raise RetryableLLMError("Anthropic answered 529 for model scripted: overloaded")
        return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Here.")])

    waits: list[float] = []
    client = ScriptedClient([flaky, flaky, flaky])
    chat = agent_for(client, sleep=waits.append).chat(service, user_id="alice")
    events = list(chat.stream("Hi"))
    assert waits == [0.5, 1.0]
    assert sum(isinstance(e, Restarted) for e in events) == 2
    assert isinstance(events[-1], TurnDone) and events[-1].reply.text == "Here."


def test_a_turn_past_its_retry_budget_fails_after_saving_its_boundary(
    service: ConversationService,
) -> None:
    def overloaded(prepared: object) -> LLMResponse:
        raise RetryableLLMError("overloaded")

    waits: list[float] = []
    agent = agent_for(
        ScriptedClient([overloaded] * 3),
        sleep=waits.append,
        retry=RetryPolicy(attempts=5, base_s=1.0, budget_s=2.5),
    )
    chat = agent.chat(service, user_id="alice")
    with pytest.raises(RetryableLLMError, match="overloaded"):
        chat.send("Hi")
    assert waits == [1.0]  # the next wait (2 s) would pass the 2.5 s budget
    assert user_texts(stored(service, chat.conversation_id, "alice")) == ["Hi"]
    assert service.owning_thinker(chat.conversation_id, "alice") is None


def test_a_seat_that_declares_nothing_is_refused_after_the_user_message_is_saved(
    service: ConversationService,
) -> None:
    client = ScriptedClient(depth=None, output_declaration=None)
    chat = Agent(client).chat(service, user_id="alice")
    with pytest.raises(UncorrectableLLMError, match="declares no"):
        chat.send("Hello")
    assert user_texts(stored(service, chat.conversation_id, "alice")) == ["Hello"]
    assert service.owning_thinker(chat.conversation_id, "alice") is None


def test_force_release_cancels_the_turn_at_its_next_boundary(
    service: ConversationService,
) -> None:
    holder: dict[str, str] = {}

    def stop_me() -> str:
        """Force-releases its own conversation, as another thread of the user would."""
        assert service.force_release(holder["cid"], "alice") is not None
        return "done"

    agent = agent_for(ScriptedClient([calls(("stop_me", {}))]), tools=[stop_me])
    chat = agent.chat(service, user_id="alice")
    holder["cid"] = chat.conversation_id
    with pytest.raises(TurnCancelledError, match="force-released by alice"):
        chat.send("Go")
    snapshot = stored(service, chat.conversation_id, "alice")
    assert answerable(snapshot) and [r.content for r in stored_results(snapshot)] == ["done"]
    assert service.owning_thinker(chat.conversation_id, "alice") is None
    assert chat.send("Again").text  # the next turn runs: nothing was left owned


def test_closing_a_stream_early_cancels_the_turn_and_releases_it(
    service: ConversationService,
) -> None:
    chat = agent_for(ScriptedClient([calls(("weather", {"city": "Rome"}))])).chat(
        service, user_id="alice"
    )
    events = chat.stream("Weather?")
    assert isinstance(next(e for e in events if isinstance(e, ToolCallStarted)), ToolCallStarted)
    events.close()
    snapshot = stored(service, chat.conversation_id, "alice")
    assert answerable(snapshot)
    assert "ended before this call ran" in stored_results(snapshot)[0].content
    assert service.owning_thinker(chat.conversation_id, "alice") is None


def test_user_messages_and_final_answers_are_kept_and_tool_traffic_is_compactable(
    service: ConversationService,
) -> None:
    chat = agent_for(ScriptedClient([calls(("weather", {"city": "Rome"}))])).chat(
        service, user_id="alice"
    )
    chat.send("Weather?")
    snapshot = stored(service, chat.conversation_id, "alice")
    flags = [(m.role, m.compactable) for m in snapshot.messages]
    assert flags == [("user", False), ("assistant", True), ("user", True), ("assistant", False)]


def test_a_chat_resumes_after_a_restart_and_a_temporary_one_is_never_stored(
    tmp_path: Path,
) -> None:
    agent = agent_for(ScriptedClient())
    with LmdbStore(tmp_path / "db") as store:
        first = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
        chat = agent.chat(first, user_id="alice")
        chat.send("Remember the number 7.")
        temporary = agent.chat(first, user_id="alice", temporary=True)
        temporary.send("Forget me.")
        assert not temporary.durable and not store.exists(temporary.conversation_id, "alice")
        first.stop()
    with LmdbStore(tmp_path / "db") as store:
        second = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
        same = agent.chat(second, user_id="alice", conversation_id=chat.conversation_id)
        same.send("What was it?")
        assert user_texts(stored(second, chat.conversation_id, "alice")) == [
            "Remember the number 7.",
            "What was it?",
        ]
        second.stop()


def test_the_usage_ledger_has_one_entry_per_model_call(service: ConversationService) -> None:
    chat = agent_for(ScriptedClient([calls(("weather", {"city": "Rome"}))])).chat(
        service, user_id="alice"
    )
    reply = chat.send("Weather?")
    entries = [e for e in chat.usage() if isinstance(e, ModelCallRecord)]
    assert len(entries) == len(chat.usage()) == 2
    assert sum(e.input_tokens for e in entries) == reply.usage.input_tokens


class Forecast(msgspec.Struct):
    city: str
    celsius: int


def test_a_typed_answer_is_parsed_and_a_malformed_one_re_asked_once(
    service: ConversationService,
) -> None:
    client = ScriptedClient(["It is warm.", '{"city": "Rome", "celsius": 21}'])
    chat = agent_for(client, output_type=Forecast).chat(service, user_id="alice")
    reply = chat.send("Forecast for Rome?")
    assert reply.output == Forecast(city="Rome", celsius=21)
    assert "did not parse" in user_texts(stored(service, chat.conversation_id, "alice"))[1]


def test_a_typed_answer_malformed_twice_fails_the_turn(service: ConversationService) -> None:
    chat = agent_for(ScriptedClient(["no", "still no"]), output_type=Forecast).chat(
        service, user_id="alice"
    )
    with pytest.raises(TurnError, match="did not parse as Forecast after one re-ask"):
        chat.send("Forecast?")


def test_attachments_travel_with_the_user_message(service: ConversationService) -> None:
    chat = agent_for(ScriptedClient()).chat(service, user_id="alice")
    image = ImageBlock(data="aGVsbG8=", mime_type="image/png")
    chat.send("What is this?", attachments=[image])
    assert stored(service, chat.conversation_id, "alice").messages[0].blocks[1] == image


def test_a_second_turn_on_a_busy_chat_is_refused(service: ConversationService) -> None:
    chat = agent_for(ScriptedClient()).chat(service, user_id="alice")
    events = chat.stream("One")
    next(events)
    with pytest.raises(IllegalStateError, match="already running on conversation"):
        chat.send("Two")
    assert isinstance(list(events)[-1], TurnDone)


def test_bad_agent_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="max_rounds of at least 1"):
        Agent(ScriptedClient(), max_rounds=0)
    with pytest.raises(ValueError, match="Two tools are named weather"):
        Agent(ScriptedClient(), tools=[weather, weather])


def test_an_undeclared_seat_is_refused_alike_by_the_scripted_and_the_anthropic_client(
    service: ConversationService,
) -> None:
    from parlour.runtime.providers import AnthropicClient
    from parlour.runtime.testing import MockProvider, fake_spec, mock_anthropic_sdk

    provider = MockProvider()
    spec = fake_spec(id="claude-test", provider="anthropic")
    anthropic = AnthropicClient(spec, client=mock_anthropic_sdk(provider))
    scripted = ScriptedClient(spec=spec, depth=None, output_declaration=None)
    refusals = []
    for client in (scripted, anthropic):
        with pytest.raises(UncorrectableLLMError) as refused:
            Agent(client).chat(service, user_id="alice").send("Hello")
        refusals.append(str(refused.value))
    same = [re.sub(r"AgentThinker-conv-[0-9a-f-]+", "<id>", r) for r in refusals]
    assert same[0] == same[1] and "declares no" in same[0]
    assert provider.bodies == []  # refused before anything reached the wire


def test_an_async_tool_runs_on_the_sync_path_too(service: ConversationService) -> None:
    async def shout(word: str) -> str:
        """Shout a word."""
        return word.upper()

    chat = agent_for(ScriptedClient([calls(("shout", {"word": "hey"}))]), tools=[shout]).chat(
        service, user_id="alice"
    )
    chat.send("Shout")
    (result,) = stored_results(stored(service, chat.conversation_id, "alice"))
    assert (result.content, result.is_error) == ("HEY", False)


def test_the_provider_cap_bounds_model_calls_across_all_chats(
    service: ConversationService,
) -> None:
    from parlour.actors.tuning import set_provider_concurrency

    changed, in_flight, most = threading.Condition(), [0], [0]
    all_started = threading.Barrier(4, timeout=10)

    def counted(prepared: object) -> LLMResponse:
        with changed:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
            changed.notify_all()
            # uncapped, a second call arrives while this one waits; capped, none can
            changed.wait_for(lambda: in_flight[0] > 1, timeout=0.2)
            in_flight[0] -= 1
        return LLMResponse(model_id="scripted", blocks=[TextBlock(text="ok")])

    def one(chat: object) -> None:
        all_started.wait()
        chat.send("Hi")  # type: ignore[attr-defined]

    agent = agent_for(ScriptedClient([counted] * 40))
    chats = [agent.chat(service, user_id="alice") for _ in range(4)]
    set_provider_concurrency("scripted", 1)
    try:
        threads = [threading.Thread(target=one, args=(c,)) for c in chats]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    finally:
        set_provider_concurrency("scripted", None)
    assert most[0] == 1
    assert all(len(stored(service, c.conversation_id, "alice").messages) == 2 for c in chats)
    with pytest.raises(ValueError, match="at least 1, not 0"):
        set_provider_concurrency("scripted", 0)


class _AllAtOnce(ScriptedClient):
    """Answers each call only once ``count`` calls are in flight together (in threads for
    ``respond``, in tasks for ``arespond``); a cap below ``count`` leaves them waiting."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count, self.arrived = count, 0
        self.barrier = threading.Barrier(count, timeout=20)
        self.all_here: asyncio.Event | None = None

    def _send(self, request: Any) -> Any:
        self.barrier.wait()
        return super()._send(request)

    async def _asend(self, request: Any, on_text: Any) -> Any:
        if self.all_here is None:
            self.all_here = asyncio.Event()
        self.arrived += 1
        if self.arrived == self.count:
            self.all_here.set()
        await asyncio.wait_for(self.all_here.wait(), 20)
        return ScriptedClient._send(self, request)


@pytest.mark.parametrize("path", ["send", "asend"])
def test_without_a_limiter_every_chats_model_call_is_in_flight_at_once(
    service: ConversationService, path: str
) -> None:
    # more chats than any fixed pool the host once had (64 workers, 64 calls a provider)
    count = 80
    client = _AllAtOnce(count)
    agent = agent_for(client)
    chats = [agent.chat(service, user_id="alice") for _ in range(count)]
    if path == "send":
        threads = [threading.Thread(target=c.send, args=("Hi",)) for c in chats]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not client.barrier.broken
    else:

        async def all_chats() -> None:
            await asyncio.gather(*(c.asend("Hi") for c in chats))

        asyncio.run(all_chats())
        assert client.arrived == count
    assert all(len(stored(service, c.conversation_id, "alice").messages) == 2 for c in chats)
