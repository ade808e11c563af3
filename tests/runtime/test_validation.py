"""Values are validated when they enter a conversation, so nothing can poison what is stored.

A lone surrogate, nesting deeper than MAX_NESTING, or a value msgspec cannot encode is
refused at the entry point with a ValueError naming what and where; what the conversation
already held still saves and loads.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import (
    MAX_NESTING,
    Artifact,
    ConversationContext,
    IncomingMessage,
    OutgoingMessage,
    tool_from_function,
    type_alias,
)
from parlour.runtime._validation import check_value, nesting_depth
from parlour.runtime.blocks import (
    PojoBlock,
    SkillBlock,
    TextBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
)
from parlour.runtime.snapshots import decode_snapshot, encode_snapshot

BROKEN = json.loads('"result \\ud800 tail"')  # what a broken escape in tool output decodes to


@type_alias("test:validated-note")
class Note(Artifact):
    body: str


def nested(depth: int, leaf: object = 1) -> object:
    """A value ``depth`` containers deep (lists and dicts alternating)."""
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def conversation() -> ConversationContext:
    c = ConversationContext("c-valid", user_id="alice")
    c.put_main_objective("task", "Answer briefly.")
    c.add_user_message("first, kept")
    return c


def assert_still_saves(c: ConversationContext, messages: int) -> None:
    """The conversation still encodes, and decodes to what it held before the refusal."""
    restored = decode_snapshot(encode_snapshot(c.to_snapshot()), "c-valid").to_conversation()
    assert len(restored.messages) == messages
    assert restored.messages[0].raw_content == "first, kept"


# -- messages --------------------------------------------------------------------------------


def test_a_user_message_with_a_lone_surrogate_is_refused_and_nothing_is_lost() -> None:
    c = conversation()
    with pytest.raises(ValueError, match=r"OutgoingMessage \(role 'user'\).*lone surrogate"):
        c.add_user_message(BROKEN)
    assert len(c.messages) == 1
    assert_still_saves(c, 1)


def test_a_tool_result_decoded_from_a_broken_escape_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError) as refused:
        IncomingMessage(blocks=[ToolResultBlock(tool_use_id="t1", content=BROKEN)])
    assert "IncomingMessage (role 'assistant') block 0 (ToolResultBlock.content)" in str(
        refused.value
    )
    assert "index 7" in str(refused.value)


def test_a_block_added_later_is_refused_and_the_message_is_left_as_it_was() -> None:
    c = conversation()
    message = c.messages[0]
    with pytest.raises(ValueError, match=r"block 1 \(TextBlock.text\)"):
        message.add_block(TextBlock(text=BROKEN))
    with pytest.raises(ValueError, match="block 0"):
        message.blocks[0] = TextBlock(text=BROKEN)
    with pytest.raises(ValueError, match="block 2"):
        message.blocks.extend([TextBlock(text="fine"), TextBlock(text=BROKEN)])
    assert message.blocks == [TextBlock(text="first, kept")]
    assert_still_saves(c, 1)


def test_a_block_field_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(ValueError, match=r"TextBlock.text\) is of type NoneType, not str"):
        OutgoingMessage(blocks=[TextBlock(text=None)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is_error"):
        OutgoingMessage(blocks=[ToolResultBlock(tool_use_id="t", content="c", is_error=1)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not one of the content block kinds"):
        OutgoingMessage(blocks=["plain text"])  # type: ignore[list-item]


def test_message_content_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(ValueError, match=r"IncomingMessage \(role 'assistant'\) content"):
        IncomingMessage(BROKEN)


def test_add_message_refuses_what_is_not_a_message() -> None:
    c = conversation()
    with pytest.raises(ValueError, match="c-valid accepts Message instances"):
        c.add_message("hello")  # type: ignore[arg-type]
    assert len(c.messages) == 1


# -- the objective, skills, tools, artifacts -----------------------------------------------------


def test_an_objective_value_nested_past_the_cap_is_refused_naming_the_slot() -> None:
    c = conversation()
    with pytest.raises(ValueError, match=rf"objective slot 'data'.*deeper than {MAX_NESTING}"):
        c.put_main_objective("data", nested(MAX_NESTING + 1))
    assert not c.has_main_objective("data")
    assert_still_saves(c, 1)


def test_an_objective_value_nested_to_the_cap_is_stored_and_reads_back() -> None:
    c = conversation()
    c.put_main_objective("data", nested(MAX_NESTING))
    restored = decode_snapshot(encode_snapshot(c.to_snapshot()), "c-valid").to_conversation()
    assert restored.get_main_objective()["data"] == PojoBlock(value=nested(MAX_NESTING))


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"k": object()}, "cannot be encoded"),
        ({"k": [1, {BROKEN: 2}]}, r"key at \$\.k\[1\] holds a lone surrogate"),
        ({"k": ["a", BROKEN]}, r"at \$\.k\[1\] holds a lone surrogate"),
        (TextBlock(text=BROKEN), r"TextBlock.text"),
    ],
)
def test_an_objective_value_that_cannot_be_stored_is_refused(value: object, match: str) -> None:
    c = conversation()
    with pytest.raises(ValueError, match=match):
        c.put_main_objective("data", value)
    assert not c.has_main_objective("data")


def test_a_refused_put_after_the_freeze_still_raises_and_changes_nothing() -> None:
    c = conversation()
    c.prepare_messages_for_llm()
    with pytest.raises(ValueError, match="objective slot 'task'"):
        c.put_main_objective("task", BROKEN)
    assert c.get_main_objective()["task"] == TextBlock(text="Answer briefly.")


def test_a_skill_with_a_lone_surrogate_is_refused() -> None:
    c = conversation()
    with pytest.raises(ValueError, match=r"skill 'style' \(SkillBlock.body\)"):
        c.admit_skill(SkillBlock(name="style", body=BROKEN))
    assert c.admitted_skills() == []


def test_a_tool_definition_with_a_lone_surrogate_is_refused() -> None:
    c = conversation()
    with pytest.raises(ValueError, match=r"tool definition 'get'.*description"):
        c.add_tool(ToolDefinitionBlock(name="get", description=BROKEN))
    assert c.declared_tools() == {}


def test_a_lazy_tool_whose_definition_cannot_be_stored_is_refused_when_it_converts() -> None:
    def lookup(query: str) -> str:
        return query

    lookup.__doc__ = f"Look up. {BROKEN}"
    c = conversation()
    c.add_tool(tool_from_function(lookup))
    with pytest.raises(ValueError, match="tool definition 'lookup'"):
        c.prepare_messages_for_llm()
    assert not isinstance(c.declared_tools()["lookup"], ToolDefinitionBlock)  # nothing stored


def test_an_artifact_with_a_lone_surrogate_is_refused_and_nothing_is_registered() -> None:
    c = conversation()
    with pytest.raises(ValueError, match=r"artifact Note.*\$\.body holds a lone surrogate"):
        c.artifact_registry.register(Note(body=BROKEN))
    assert c.artifact_registry.size() == 0
    ref = c.artifact_registry.register(Note(body="fine"))
    assert c.artifact_registry.get(ref) == Note(body="fine", artifact_ref=ref)


# -- the validator, by property ----------------------------------------------------------------

_TEXT = st.text(alphabet=st.characters(codec=None), max_size=6) | st.sampled_from(
    ["\ud800", "ok\udfff", "é\ud83d"]
)
_SCALAR = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _TEXT


def _json_like(depth: int) -> st.SearchStrategy[Any]:
    """JSON-like values whose nesting is ``depth`` give or take a few levels."""
    return st.integers(max(0, depth - 3), depth + 3).flatmap(
        lambda d: st.recursive(
            _SCALAR, lambda inner: st.lists(inner, max_size=2), max_leaves=4
        ).flatmap(lambda tail: st.just(nested(d, tail)))
    )


def _expected(value: object, depth: int = 0) -> bool:
    """The reference answer, written plainly (recursion is fine at these depths)."""
    if isinstance(value, str):
        return not any(0xD800 <= ord(ch) <= 0xDFFF for ch in value)
    if isinstance(value, dict):
        return depth < MAX_NESTING and all(
            _expected(k, depth) and _expected(v, depth + 1) for k, v in value.items()
        )
    if isinstance(value, list):
        return depth < MAX_NESTING and all(_expected(v, depth + 1) for v in value)
    return True


@settings(max_examples=200, deadline=None)
@given(_json_like(MAX_NESTING))
def test_property_a_value_is_accepted_exactly_when_it_can_be_stored(value: object) -> None:
    c = ConversationContext("c-prop", user_id="alice")
    try:
        c.put_main_objective("data", {"v": value})
    except ValueError as exc:
        assert "objective slot 'data'" in str(exc)
        assert not _expected({"v": value})
        return
    assert _expected({"v": value})
    restored = decode_snapshot(encode_snapshot(c.to_snapshot()), "c-prop").to_conversation()
    assert restored.get_main_objective()["data"] == PojoBlock(value={"v": value})


@given(st.integers(0, MAX_NESTING + 5))
def test_property_nesting_depth_counts_containers(depth: int) -> None:
    assert nesting_depth(nested(depth)) == min(depth, MAX_NESTING + 1)


def test_a_cyclic_or_shared_value_is_refused_quickly() -> None:
    cycle: list[Any] = []
    cycle.extend([cycle, cycle])
    with pytest.raises(ValueError, match="deeper than"):
        check_value(cycle, "a cycle")
    shared: Any = 1
    for _ in range(16):
        shared = [shared, shared]  # 2**16 paths through 16 distinct containers
    check_value(shared, "a shared value")
    deep_shared: Any = 1
    for _ in range(48):
        deep_shared = [deep_shared, deep_shared]  # 2**48 paths: only a guarded walk ends
    assert nesting_depth(deep_shared) == 48


def test_a_role_or_flag_the_stored_form_could_not_read_back_is_refused() -> None:
    """``1`` for a bool flag encodes, and then never decodes: refused when set."""
    with pytest.raises(ValueError, match="OutgoingMessage cache is 1 of type int, not bool"):
        OutgoingMessage("hi", cache=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="requested_output_tokens is True"):
        OutgoingMessage("hi", requested_output_tokens=True)
    with pytest.raises(ValueError, match="role holds a lone surrogate"):
        OutgoingMessage("hi", role=BROKEN)
    c = conversation()
    with pytest.raises(ValueError, match="compactable"):
        c.messages[0].set_compactable("yes")  # type: ignore[arg-type]
    assert c.messages[0].compactable is True
    assert_still_saves(c, 1)


def test_an_objective_slot_key_with_a_lone_surrogate_is_refused() -> None:
    c = conversation()
    with pytest.raises(ValueError, match="objective slot key holds a lone surrogate"):
        c.put_main_objective(BROKEN, "value")
    with pytest.raises(ValueError, match="slot key is a str, not int"):
        c.put_main_objective(7, "value")  # type: ignore[arg-type]
    assert list(c.get_main_objective()) == ["task"]
