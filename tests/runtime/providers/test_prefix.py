"""The prefix-stability check: a silent cache-bust is logged, naming the first slot."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from loguru import logger

from parlour.runtime import (
    ConversationContext,
    Depth,
    LLMClient,
    LocalTokenCounter,
    TokenCounter,
    Turn,
    TurnRole,
)
from parlour.runtime.blocks import TextBlock, ToolDefinitionBlock
from parlour.runtime.providers import (
    AnthropicClient,
    BedrockClient,
    OpenAIClient,
    OpenAIResponsesClient,
)
from parlour.runtime.providers._prefix import Prefix, first_divergence
from parlour.runtime.testing import (
    ConverseStreamMock,
    MockProvider,
    ScriptedClient,
    anthropic_message,
    converse_stream_events,
    dummy_bedrock_client,
    fake_spec,
    mock_anthropic_sdk,
    mock_openai_sdk,
    openai_completion,
    openai_reasoning,
    openai_response,
)


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    seen: list[str] = []
    logger.enable("parlour")
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING", format="{message}")
    yield seen
    logger.remove(sink)
    logger.disable("parlour")


def chat(client: LLMClient, c: ConversationContext, text: str) -> None:
    c.add_user_message(text)
    c.add_message(client.respond(c).to_message())


def test_a_growing_conversation_keeps_its_prefix_silently(warnings: list[str]) -> None:
    c = ConversationContext("p-1")
    c.put_main_objective("task", "Be kind.")
    # named so no message mentions it: the scripted model calls a tool its text names
    c.add_tool(ToolDefinitionBlock(name="lookup", description="d"))
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
    assert not c.is_frozen() and c.model_binding is None


def native_clients() -> list[LLMClient]:
    anthropic = MockProvider(*[anthropic_message("ok")] * 3)
    openai = MockProvider(*[openai_completion("ok")] * 3)
    reasoning = openai_response("ok", reasoning=[openai_reasoning(summary="thought")])
    responses = MockProvider(*[reasoning] * 3)
    return [
        AnthropicClient(
            fake_spec(id="claude-t", provider="anthropic"), client=mock_anthropic_sdk(anthropic)
        ),
        OpenAIClient(fake_spec(id="gpt-t", provider="openai"), client=mock_openai_sdk(openai)),
        OpenAIResponsesClient(
            fake_spec(id="gpt-t", provider="openai"), client=mock_openai_sdk(responses)
        ),
    ]


def seat(conversation_id: str) -> ConversationContext:
    c = ConversationContext(conversation_id)
    c.output_declaration, c.depth = 1_000, Depth.IMMEDIATE
    c.put_main_objective("task", "Be kind.")
    c.add_tool(ToolDefinitionBlock(name="t", description="d"))
    return c


@pytest.mark.parametrize("client", native_clients(), ids=["anthropic", "openai", "responses"])
def test_a_late_tool_on_a_native_dialect_warns_naming_the_tools_array(
    warnings: list[str], client: LLMClient
) -> None:
    c = seat("p-5")
    chat(client, c, "one")
    chat(client, c, "two")
    assert warnings == []  # head tools in the array: the prefix holds
    c.add_tool(ToolDefinitionBlock(name="late", description="arrives after the freeze"))
    chat(client, c, "three")
    assert len(warnings) == 1 and "changed at tools since" in warnings[0]


def test_a_late_tool_on_a_text_dialect_keeps_the_prefix(warnings: list[str]) -> None:
    boto = dummy_bedrock_client()
    stream = ConverseStreamMock(boto, *[converse_stream_events("ok")] * 3)
    client = BedrockClient(fake_spec(id="anthropic.t-v1:0", provider="bedrock"), client=boto)
    c = seat("p-6")
    for text in ("one", "two"):
        c.add_user_message(text)
        c.add_message(client.stream(c).get_final_response().to_message())
    c.add_tool(ToolDefinitionBlock(name="late", description="arrives after the freeze"))
    c.add_user_message("three")
    client.stream(c).get_final_response()
    assert warnings == []
    assert "late: arrives after the freeze" in json.dumps(stream.bodies[-1]["messages"][-1])


# -- the check against a slot-by-slot model ---------------------------------------------------

_TEXTS = [TextBlock(text="a"), TextBlock(text="b")]
_TURNS = [
    Turn(role=TurnRole.USER, blocks=[_TEXTS[0]]),
    Turn(role=TurnRole.ASSISTANT, blocks=[_TEXTS[1]]),
    Turn(role=TurnRole.USER, blocks=[_TEXTS[1]]),
    Turn(role=TurnRole.USER, blocks=[_TEXTS[0]], cache=True),  # the first, cached
    Turn(role=TurnRole.USER, blocks=[TextBlock(text="a")]),  # the first again, a copy
]
_TOOLS = [
    ToolDefinitionBlock(name="t", description="d"),
    ToolDefinitionBlock(name="u", description="e"),
]


def _model_divergence(previous: Prefix, current: Prefix) -> str | None:
    """The first differing slot of ``previous`` (its last turn excluded), slot by slot."""

    def slots(p: Prefix) -> list[tuple[str, object]]:
        head: list[tuple[str, object]] = [("tools", p.tools)] if p.tools is not None else []
        head.append(("system", p.system))
        turns = [
            (f"turn {i + 1} ({t.role.value})", (t.role, t.blocks)) for i, t in enumerate(p.turns)
        ]
        return head + turns

    before, now = slots(previous), slots(current)
    stable = len(before) - 1 if previous.turns else len(before)
    for at in range(stable):
        if at >= len(now):
            return f"{before[at][0]} (dropped)"
        if now[at] != before[at]:
            return before[at][0]
    return None


_PREFIXES = st.builds(
    Prefix,
    st.none() | st.lists(st.sampled_from(_TOOLS), max_size=2),
    st.sampled_from(["", "Be kind."]),
    st.lists(st.sampled_from(_TURNS), max_size=5),
)


@given(_PREFIXES, _PREFIXES)
def test_property_the_check_names_the_first_slot_a_model_of_the_slots_names(
    previous: Prefix, current: Prefix
) -> None:
    assert first_divergence(previous, current) == _model_divergence(previous, current)


@given(_PREFIXES, st.lists(st.sampled_from(_TURNS), max_size=3))
def test_property_a_prefix_that_only_grows_holds(previous: Prefix, added: list[Turn]) -> None:
    grown = Prefix(previous.tools, previous.system, [*previous.turns, *added])
    assert first_divergence(previous, grown) is None
