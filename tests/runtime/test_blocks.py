"""Content blocks and messages: the eleven kinds, snapshots, text fallback."""

from __future__ import annotations

import dataclasses
import json
import typing

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parlour.runtime import (
    ConversationContext,
    IncomingMessage,
    OutgoingMessage,
)
from parlour.runtime import blocks as b
from parlour.runtime.blocks import (
    BLOCK_KINDS,
    ContentBlock,
    ContentBlockSnapshot,
    FileBlock,
    ImageBlock,
    JsonBlock,
    PojoBlock,
    ReasoningBlock,
    RedactedThinkingBlock,
    SkillBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
    render_text,
)
from parlour.runtime.errors import IllegalStateError, UncorrectableLLMError
from parlour.runtime.snapshots import decode_snapshot, encode_snapshot


class Citation(msgspec.Struct):
    title: str
    year: int
    tags: list[str] = []


@dataclasses.dataclass
class Note:
    text: str
    stars: int


def test_the_union_has_exactly_twelve_kinds() -> None:
    assert set(typing.get_args(ContentBlock)) == {
        TextBlock, PojoBlock, JsonBlock, ToolDefinitionBlock, ImageBlock, FileBlock,
        ToolUseBlock, ToolResultBlock, ThinkingBlock, RedactedThinkingBlock, ReasoningBlock,
        SkillBlock,
    }  # fmt: skip


def test_blocks_are_frozen_and_compare_by_value() -> None:
    block = TextBlock(text="a")
    with pytest.raises(AttributeError):
        block.text = "b"  # type: ignore[misc]
    assert TextBlock(text="a") == block
    assert hash(TextBlock(text="a")) == hash(block)


def test_the_stored_kind_names() -> None:
    assert sorted(BLOCK_KINDS) == sorted(
        ["text", "pojo", "json", "tool_definition", "image", "file", "tool_use",
         "tool_result", "thinking", "redacted_thinking", "reasoning", "skill"]
    )  # fmt: skip
    assert (
        json.loads(msgspec.json.encode(ToolUseBlock(id="i", name="n", input_json="{}")))["type"]
        == "tool_use"
    )


EXAMPLES: list[ContentBlock] = [
    TextBlock(text="hello"),
    JsonBlock(json='{"a":1}'),
    ToolDefinitionBlock(name="n", description="d", schema_json='{"type":"object"}'),
    ImageBlock(data="aGk=", mime_type="image/png", description="a chart"),
    FileBlock(data="aGk=", mime_type="application/pdf", filename="report.pdf"),
    ToolUseBlock(id="toolu_1", name="search", input_json='{"q":1}'),
    ToolResultBlock(tool_use_id="toolu_1", content="nope", is_error=True),
    ThinkingBlock(text="hmm", signature="sig"),
    RedactedThinkingBlock(data="opaque"),
    ReasoningBlock(item_json='{"type": "reasoning"}', summary="I checked."),
    SkillBlock(name="summarize", body="Summarize briefly."),
]


@pytest.mark.parametrize("block", EXAMPLES, ids=lambda b: type(b).__name__)
def test_a_block_snapshot_round_trips(block: ContentBlock) -> None:
    snapshot = ContentBlockSnapshot.from_block(block)
    stored = msgspec.json.decode(msgspec.json.encode(snapshot), type=ContentBlockSnapshot)
    assert stored.to_block() == block


@pytest.mark.parametrize("value", [Citation("On Things", 1999, ["x"]), Note("n", 5)])
def test_a_pojo_of_an_imported_class_comes_back_typed(value: object) -> None:
    snapshot = ContentBlockSnapshot.from_block(PojoBlock(value=value))
    stored = msgspec.json.decode(msgspec.json.encode(snapshot), type=ContentBlockSnapshot)
    restored = stored.to_block()
    assert isinstance(restored, PojoBlock)
    assert type(restored.value) is type(value)
    assert restored.value == value


def test_a_pojo_whose_class_is_gone_degrades_to_json() -> None:
    snapshot = ContentBlockSnapshot(
        type="pojo",
        fields={"value": {"title": "kept", "year": 1}, "class_path": "no.such.module:Gone"},
    )
    restored = snapshot.to_block()
    assert isinstance(restored, JsonBlock)
    assert json.loads(restored.json) == {"title": "kept", "year": 1}


def test_an_unknown_stored_kind_is_refused_by_name() -> None:
    with pytest.raises(IllegalStateError, match="'hologram' is unknown"):
        ContentBlockSnapshot(type="hologram", fields={"x": 1}).to_block()


def test_a_stored_block_that_does_not_fit_its_kind_is_refused() -> None:
    with pytest.raises(IllegalStateError, match="kind 'text' does not fit"):
        ContentBlockSnapshot(type="text", fields={"txt": "typo"}).to_block()


