"""The prefix-stability check: a silent cache-bust is logged, naming the first slot."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loguru import logger

from parlour.runtime import ConversationContext, LocalTokenCounter, TokenCounter
from parlour.runtime.blocks import TextBlock, ToolDefinitionBlock
from parlour.runtime.testing import ScriptedClient, fake_spec


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    seen: list[str] = []
    logger.enable("parlour")
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING", format="{message}")
    yield seen
    logger.remove(sink)
    logger.disable("parlour")


def chat(client: ScriptedClient, c: ConversationContext, text: str) -> None:
    c.add_user_message(text)
    c.add_message(client.respond(c).to_message())


def test_a_growing_conversation_keeps_its_prefix_silently(warnings: list[str]) -> None:
    c = ConversationContext("p-1")
    c.put_main_objective("task", "Be kind.")
    c.add_tool(ToolDefinitionBlock(name="t", description="d"))
    client = ScriptedClient()
    for text in ("one", "two", "three"):
        chat(client, c, text)
    assert warnings == []


def test_a_rewritten_turn_is_named_in_the_warning(warnings: list[str]) -> None:
    c = ConversationContext("p-2")
    client = ScriptedClient()
    chat(client, c, "one")
    chat(client, c, "two")
    c.messages[0].blocks = [TextBlock(text="edited history")]
    chat(client, c, "three")
    assert len(warnings) == 1
    assert "p-2" in warnings[0] and "turn 1 (user)" in warnings[0]


def test_a_changed_objective_in_a_new_instance_is_named(warnings: list[str]) -> None:
    c = ConversationContext("p-3")
    c.put_main_objective("task", "Version one.")
    client = ScriptedClient()
    chat(client, c, "one")
    restored = c.to_snapshot().to_conversation()
    restored.put_main_objective("task", "Version two.")
    chat(client, restored, "two")
    assert len(warnings) == 1 and "changed at system" in warnings[0]


def test_dropped_history_is_named(warnings: list[str]) -> None:
    c = ConversationContext("p-4")
    client = ScriptedClient()
    for text in ("one", "two", "three"):
        chat(client, c, text)
    del c.messages[:4]
    chat(client, c, "four")
    assert len(warnings) == 1 and "turn 1 (user)" in warnings[0]


def test_the_local_estimate_counts_without_freezing_the_conversation() -> None:
    counter = LocalTokenCounter(fake_spec())
    assert isinstance(counter, TokenCounter)
    c = ConversationContext("k-1")
    c.put_main_objective("task", "Count carefully.")
    empty = counter.count_tokens(c)
    c.add_user_message("a few more words here")
    assert counter.count_tokens(c) > empty > 0
    assert not c.is_frozen() and not c.is_model_resolved()
