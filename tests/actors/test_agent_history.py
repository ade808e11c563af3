"""A chat's history: the stored conversation as its user sees it, read without the lease,
the same after a restart, refused to another user; a temporary chat's live copy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from parlour.actors import (
    Agent,
    ConversationService,
    HistoryMessage,
    HistoryToolCall,
    HistoryToolResult,
)
from parlour.runtime import Depth, OutputSize, ScriptedClient
from parlour.runtime.errors import IllegalStateError
from parlour.stores import LmdbStore, MemorySessionCache

from .agent_helpers import calls


def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city's name.
    """
    return f"Sunny in {city}"


def agent_for(client: ScriptedClient, tools: list[object] | None = None) -> Agent:
    return Agent(
        client,
        tools=tools if tools is not None else [weather],  # type: ignore[arg-type]
        objective="Answer briefly.",
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )


def tool_turn(reply_text: str) -> list[HistoryMessage]:
    """The history of one turn asking for the weather in Paris."""
    return [
        HistoryMessage(role="user", text="Weather in Paris?"),
        HistoryMessage(
            role="assistant",
            text="Let me look.",
            tool_calls=(
                HistoryToolCall(id="call_1_weather", name="weather", arguments='{"city": "Paris"}'),
            ),
        ),
        HistoryMessage(
            role="tool",
            text="",
            tool_results=(HistoryToolResult(call_id="call_1_weather", text="Sunny in Paris"),),
        ),
        HistoryMessage(role="assistant", text=reply_text),
    ]


def test_after_a_tool_using_turn_the_history_shows_the_question_the_call_its_result_and_the_answer(
    service: ConversationService,
) -> None:
    chat = agent_for(ScriptedClient([calls(("weather", {"city": "Paris"}))])).chat(
        service, user_id="alice"
    )
    assert chat.history() == []  # nothing saved yet
    reply = chat.send("Weather in Paris?")
    assert chat.history() == tool_turn(reply.text)
    assert asyncio.run(chat.ahistory()) == tool_turn(reply.text)


def test_the_history_reads_the_same_after_a_restart_and_is_refused_to_another_user(
    tmp_path: Path,
) -> None:
    agent = agent_for(ScriptedClient([calls(("weather", {"city": "Paris"}))]))
    with LmdbStore(tmp_path / "db") as store:
        first = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
        chat = agent.chat(first, user_id="alice")
        reply = chat.send("Weather in Paris?")
        first.stop()
    with LmdbStore(tmp_path / "db") as store:
        second = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
        resumed = agent.chat(second, user_id="alice", conversation_id=chat.conversation_id)
        assert resumed.history() == tool_turn(reply.text)
        assert asyncio.run(resumed.ahistory()) == tool_turn(reply.text)
        foreign = agent.chat(second, user_id="mallory", conversation_id=chat.conversation_id)
        with pytest.raises(PermissionError):
            foreign.history()
        with pytest.raises(PermissionError):
            asyncio.run(foreign.ahistory())
        second.stop()


def test_a_running_turn_reads_its_history_without_waiting_for_its_own_lease(
    service: ConversationService,
) -> None:
    """A tool of the turn reads the chat's history while the turn holds the conversation:
    it gets the last saved boundary (the question and the call), not a wait for the lease."""
    during: list[list[HistoryMessage]] = []
    holder: dict[str, object] = {}

    def peek() -> str:
        """Reads the chat's history."""
        during.append(holder["chat"].history())  # type: ignore[attr-defined]
        return "peeked"

    chat = agent_for(ScriptedClient([calls(("peek", {}))]), tools=[peek]).chat(
        service, user_id="alice"
    )
    holder["chat"] = chat
    chat.send("Peek")
    ((question, call),) = during
    assert (question.role, question.text) == ("user", "Peek")
    assert [c.name for c in call.tool_calls] == ["peek"]
    assert [m.role for m in chat.history()] == ["user", "assistant", "tool", "assistant"]


def test_a_temporary_chat_reads_its_live_conversation_between_turns(
    service: ConversationService,
) -> None:
    holder: dict[str, object] = {}
    refused: list[BaseException] = []

    def peek() -> str:
        """Reads the chat's history."""
        try:
            holder["chat"].history()  # type: ignore[attr-defined]
        except IllegalStateError as exc:
            refused.append(exc)
        return "peeked"

    chat = agent_for(ScriptedClient([calls(("peek", {}))]), tools=[peek]).chat(
        service, user_id="alice", temporary=True
    )
    holder["chat"] = chat
    chat.send("Peek")
    assert len(refused) == 1 and "between turns" in str(refused[0])
    history = chat.history()
    assert [(m.role, m.text) for m in history][:1] == [("user", "Peek")]
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert asyncio.run(chat.ahistory()) == history
    assert chat.send("Again").text  # reading it left nothing owned


def test_a_turn_another_service_saved_reads_as_stored(service: ConversationService) -> None:
    """The history is the store's: a turn saved through another service on the same store
    (as another process would) shows, though this service still holds its own warm copy."""
    agent = agent_for(ScriptedClient())
    mine = agent.chat(service, user_id="alice")
    mine.send("First")
    assert service.store is not None
    other = ConversationService(service.store, cleanup_interval_s=0, shutdown_grace_s=0.1)
    try:
        agent.chat(other, user_id="alice", conversation_id=mine.conversation_id).send("Second")
    finally:
        other.stop()
    texts = [m.text for m in mine.history() if m.role == "user"]
    assert texts == ["First", "Second"]
