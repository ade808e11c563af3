"""What a render hands a client: the tools it announced, head first, a later one winning."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from parlour.runtime import PreparedConversation, Turn, TurnRole
from parlour.runtime.blocks import ContentBlock, TextBlock, ToolDefinitionBlock, ToolUseBlock

_DEFINITIONS = [
    ToolDefinitionBlock(name=name, description=f"{name}, take {take}")
    for name in ("a", "b", "c")
    for take in (1, 2)
]
_BLOCKS = st.sampled_from(
    [*_DEFINITIONS, TextBlock(text="x"), ToolUseBlock(id="u1", name="a", input_json="{}")]
)
_TURNS = st.builds(Turn, role=st.sampled_from(TurnRole), blocks=st.lists(_BLOCKS, max_size=3))


def _model_tools(prepared: PreparedConversation) -> list[ToolDefinitionBlock]:
    by_name = {d.name: d for d in prepared.tool_definitions}
    for turn in prepared.turns:
        for block in turn.blocks:
            if isinstance(block, ToolDefinitionBlock):
                by_name[block.name] = block
    return list(by_name.values())


@given(st.lists(st.sampled_from(_DEFINITIONS), max_size=3), st.lists(_TURNS, max_size=6))
def test_property_every_announced_tool_once_by_name_head_first_a_later_one_winning(
    head: list[ToolDefinitionBlock], turns: list[Turn]
) -> None:
    prepared = PreparedConversation(system_text="", turns=turns, tool_definitions=head)
    assert prepared.all_tool_definitions() == _model_tools(prepared)
    blocks: list[ContentBlock] = [b for t in turns for b in t.blocks]
    assert prepared.all_blocks() == blocks