def test_blank_text_adds_no_block_and_raw_content_joins_text_blocks() -> None:
    out = OutgoingMessage()
    out.add_text(None)
    out.add_text("   ")
    assert out.blocks == []
    incoming = IncomingMessage(blocks=[TextBlock(text="first "), TextBlock(text="second")])
    assert incoming.raw_content == "first second"


def test_the_text_fallback_encoders() -> None:
    assert render_text(ToolUseBlock(id="id1", name="search", input_json='{"q":1}')) == (
        '[Tool Use search] {"q":1}'
    )
    result = ToolResultBlock(tool_use_id="id1", content='{"ok":true}')
    assert render_text(result) == '[Tool Result id1] {"ok":true}'
    assert render_text(ImageBlock(data="x", mime_type="image/png")) == "[image image/png]"
    pdf = FileBlock(data="x", mime_type="application/pdf", filename="report.pdf")
    assert render_text(pdf) == "[file report.pdf]"
    assert render_text(ThinkingBlock(text="secret", signature="s")) == ""
    assert render_text(RedactedThinkingBlock(data="opaque")) == ""
    assert render_text(ReasoningBlock(item_json="{}", summary="s")) == ""
    assert render_text(TextBlock(text="")) == ""


def test_an_unconverted_pojo_at_an_encoder_is_refused() -> None:
    with pytest.raises(UncorrectableLLMError, match="unconverted"):
        render_text(PojoBlock(value=Citation("t", 1)))


# -- property: every field of every kind survives a snapshot ---------------------------------

text = st.text(max_size=20)
optional = st.none() | text
citations = st.builds(Citation, title=text, year=st.integers(-(2**40), 2**40), tags=st.lists(text))
blocks = st.one_of(
    st.builds(TextBlock, text=text),
    st.builds(PojoBlock, value=citations),
    st.builds(JsonBlock, json=text),
    st.builds(ToolDefinitionBlock, name=text, description=text, schema_json=optional),
    st.builds(ImageBlock, data=text, mime_type=text, description=optional),
    st.builds(FileBlock, data=text, mime_type=text, filename=optional),
    st.builds(ToolUseBlock, id=text, name=text, input_json=text),
    st.builds(ToolResultBlock, tool_use_id=text, content=text, is_error=st.booleans()),
    st.builds(ThinkingBlock, text=text, signature=optional),
    st.builds(RedactedThinkingBlock, data=text),
    st.builds(ReasoningBlock, item_json=text, summary=text),
    st.builds(SkillBlock, name=text, body=text),
)


@given(blocks)
def test_property_a_block_snapshot_preserves_every_field(block: ContentBlock) -> None:
    stored = msgspec.json.encode(ContentBlockSnapshot.from_block(block))
    restored = msgspec.json.decode(stored, type=ContentBlockSnapshot).to_block()
    assert restored == block
    assert msgspec.structs.asdict(restored) == msgspec.structs.asdict(block)


@given(st.lists(blocks, max_size=6))
def test_property_a_message_snapshot_preserves_every_block(items: list[ContentBlock]) -> None:

    c = ConversationContext("c-prop")
    # every result answers a call on record, so restore keeps it (orphans are dropped)
    calls = [
        ToolUseBlock(id=b.tool_use_id, name="t", input_json="{}")
        for b in items
        if isinstance(b, ToolResultBlock)
    ]
    # and every call its answer, so restore adds none (dangling calls are answered)
    answers = [
        ToolResultBlock(tool_use_id=b.id, content="r")
        for b in items * 2
        if isinstance(b, ToolUseBlock)
    ]
    c.add_message(IncomingMessage(blocks=calls))
    c.add_message(OutgoingMessage(blocks=items))
    c.add_message(IncomingMessage(blocks=items))
    c.add_message(OutgoingMessage(blocks=answers))
    restored = decode_snapshot(encode_snapshot(c.to_snapshot()), "c-prop").to_conversation()
    assert [m.blocks for m in restored.messages] == [calls, items, items, answers]


def test_the_block_union_has_twelve_kinds_with_stable_tags() -> None:
    kinds = typing.get_args(b.ContentBlock)
    assert sorted(k.__struct_config__.tag for k in kinds) == sorted(
        [
            "text",
            "pojo",
            "json",
            "tool_definition",
            "image",
            "file",
            "tool_use",
            "tool_result",
            "thinking",
            "redacted_thinking",
            "reasoning",
            "skill",
        ]
    )
    block = b.TextBlock(text="x")
    with pytest.raises(AttributeError):
        block.text = "y"  # type: ignore[misc]
    assert block == b.TextBlock(text="x")
