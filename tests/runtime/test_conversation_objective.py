"""The objective map and its freeze."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from loguru import logger

from parlour.runtime import (
    SCHEMA_NOTATION_GUIDANCE,
    TOOL_WEIGHT_GUIDANCE,
    ConversationContext,
    GenericContentFormatter,
    OutgoingMessage,
    PojoResponseHandler,
    PreparedConversation,
    StringResponseHandler,
    TurnRole,
)
from parlour.runtime import blocks as b
from parlour.runtime.blocks import TextBlock, ToolDefinitionBlock
from parlour.runtime.errors import IllegalStateError
from parlour.runtime.snapshots import (
    ConversationPersistenceSnapshot,
    ObjectiveSlot,
    decode_snapshot,
    encode_snapshot,
)

LEGEND_MARKER = "keys beginning with @"


class Answer(msgspec.Struct):
    value: int


class Settings(msgspec.Struct):
    tone: str
    limit: int


def prepare(c: ConversationContext) -> PreparedConversation:
    return c.prepare_messages_for_llm(GenericContentFormatter(), thinking_active=False)


def restore(c: ConversationContext) -> ConversationContext:
    data = encode_snapshot(c.to_snapshot())
    return decode_snapshot(data, c.conversation_id or "").to_conversation()


def structured_ask(text: str = "give me the number") -> OutgoingMessage:
    return OutgoingMessage(text, response_handler=PojoResponseHandler(Answer))


@pytest.fixture
def errors() -> Iterator[list[Any]]:
    """Every error-level loguru record parlour writes during the test."""
    records: list[Any] = []
    logger.enable("parlour")
    sink = logger.add(lambda m: records.append(m.record), level="ERROR")
    yield records
    logger.remove(sink)
    logger.disable("parlour")


def test_a_reput_keeps_the_slot_position() -> None:
    c = ConversationContext()
    c.put_main_objective("task", "FIRST")
    c.put_main_objective("extra", "EXTRA")
    c.put_main_objective("task", "OBJ")
    text = prepare(c).system_text
    assert "FIRST" not in text
    assert text.index("OBJ") < text.index("EXTRA")


def test_keys_never_reach_the_wire() -> None:
    c = ConversationContext()
    c.put_main_objective("KEY-MARKER-77", "the value")
    prepared = prepare(c)
    assert "KEY-MARKER-77" not in prepared.system_text
    assert "the value" in prepared.system_text


def test_empty_values_create_no_slot_and_the_map_is_returned_as_a_copy() -> None:
    c = ConversationContext()
    c.put_main_objective("k", "")
    c.put_main_objective("k", None)
    assert not c.has_main_objective("k")
    c.put_main_objective("a", "A")
    copy = c.get_main_objective()
    copy["b"] = TextBlock(text="B")
    del copy["a"]
    assert list(c.get_main_objective()) == ["a"]


def test_a_struct_slot_renders_as_json() -> None:
    c = ConversationContext()
    c.put_main_objective("settings", Settings(tone="dry", limit=3))
    assert json.loads(prepare(c).system_text) == {"tone": "dry", "limit": 3}


def test_a_nuke_before_the_render_leaves_nothing_to_reseed() -> None:
    c = ConversationContext()
    c.put_main_objective("task", "TASK")
    c.nuke_main_objective()
    c.add_message(OutgoingMessage("hi", response_handler=StringResponseHandler()))
    assert not prepare(c).has_system_text()


def test_the_legend_follows_the_contract_even_after_a_nuke() -> None:
    c = ConversationContext()
    c.put_main_objective("task", "TASK-MARKER")
    c.nuke_main_objective()
    c.add_message(structured_ask())
    text = prepare(c).system_text
    assert "TASK-MARKER" not in text
    assert LEGEND_MARKER in text


def test_a_structured_ask_brings_the_legend_into_the_head() -> None:
    c = ConversationContext()
    c.add_message(structured_ask())
    prepared = prepare(c)
    assert prepared.has_system_text()
    assert c.has_main_objective("legend")
    assert LEGEND_MARKER in prepared.system_text


def test_plain_prose_never_carries_the_legend() -> None:
    c = ConversationContext()
    c.add_message(OutgoingMessage("hi", response_handler=StringResponseHandler()))
    for _ in range(2):
        prepared = prepare(c)
        assert LEGEND_MARKER not in prepared.system_text
        assert all(LEGEND_MARKER not in m.raw_content for m in c.messages)
    assert not c.has_main_objective("legend")


def test_a_structured_ask_after_the_freeze_brings_the_legend_as_one_message() -> None:
    c = ConversationContext()
    c.add_message(OutgoingMessage("hi", response_handler=StringResponseHandler()))
    first = prepare(c)
    c.add_message(structured_ask())
    prepared = prepare(c)
    assert len(c.messages) == 3
    assert SCHEMA_NOTATION_GUIDANCE in c.messages[-1].raw_content
    assert c.messages[-1].app_authored
    assert prepared.system_text == first.system_text
    prepare(c)
    assert len(c.messages) == 3


def test_the_head_is_byte_identical_after_divergent_puts(errors: list[Any]) -> None:
    c = ConversationContext()
    c.put_main_objective("task", "OBJ")
    first = prepare(c).system_text
    c.put_main_objective("task", "DIVERGENT")
    c.put_main_objective("brand_new", "NEW")
    assert prepare(c).system_text == first
    assert not c.has_main_objective("brand_new")


def test_a_divergent_put_after_the_freeze_is_logged_with_a_stack(errors: list[Any]) -> None:
    c = ConversationContext()
    c.put_main_objective("task", "OBJ")
    prepare(c)
    c.put_main_objective("task", "DIVERGENT")  # no exception reaches us
    assert all(r["level"].name == "ERROR" for r in errors)
    named = [r for r in errors if 'put_main_objective("task")' in r["message"]]
    assert len(named) == 1
    assert "ignored" in named[0]["message"]
    carrying = [r for r in errors if r["exception"] is not None]
    assert len(carrying) == 1
    exc = carrying[0]["exception"]
    assert exc.type is IllegalStateError
    assert 'put_main_objective("task")' in str(exc.value)
    assert exc.traceback is not None
    frames = []
    tb = exc.traceback
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "test_a_divergent_put_after_the_freeze_is_logged_with_a_stack" in frames


def test_an_identical_reput_after_the_freeze_is_silent(errors: list[Any]) -> None:
    c = ConversationContext()
    c.put_main_objective("task", "OBJ")
    first = prepare(c).system_text
    c.put_main_objective("task", "OBJ")
    c.put_main_objective("task", TextBlock(text="OBJ"))
    assert errors == []
    assert prepare(c).system_text == first


def test_an_equal_struct_reput_after_the_freeze_is_silent(errors: list[Any]) -> None:
    c = ConversationContext()
    c.put_main_objective("settings", Settings(tone="dry", limit=3))
    prepare(c)
    c.put_main_objective("settings", Settings(tone="dry", limit=3))
    assert errors == []
    c.put_main_objective("settings", Settings(tone="dry", limit=4))
    assert errors != []


def test_a_nuke_after_the_freeze_is_logged_and_ignored(errors: list[Any]) -> None:
    c = ConversationContext()
    c.put_main_objective("task", "OBJ")
    first = prepare(c).system_text
    c.nuke_main_objective()
    assert any("nuke_main_objective()" in r["message"] for r in errors)
    assert any(r["exception"] is not None for r in errors)
    assert prepare(c).system_text == first


def test_the_freeze_is_per_instance() -> None:
    c = ConversationContext("c-52")
    c.put_main_objective("task", "ORIGINAL")
    prepare(c)
    restored = restore(c)
    assert not restored.is_frozen()
    restored.put_main_objective("task", "REVISED-AFTER-RESTORE")
    text = prepare(restored).system_text
    assert "REVISED-AFTER-RESTORE" in text
    assert "ORIGINAL" not in text


def test_the_snapshot_records_no_freeze() -> None:
    c = ConversationContext("c-53")
    c.put_main_objective("task", "OBJ")
    prepare(c)
    raw = json.loads(encode_snapshot(c.to_snapshot()))
    assert not [k for k in raw if "froz" in k.lower()]


def test_a_restored_legend_heals_to_the_current_text_in_place() -> None:
    snapshot = ConversationPersistenceSnapshot(
        conversation_id="c-54",
        created_at=ConversationContext().created_at,
        objective=[
            ObjectiveSlot(key="task", block=TextBlock(text="TASK")),
            ObjectiveSlot(key="legend", block=TextBlock(text="a stale legend")),
            ObjectiveSlot(key="extra", block=TextBlock(text="EXTRA")),
        ],
    )
    c = snapshot.to_conversation()
    c.add_message(structured_ask())
    text = prepare(c).system_text
    assert list(c.get_main_objective()) == ["task", "legend", "extra"]
    assert c.get_main_objective()["legend"] == TextBlock(text=SCHEMA_NOTATION_GUIDANCE)
    assert "stale" not in text


def test_restored_tool_weights_heal_to_the_current_guidance() -> None:
    snapshot = ConversationPersistenceSnapshot(
        conversation_id="c-55",
        created_at=ConversationContext().created_at,
        objective=[
            ObjectiveSlot(key="toolWeights", block=TextBlock(text="Available tools: (old)")),
            ObjectiveSlot(key="tool:x", block=ToolDefinitionBlock(name="x", description="d")),
        ],
    )
    c = snapshot.to_conversation()
    text = prepare(c).system_text
    assert c.get_main_objective()["toolWeights"] == TextBlock(text=TOOL_WEIGHT_GUIDANCE)
    assert list(c.get_main_objective()) == ["toolWeights", "tool:x"]
    assert "(old)" not in text


def test_a_round_trip_keeps_the_keys_in_order() -> None:
    c = ConversationContext("c-56")
    for key in ["zeta", "alpha", "mid"]:
        c.put_main_objective(key, key.upper())
    c.put_main_objective("settings", Settings(tone="dry", limit=1))
    c.add_tool(ToolDefinitionBlock(name="t", description="d"))
    c.add_message(structured_ask())
    prepare(c)
    restored = restore(c)
    assert list(restored.get_main_objective()) == list(c.get_main_objective())
    assert restored.get_main_objective()["settings"] == c.get_main_objective()["settings"]


def test_a_legacy_anonymous_objective_restores_under_generated_keys() -> None:
    legacy = {
        "conversation_id": "c-57",
        "created_at": "2025-01-01T00:00:00Z",
        "main_objective": [
            {"type": "text", "text": "OBJ"},
            {"type": "tool_definition", "name": "legacy_tool", "description": "old"},
        ],
    }
    snapshot = decode_snapshot(json.dumps(legacy).encode(), "c-57")
    c = snapshot.to_conversation()
    prepared = prepare(c)
    assert "OBJ" in prepared.system_text
    assert c.get_main_objective()["objective-0"] == TextBlock(text="OBJ")
    assert prepared.tool_definitions[0].name == "legacy_tool"


def test_a_declared_but_unrendered_tool_lands_in_the_restored_head() -> None:
    c = ConversationContext("c-188")
    c.add_tool(ToolDefinitionBlock(name="never_rendered", description="d"))
    restored = restore(c)
    assert restored.get_main_objective() == {}
    prepare(restored)
    assert list(restored.get_main_objective()) == ["toolWeights", "tool:never_rendered"]


def test_a_restored_head_takes_new_tools_in_the_head() -> None:
    # a restored instance composes freely until its own first render
    c = ConversationContext("c-191")
    x = ToolDefinitionBlock(name="x", description="d")
    c.add_tool(x)
    prepare(c)
    restored = restore(c)
    restored.add_tools([x, ToolDefinitionBlock(name="y", description="d")])
    prepare(restored)
    assert restored.has_main_objective("tool:y")
    assert restored.messages == []


def test_a_frozen_heads_stored_slots_are_the_same_slots_in_a_fresh_list() -> None:
    """Once frozen the head cannot change, so each snapshot gets the very slot objects of the
    last one (a save tells by identity that they are as they were), in a list of its own."""
    c = ConversationContext("c-slots")
    c.put_main_objective("task", "TASK")
    c.add_tool(ToolDefinitionBlock(name="x", description="d"))
    before = c.to_snapshot().objective
    prepare(c)
    first, second, third = (c.to_snapshot().objective for _ in range(3))
    assert [s.key for s in first] == ["task", "toolWeights", "tool:x"]
    assert [s.key for s in before] == ["task"]
    assert all(x is y is z for x, y, z in zip(first, second, third, strict=True))
    second.clear()  # a snapshot's own list
    assert second is not third and c.to_snapshot().objective == third == first


# -- properties ------------------------------------------------------------------------------

keys = st.sampled_from(["task", "extra", "style", "scope", "k5"])
values = st.text(min_size=1, max_size=12)


@given(st.lists(st.tuples(keys, values), max_size=30))
def test_property_a_reput_never_reorders(puts: list[tuple[str, str]]) -> None:
    c = ConversationContext()
    first_seen: list[str] = []
    for key, value in puts:
        c.put_main_objective(key, value)
        if key not in first_seen:
            first_seen.append(key)
    assert list(c.get_main_objective()) == first_seen
    last = dict(puts)
    assert {k: b.text for k, b in c.get_main_objective().items()} == last  # type: ignore[union-attr]


operations = st.one_of(
    st.tuples(st.just("put"), keys, st.one_of(values, st.none())),
    st.tuples(st.just("struct"), keys, st.integers()),
    st.tuples(st.just("nuke"), st.just(""), st.none()),
)


@given(st.lists(st.tuples(keys, values), max_size=6), st.lists(operations, max_size=20))
def test_property_nothing_after_the_freeze_moves_the_system_text(
    before: list[tuple[str, str]], after: list[tuple[str, str, Any]]
) -> None:
    logger.disable("parlour")  # the loud no-ops are expected here
    c = ConversationContext()
    for key, value in before:
        c.put_main_objective(key, value)
    first = prepare(c).system_text
    for op, key, value in after:
        if op == "nuke":
            c.nuke_main_objective()
        elif op == "struct":
            c.put_main_objective(key, Settings(tone="x", limit=value))
        else:
            c.put_main_objective(key, value)
        assert prepare(c).system_text == first


slot_values = st.one_of(
    values,
    st.builds(Settings, tone=values, limit=st.integers()),
    st.builds(ToolDefinitionBlock, name=values, description=values, schema_json=st.none() | values),
)


@given(st.lists(st.tuples(keys, slot_values), max_size=12), st.booleans())
def test_property_a_snapshot_keeps_the_objective_slot_for_slot(
    puts: list[tuple[str, object]], rendered: bool
) -> None:
    # keys in order, and each slot renders the same after the round trip
    c = ConversationContext("c-prop")
    for key, value in puts:
        c.put_main_objective(key, value)
    if rendered:
        prepare(c)
    restored = restore(c)
    assert restored.get_main_objective() == c.get_main_objective()
    assert prepare(restored).system_text == prepare(c).system_text


def test_the_objective_is_system_text_and_never_a_turn() -> None:
    c = ConversationContext("c1")
    c.put_main_objective("task", "OBJECTIVE-MARKER do things")
    c.add_message(OutgoingMessage("hi", role="assistant"))
    c.add_user_message("question")
    prepared = c.prepare_messages_for_llm()
    assert "OBJECTIVE-MARKER" in prepared.system_text
    assert [t.role for t in prepared.turns] == [TurnRole.ASSISTANT, TurnRole.USER]
    assert all(
        "OBJECTIVE-MARKER" not in getattr(blk, "text", "")
        for t in prepared.turns
        for blk in t.blocks
    )


def test_a_reput_keeps_its_position_and_empty_values_make_no_slot() -> None:
    c = ConversationContext("c1")
    c.put_main_objective("task", "FIRST")
    c.put_main_objective("extra", "EXTRA")
    c.put_main_objective("task", "OBJ")
    c.put_main_objective("k", "")
    c.put_main_objective("k", None)
    assert not c.has_main_objective("k")
    copy = c.get_main_objective()
    copy["injected"] = b.TextBlock(text="x")
    assert not c.has_main_objective("injected")
    system = c.prepare_messages_for_llm().system_text
    assert "FIRST" not in system and system.index("OBJ") < system.index("EXTRA")
