"""Tools declared, reconciled at render."""

from __future__ import annotations

from parlour.runtime import (
    TOOL_ANNOUNCEMENT,
    ConversationContext,
    GenericContentFormatter,
    NativeToolsFormatter,
    OutgoingMessage,
    PreparedConversation,
)
from parlour.runtime.blocks import TextBlock, ToolDefinitionBlock, render_text
from parlour.runtime.snapshots import decode_snapshot, encode_snapshot


def prepare(c: ConversationContext) -> PreparedConversation:
    return c.prepare_messages_for_llm(GenericContentFormatter(), thinking_active=False)


def tool(
    name: str, description: str = "does things", schema: str | None = "{}"
) -> ToolDefinitionBlock:
    return ToolDefinitionBlock(name=name, description=description, schema_json=schema)


class CountingTool:
    """A DeclaredTool that counts its conversions."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0

    def definition(self) -> ToolDefinitionBlock:
        self.calls += 1
        return tool(self.name)


def test_a_definition_is_its_own_declared_tool() -> None:
    t = tool("search_documents", "Search…")
    assert t.definition() is t


def test_a_declared_name_is_never_redefined() -> None:
    c = ConversationContext()
    c.add_tool(tool("tool", "original"))
    c.add_tool(tool("tool", "drifted"))
    assert prepare(c).tool_definitions[0].description == "original"


def test_add_tools_keeps_the_first_declaration_of_each_name_in_order() -> None:
    a, b, a2 = tool("a", schema='{"v":1}'), tool("b"), tool("a", schema='{"v":2}')
    c = ConversationContext()
    c.add_tools([a, b, a2])
    assert list(c.declared_tools()) == ["a", "b"]
    assert c.declared_tools()["a"] is a


def test_declaring_a_taken_name_again_takes_nothing_and_checks_nothing() -> None:
    """A turn declares its agent's tools on every turn: a name already declared keeps its
    first declaration, and what comes under it again is not looked at (not even a
    definition that could not be stored)."""
    first = tool("lookup")
    c = ConversationContext()
    c.add_tool(first)
    c.add_tool(ToolDefinitionBlock(name="lookup", description="\ud800 a lone surrogate"))
    assert c.declared_tools()["lookup"] is first
    assert c.declared_tool_definitions() == [first]


def test_definitions_are_the_same_blocks_each_time_and_later_ones_are_converted() -> None:
    counting, later = CountingTool("probe"), CountingTool("later")
    c = ConversationContext()
    c.add_tools([tool("plain"), counting])
    first = c.declared_tool_definitions()
    again = c.declared_tool_definitions()
    assert first == again and first is not again
    assert all(x is y for x, y in zip(first, again, strict=True))
    again.clear()  # a caller's copy: the next call is whole
    c.add_tool(later)
    assert [t.name for t in c.declared_tool_definitions()] == ["plain", "probe", "later"]
    assert (counting.calls, later.calls) == (1, 1)


def test_declaring_announces_nothing_before_a_render() -> None:
    c = ConversationContext()
    c.add_tool(tool("x"))
    assert c.announced_tools() == {}
    assert c.get_main_objective() == {}


def test_conversion_is_lazy_and_happens_once() -> None:
    counting = CountingTool("probe")
    c = ConversationContext()
    c.add_tool(counting)
    assert counting.calls == 0
    for _ in range(3):
        prepare(c)
    assert counting.calls == 1


def test_the_first_render_puts_the_palette_in_the_head() -> None:
    probe = tool("probe_tool")
    c = ConversationContext()
    c.add_tool(probe)
    c.add_user_message("hello")
    prepared = prepare(c)
    assert prepared.tool_definitions == [probe]
    assert c.announced_tools()["probe_tool"] == probe
    assert len(c.messages) == 1


def test_the_tool_weight_guidance_precedes_the_palette() -> None:
    c = ConversationContext()
    c.put_main_objective("task", "Do the task.")
    c.add_tool(tool("probe_tool"))
    c.add_user_message("hello")
    prepared = prepare(c)
    keys = list(c.get_main_objective())
    assert keys.index("toolWeights") + 1 == keys.index("tool:probe_tool")
    assert "Available tools:" in prepared.system_text
    guidance_at = prepared.system_text.index("Available tools:")
    assert "[type, weight: N]" in prepared.system_text[guidance_at:]


def test_a_tool_less_conversation_has_no_tool_guidance() -> None:
    c = ConversationContext()
    c.put_main_objective("task", "Do the task.")
    c.add_user_message("hello")
    prepared = prepare(c)
    assert "Available tools:" not in prepared.system_text
    assert not c.has_main_objective("toolWeights")


def test_a_tool_declared_after_the_freeze_is_announced_in_the_stream() -> None:
    first, second = tool("first_tool"), tool("second_tool")
    c = ConversationContext()
    c.add_tool(first)
    c.add_user_message("hello")
    prepare(c)
    c.add_tool(second)
    prepared = prepare(c)
    assert len(c.messages) == 2
    announcement = c.messages[-1]
    assert announcement.role == "user"
    assert TOOL_ANNOUNCEMENT in announcement.raw_content
    assert [b for b in announcement.blocks if isinstance(b, ToolDefinitionBlock)] == [second]
    assert prepared.tool_definitions == [first]
    assert prepared.all_tool_definitions() == [first, second]


def test_reconciliation_is_idempotent() -> None:
    c = ConversationContext()
    c.add_tool(tool("first_tool"))
    prepare(c)
    c.add_tool(tool("second_tool"))
    prepare(c)
    count = len(c.messages)
    prepare(c)
    assert len(c.messages) == count


def test_all_tool_definitions_lists_each_name_once_and_the_later_wins() -> None:
    c = ConversationContext()
    c.add_tool(tool("dup", "head version"))
    c.add_tool(tool("other"))
    prepare(c)
    c.add_message(OutgoingMessage(blocks=[TextBlock(text="again"), tool("dup", "stream version")]))
    c.add_tool(tool("late"))
    definitions = prepare(c).all_tool_definitions()
    assert [d.name for d in definitions] == ["dup", "other", "late"]
    assert definitions[0].description == "stream version"


def test_redeclaring_an_announced_tool_appends_nothing() -> None:
    c = ConversationContext()
    c.add_tool(tool("x"))
    prepare(c)
    c.add_tool(tool("x", "other description"))
    prepare(c)
    assert c.messages == []


def test_announced_tools_derive_from_content_after_a_restore() -> None:
    c = ConversationContext("c-1")
    c.add_tool(tool("x"))
    prepare(c)
    snapshot = c.to_snapshot()
    snapshot.declared_tools = []  # nothing declared: only the content knows about x
    restored = decode_snapshot(encode_snapshot(snapshot), "c-1").to_conversation()
    assert list(restored.announced_tools()) == ["x"]
    assert restored.declared_tools() == {}


def test_the_text_encoder_renders_a_definition() -> None:
    assert render_text(tool("n", "d", "{}")) == "n: d\n  Input parameters: {}"
    assert render_text(tool("n", "d", None)) == "n: d"


def test_a_native_dialect_gets_the_palette_typed_and_not_in_the_system_text() -> None:
    # the channel contract: how a definition reaches the provider is the client's dialect
    c = ConversationContext()
    c.put_main_objective("task", "Do the task.")
    c.add_tool(tool("secret_tool_name"))
    prepared = c.prepare_messages_for_llm(NativeToolsFormatter(), thinking_active=False)
    assert prepared.tool_definitions == [tool("secret_tool_name")]
    assert "secret_tool_name" not in prepared.system_text
    assert "Do the task." in prepared.system_text


def test_a_late_tool_arrives_with_its_guidance_when_the_head_had_none() -> None:
    # S:Objective map: a companion first appearing after the freeze is a stream message
    c = ConversationContext()
    c.add_user_message("hello")
    first = prepare(c).system_text
    c.add_tool(tool("late"))
    prepared = prepare(c)
    assert prepared.system_text == first
    assert "Available tools:" in c.messages[-1].raw_content
    c.add_tool(tool("later"))
    prepare(c)
    assert "Available tools:" not in c.messages[-1].raw_content
