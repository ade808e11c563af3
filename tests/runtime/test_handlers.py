"""Response handlers: instructions in the one @-notation, schema stripping, parsing."""

from __future__ import annotations

import enum
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import msgspec
import pytest

from parlour.runtime import (
    ConversationContext,
    LLMDescription,
    LLMExample,
    LLMRequired,
    NativeToolsFormatter,
    OutgoingMessage,
    PojoResponseHandler,
    StringResponseHandler,
    ThinkingResponseHandler,
    generate_schema,
    tool_from_function,
)
from parlour.runtime.blocks import TextBlock, ToolUseBlock


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


class Verdict(msgspec.Struct):
    call: Annotated[str, msgspec.Meta(description="The decision")]
    reasoning: str
    mode: Mode = Mode.FAST


class Node(msgspec.Struct):
    url: str
    children: list[Node] = []


def schema(instructions: str | None) -> dict[str, Any]:
    assert instructions is not None
    return json.loads(instructions[instructions.index("{") :])  # type: ignore[no-any-return]


class EmptyHandler(StringResponseHandler):
    def __init__(self, instructions: str | None) -> None:
        self.instructions = instructions

    def response_instructions(
        self, native_tools_available: bool, thinking_active: bool
    ) -> str | None:
        return self.instructions


def test_tool_calls_are_dropped_when_native_tools_are_available() -> None:
    handler = ThinkingResponseHandler(Verdict)
    assert "tool_calls" not in handler.response_instructions(True, False)  # type: ignore[operator]
    assert "tool_calls" in schema(handler.response_instructions(False, False))["@fields"]


def test_both_reasonings_are_dropped_when_thinking_is_active() -> None:
    handler = ThinkingResponseHandler(Verdict)
    thinking = handler.response_instructions(False, True)
    assert thinking is not None and "reasoning" not in thinking
    assert '"call"' in thinking  # the rest of the answer stays
    plain = schema(handler.response_instructions(False, False))
    assert "reasoning" in plain["@fields"]
    assert "reasoning" in plain["@fields"]["answer"]["@fields"]


def test_the_instructions_ride_the_last_turn_stripped_and_leave_the_message_alone() -> None:
    c = ConversationContext()
    c.put_main_objective("task", "Decide.")
    ask = OutgoingMessage("decide now", response_handler=ThinkingResponseHandler(Verdict))
    c.add_message(ask)
    prepared = c.prepare_messages_for_llm(NativeToolsFormatter(), thinking_active=True)
    last = prepared.turns[-1]
    assert last.blocks[0] == TextBlock(text="decide now")
    assert len(last.blocks) == 2
    extra = last.blocks[-1]
    assert isinstance(extra, TextBlock)
    assert "tool_calls" not in extra.text and "reasoning" not in extra.text
    assert ask.blocks == [] and ask.raw_content == "decide now"


@pytest.mark.parametrize("instructions", ["", None])
def test_no_instructions_add_no_block(instructions: str | None) -> None:
    c = ConversationContext()
    c.add_message(OutgoingMessage("hi", response_handler=EmptyHandler(instructions)))
    assert c.prepare_messages_for_llm().turns[-1].blocks == [TextBlock(text="hi")]


def test_the_notation_describes_types_enums_and_descriptions() -> None:
    fields = schema(PojoResponseHandler(Verdict).response_instructions(False, False))["@fields"]
    assert fields["call"] == {"@type": "string", "@description": "The decision"}
    assert fields["mode"] == {
        "@type": "enum",
        "@description": "Field mode",
        "@values": ["fast", "slow"],
    }


def test_a_cyclic_type_renders_by_name_where_it_recurs() -> None:
    fields = schema(PojoResponseHandler(Node).response_instructions(False, False))["@fields"]
    assert fields["url"] == {"@type": "string", "@description": "Field url"}
    assert fields["children"] == {"@type": "array of Node", "@description": "Field children"}


def test_a_type_without_fields_is_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="neither a msgspec Struct nor a dataclass"):
        PojoResponseHandler(int)
    with pytest.raises(TypeError, match="neither a msgspec Struct nor a dataclass"):
        ThinkingResponseHandler(int)


