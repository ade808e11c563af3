"""Usage limits: a turn or a chat that would spend past its limit stops, says which limit and
the numbers, and keeps everything it did; a chat's limits count its stored ledger."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from parlour.actors import Agent, ConversationService, UsageLimitExceeded, UsageLimits
from parlour.runtime import Depth, LLMResponse, OutputSize, ScriptedClient, StopReason, Usage
from parlour.runtime.blocks import TextBlock
from parlour.runtime.providers import WireRequest
from parlour.stores import LmdbStore, MemorySessionCache

from .agent_helpers import answerable, calls, stored, stored_results, user_texts


def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city's name.
    """
    runs.append(city)
    return f"Sunny in {city}"


runs: list[str] = []


@pytest.fixture(autouse=True)
def _no_runs() -> None:
    runs.clear()


def answer(text: str, output_tokens: int = 5, input_tokens: int = 10) -> LLMResponse:
    return LLMResponse(
        model_id="scripted",
        blocks=[TextBlock(text=text)],
        stop_reason=StopReason.END_TURN,
        usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens),
    )


def spending(response: LLMResponse, output_tokens: int) -> LLMResponse:
    return LLMResponse(
        model_id=response.model_id,
        blocks=response.blocks,
        stop_reason=response.stop_reason,
        usage=Usage(input_tokens=10, output_tokens=output_tokens),
    )


def agent_with(replies: list[Any], sent: list[WireRequest], **limits: Any) -> Agent:
    client = ScriptedClient(replies, requests=sent)
    return Agent(
        client,
        tools=[weather],
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
        **limits,
    )


def test_a_turn_at_its_request_limit_is_refused_before_the_next_call_with_the_numbers(
    service: ConversationService,
) -> None:
    sent: list[WireRequest] = []
    rounds = [calls(("weather", {"city": c}), round_=n) for n, c in enumerate("ABC", 1)]
    agent = agent_with(rounds, sent, turn_limits=UsageLimits(requests=2))
    chat = agent.chat(service, user_id="alice")
    with pytest.raises(UsageLimitExceeded) as raised:
        chat.send("Weather in three cities?")
    error = raised.value
    assert (error.scope, error.limit, error.allowed, error.used) == ("turn", "requests", 2, 3)
    assert chat.conversation_id in str(error) and "requests" in str(error)
    assert len(sent) == 2  # the third request was never made
    assert runs == ["A", "B"]  # both answered rounds ran their tools
    snapshot = stored(service, chat.conversation_id, "alice")
    assert answerable(snapshot) and len(stored_results(snapshot)) == 2


def test_a_turns_limits_start_afresh_with_each_turn(service: ConversationService) -> None:
    sent: list[WireRequest] = []
    agent = agent_with(["one", "two", "three"], sent, turn_limits=UsageLimits(requests=1))
    chat = agent.chat(service, user_id="alice")
    assert [chat.send(t).text for t in ("a", "b", "c")] == ["one", "two", "three"]


def test_an_answer_past_the_output_limit_is_kept_but_its_tool_calls_do_not_run(
    service: ConversationService,
) -> None:
    sent: list[WireRequest] = []
    greedy = spending(calls(("weather", {"city": "Rome"})), output_tokens=50)
    agent = agent_with([greedy], sent, turn_limits=UsageLimits(output_tokens=40))
    chat = agent.chat(service, user_id="alice")
    with pytest.raises(UsageLimitExceeded) as raised:
        chat.send("Weather in Rome?")
    assert (raised.value.limit, raised.value.allowed, raised.value.used) == (
        "output_tokens",
        40,
        50,
    )
    assert runs == []
    snapshot = stored(service, chat.conversation_id, "alice")
    (result,) = stored_results(snapshot)  # the kept answer's call is answered, as an error
    assert result.is_error and "output_tokens" in str(result.content)
    assert answerable(snapshot)


def test_a_final_answer_past_a_limit_is_returned_since_no_further_request_follows(
    service: ConversationService,
) -> None:
    agent = agent_with(
        [answer("long", output_tokens=500)], [], turn_limits=UsageLimits(output_tokens=100)
    )
    assert agent.chat(service, user_id="alice").send("Hi").text == "long"


def test_a_request_whose_estimated_input_passes_the_limit_is_never_sent(
    service: ConversationService,
) -> None:
    sent: list[WireRequest] = []
    agent = agent_with(["never"], sent, turn_limits=UsageLimits(input_tokens=100))
    chat = agent.chat(service, user_id="alice")
    with pytest.raises(UsageLimitExceeded) as raised:
        chat.send("word " * 2_000)
    assert raised.value.limit == "input_tokens" and raised.value.used > 1_000
    assert sent == []
    assert user_texts(stored(service, chat.conversation_id, "alice")) == ["word " * 2_000]


def test_a_chats_limits_count_its_stored_ledger_across_a_restart(tmp_path: Path) -> None:
    sent: list[WireRequest] = []
    agent = agent_with(["one", "two", "three"], sent, chat_limits=UsageLimits(requests=2))
    with LmdbStore(tmp_path / "db") as store:
        first = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
        chat = agent.chat(first, user_id="alice")
        chat.send("a")
        first.stop()
    with LmdbStore(tmp_path / "db") as store:
        second = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
        fresh = Agent(
            ScriptedClient(["two", "three"], requests=sent),
            output=OutputSize.STANDARD,
            depth=Depth.IMMEDIATE,
            chat_limits=UsageLimits(requests=2),
        )
        same = fresh.chat(second, user_id="alice", conversation_id=chat.conversation_id)
        assert same.send("b").text == "two"
        with pytest.raises(UsageLimitExceeded) as raised:
            same.send("c")
        assert (raised.value.scope, raised.value.used, raised.value.allowed) == ("chat", 3, 2)
        second.stop()
    assert len(sent) == 2


def test_a_total_token_limit_counts_input_and_output_of_earlier_calls(
    service: ConversationService,
) -> None:
    sent: list[WireRequest] = []
    replies = [answer("one", output_tokens=60, input_tokens=30), answer("two")]
    agent = agent_with(replies, sent, chat_limits=UsageLimits(total_tokens=100))
    chat = agent.chat(service, user_id="alice")
    chat.send("a")
    with pytest.raises(UsageLimitExceeded) as raised:
        chat.send("b")  # 90 spent, and the next request's input on top
    assert raised.value.limit == "total_tokens" and raised.value.used > 100
    assert len(sent) == 1


def test_limits_hold_on_the_asyncio_path(service: ConversationService) -> None:
    sent: list[WireRequest] = []
    rounds = [calls(("weather", {"city": c}), round_=n) for n, c in enumerate("AB", 1)]
    agent = agent_with(rounds, sent, turn_limits=UsageLimits(requests=1))
    chat = agent.chat(service, user_id="alice")

    async def run() -> None:
        with pytest.raises(UsageLimitExceeded):
            await chat.asend("Weather?")

    asyncio.run(run())
    assert len(sent) == 1 and runs == ["A"]
    assert answerable(stored(service, chat.conversation_id, "alice"))


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_a_limit_that_is_not_a_whole_number_of_at_least_one_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        UsageLimits(requests=bad)
