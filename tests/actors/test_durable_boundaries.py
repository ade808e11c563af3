"""Every boundary of an agent's turn is durable before the turn's next external call: the
user's message before the model is asked, the model's answer before its tools run, and a
round of tool results before the model is asked again. Checked from inside the model and the
tool, by reading what the store has committed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from parlour.actors import Agent, Chat, ConversationService
from parlour.runtime import Depth, LLMResponse, OutputSize, PreparedConversation, ScriptedClient
from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from parlour.stores import LmdbStore

from .agent_helpers import calls

USER = "alice"


def _stored_blocks(store: LmdbStore, chat: Chat) -> list[object]:
    """Every block the store has committed for the chat's conversation (none before its
    first commit)."""
    if not store.exists(chat.conversation_id, USER):
        return []
    snapshot = store.load(chat.conversation_id, USER)
    assert snapshot is not None
    return [b for m in snapshot.messages for b in m.blocks]


def _stored_texts(store: LmdbStore, chat: Chat) -> list[object]:
    return [b.text for b in _stored_blocks(store, chat) if isinstance(b, TextBlock)]


def _turn(
    tmp_path: Path, run: Callable[[Chat], object], seen: dict[str, list[object]], text: str
) -> None:
    """A two-round turn (a tool call, then a final answer) on an LmdbStore, after a first
    turn that created the conversation, recording in
    ``seen`` what the store held when the model was asked and when the tool ran."""
    with LmdbStore(tmp_path / "db") as store, ConversationService(store) as service:
        chat: Chat

        def first(_: PreparedConversation) -> LLMResponse:
            seen["first call"] = _stored_texts(store, chat)
            return calls(("lookup", {"order_id": "42"}))

        def second(_: PreparedConversation) -> LLMResponse:
            seen["second call"] = _stored_blocks(store, chat)
            return LLMResponse(model_id="scripted", blocks=[TextBlock(text="It shipped.")])

        def lookup(order_id: str) -> str:
            """Look an order up.

            Args:
                order_id: the order.
            """
            seen["tool"] = _stored_blocks(store, chat)
            return f"order {order_id} shipped"

        agent = Agent(
            ScriptedClient(["Hello to you.", first, second]),
            tools=[lookup],
            output=OutputSize.COMPACT,
            depth=Depth.IMMEDIATE,
        )
        chat = agent.chat(service, user_id=USER)
        chat.send("Hello")  # the conversation exists: the turn below saves updates only
        run(chat)
    assert seen["first call"] == ["Hello", "Hello to you.", text]
    assert any(isinstance(b, ToolUseBlock) and b.name == "lookup" for b in seen["tool"])
    assert not any(isinstance(b, ToolResultBlock) for b in seen["tool"])
    results = [b for b in seen["second call"] if isinstance(b, ToolResultBlock)]
    assert [r.content for r in results] == ["order 42 shipped"]


@pytest.mark.parametrize("path", ["send", "stream", "asend", "astream"])
def test_each_boundary_of_a_turn_is_committed_before_the_next_model_call_or_tool(
    tmp_path: Path, path: str
) -> None:
    text = "Where is order 42?"

    async def consume(chat: Chat) -> None:
        async for _ in chat.astream(text):
            pass

    runs: dict[str, Callable[[Chat], object]] = {
        "send": lambda chat: chat.send(text),
        "stream": lambda chat: list(chat.stream(text)),
        "asend": lambda chat: asyncio.run(chat.asend(text)),
        "astream": lambda chat: asyncio.run(consume(chat)),
    }
    _turn(tmp_path, runs[path], {}, text)