class Finding(msgspec.Struct):
    __llm_description__ = "What the search found."

    title: Annotated[str, LLMRequired, LLMDescription("A short title"), LLMExample("Q3 dip")]
    score: Annotated[int, msgspec.Meta(ge=0, le=10), LLMDescription("Confidence, 0-10")] = 5
    sources: list[Node] = []


def test_the_answer_schema_and_the_tool_schema_of_one_type_render_identically() -> None:
    """One notation, one renderer: the answer a model is asked for and a tool input of the
    same type say the same thing, descriptions, requirement and examples included."""

    def file_finding(finding: Finding) -> str:
        """File a finding."""
        return finding.title

    answer = schema(PojoResponseHandler(Finding).response_instructions(False, False))
    assert answer == generate_schema(Finding).to_notation()
    tool_input = tool_from_function(file_finding).schema().to_notation()["@fields"]["finding"]
    assert answer["@fields"] == tool_input["@fields"]
    envelope = schema(ThinkingResponseHandler(Finding).response_instructions(True, False))
    assert envelope["@fields"]["answer"]["@fields"] == answer["@fields"]


def test_the_response_instructions_carry_the_descriptions_the_schema_has() -> None:
    """The one intended change of the response instructions: they now carry the class and
    field descriptions (and the schema's requirement and examples), which the handler's own
    renderer used to drop."""
    instructions = PojoResponseHandler(Finding).response_instructions(False, False)
    assert instructions == (
        "Reply with one JSON object, and nothing around it, that is an instance of:\n"
        '{"@type":"Finding","@description":"What the search found.","@fields":{'
        '"title":{"@type":"string","@description":"A short title","@required":true,'
        '"@examples":["Q3 dip"]},'
        '"score":{"@type":"integer","@description":"Confidence, 0-10"},'
        '"sources":{"@type":"array of Node","@description":"Field sources","@fields":{'
        '"url":{"@type":"string","@description":"Field url"},'
        '"children":{"@type":"array of Node","@description":"Field children"}}}}}'
    )
    answer = schema(ThinkingResponseHandler(Finding).response_instructions(True, False))
    assert answer["@fields"]["answer"]["@description"] == (
        "The final answer; leave it out while you still call tools. What the search found."
    )


def test_structured_handlers_use_the_notation_and_prose_does_not() -> None:
    assert PojoResponseHandler(Verdict).uses_schema_notation()
    assert ThinkingResponseHandler().uses_schema_notation()
    assert not StringResponseHandler().uses_schema_notation()


def test_a_pojo_answer_parses_typed_even_inside_a_code_fence() -> None:
    reply = '```json\n{"call": "go", "reasoning": "because", "mode": "slow"}\n```'
    assert PojoResponseHandler(Verdict).parse(reply) == Verdict("go", "because", Mode.SLOW)


def test_text_dialect_tool_calls_get_ids_by_name_and_position() -> None:
    reply = json.dumps(
        {
            "reasoning": "need time, then search",
            "tool_calls": [
                {"name": "get_time"},
                {"name": "search", "input": {"q": "x"}},
                {"name": "fetch", "id": "kept-1"},
            ],
        }
    )
    parsed = ThinkingResponseHandler(Verdict).parse(reply)
    assert [c.id for c in parsed.tool_calls] == ["get_time#1", "search#2", "kept-1"]
    assert parsed.tool_calls[1] == ToolUseBlock(
        id="search#2", name="search", input_json='{"q":"x"}'
    )
    assert parsed.answer is None


def test_a_thinking_answer_parses_to_the_answer_type() -> None:
    reply = json.dumps({"answer": {"call": "stop", "reasoning": "done"}})
    parsed = ThinkingResponseHandler(Verdict).parse(reply)
    assert parsed.answer == Verdict("stop", "done")
    assert parsed.tool_calls == []


def test_one_handler_gives_identical_instructions_across_threads() -> None:
    handler = ThinkingResponseHandler(Verdict)

    def render(i: int) -> str:
        c = ConversationContext(f"c-{i}")
        c.add_message(OutgoingMessage("go", response_handler=handler))
        last = c.prepare_messages_for_llm().turns[-1].blocks[-1]
        assert isinstance(last, TextBlock)
        return last.text

    with ThreadPoolExecutor(8) as pool:
        assert len(set(pool.map(render, range(64)))) == 1
