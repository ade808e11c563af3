"""Reconciliation: what a render adds so the model has been shown everything it needs.

The framework's two companions (the @-notation legend, once any turn uses the notation;
the tool-weight guidance, once any tool is announced) and the declared tools the model has
not been shown yet. Before the head freezes they join the head as framework slots; once it
is frozen they arrive as one app-authored user message at the end of the stream, so the
cached prefix never moves. Called by ``ConversationContext.prepare_messages_for_llm``.
"""

from __future__ import annotations

from ._guidance import (
    SCHEMA_NOTATION_GUIDANCE,
    TOOL_ANNOUNCEMENT,
    TOOL_WEIGHT_GUIDANCE,
)
from ._objective import LEGEND_KEY, TOOL_KEY_PREFIX, TOOL_WEIGHTS_KEY, ObjectiveMap
from ._render import Scan
from .blocks import ContentBlock, TextBlock, ToolDefinitionBlock

_LEGEND_BLOCK = TextBlock(text=SCHEMA_NOTATION_GUIDANCE)
_TOOL_WEIGHTS_BLOCK = TextBlock(text=TOOL_WEIGHT_GUIDANCE)
# the texts to look for, by whether the head lacks the legend and the tool-weight guidance
_TO_FIND = {
    (legend, weights): (SCHEMA_NOTATION_GUIDANCE,) * legend + (TOOL_WEIGHT_GUIDANCE,) * weights
    for legend in (False, True)
    for weights in (False, True)
}


def companions_to_find(head: ObjectiveMap) -> tuple[str, ...]:
    """The companion texts a render must look for in the stream: only a frozen head that
    lacks a companion needs to (every render asks: one of four tuples made once)."""
    if not head.frozen:
        return ()
    return _TO_FIND[LEGEND_KEY not in head, TOOL_WEIGHTS_KEY not in head]


def reconcile_head(head: ObjectiveMap, scan: Scan, pending: list[ToolDefinitionBlock]) -> None:
    """First render: the companions and the pending palette join the head, framework slots
    re-put in place so a restored conversation self-heals."""
    if scan.uses_notation:
        head.place(LEGEND_KEY, _LEGEND_BLOCK)
    if pending or head.has_tool_slots():
        head.place(TOOL_WEIGHTS_KEY, _TOOL_WEIGHTS_BLOCK, before_prefix=TOOL_KEY_PREFIX)
    for tool in pending:
        head.place(TOOL_KEY_PREFIX + tool.name, tool)


def stream_additions(
    head: ObjectiveMap, scan: Scan, pending: list[ToolDefinitionBlock]
) -> list[list[ContentBlock]]:
    """A frozen head: the blocks of each app-authored message the stream must gain, in order
    (the legend first, then the announcement of the pending tools); empty when none."""
    said = scan.companions
    messages: list[list[ContentBlock]] = []
    legend_missing = LEGEND_KEY not in head and SCHEMA_NOTATION_GUIDANCE not in said
    if scan.uses_notation and legend_missing:
        messages.append([_LEGEND_BLOCK])
    if pending:
        blocks: list[ContentBlock] = [TextBlock(text=TOOL_ANNOUNCEMENT)]
        if TOOL_WEIGHTS_KEY not in head and TOOL_WEIGHT_GUIDANCE not in said:
            blocks.append(_TOOL_WEIGHTS_BLOCK)
        messages.append([*blocks, *pending])
    return messages
