"""How a conversation's messages are cut for compaction, and which must stay together.

An exchange runs from an outgoing (user-side) message through the model's final answer,
tool calls and their results included. Exchanges are then merged wherever a tool call and
its result would otherwise fall on two sides of a cut, so no cut ever separates a pair,
whatever the input looks like. ``pair_closure`` grows a set of kept messages until every
tool call or result in it has its partner kept too; its complement is then closed as
well, so collapsing the complement never leaves an orphan on either side.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from .._guidance import (
    SCHEMA_NOTATION_GUIDANCE,
    TOOL_ANNOUNCEMENT,
    TOOL_WEIGHT_GUIDANCE,
)
from .._messages import Message
from ..blocks import (
    SkillBlock,
    TextBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = [
    "exchanges",
    "holders",
    "is_outgoing",
    "is_protected",
    "kept_spans",
    "latest_outgoing",
    "pair_closure",
    "safe_position",
]

_FRAMEWORK_TEXTS = frozenset({SCHEMA_NOTATION_GUIDANCE, TOOL_ANNOUNCEMENT, TOOL_WEIGHT_GUIDANCE})


def is_outgoing(message: Message) -> bool:
    """A message of the application's side (the user channel)."""
    return message.role.lower() == "user"


def is_protected(message: Message) -> bool:
    """Kept word for word at every level: marked non-compactable, or one of the framework's
    own announcements in the stream (a late skill, late tools, the legend), which the render
    would otherwise say again, or move into the frozen head."""
    if not message.compactable:
        return True
    return any(
        isinstance(b, SkillBlock | ToolDefinitionBlock)
        or (isinstance(b, TextBlock) and b.text in _FRAMEWORK_TEXTS)
        for b in message.blocks
    )


def _is_final_answer(message: Message) -> bool:
    return not is_outgoing(message) and not any(isinstance(b, ToolUseBlock) for b in message.blocks)


def latest_outgoing(messages: Sequence[Message]) -> int | None:
    """The index of the most recent outgoing message, or None when there is none."""
    for index in range(len(messages) - 1, -1, -1):
        if is_outgoing(messages[index]):
            return index
    return None


def tool_ids(message: Message) -> set[str]:
    """Every tool call id and answered call id the message holds."""
    ids: set[str] = set()
    for block in message.blocks:
        if isinstance(block, ToolUseBlock):
            ids.add(block.id)
        elif isinstance(block, ToolResultBlock):
            ids.add(block.tool_use_id)
    return ids


def holders(messages: Sequence[Message]) -> dict[str, list[int]]:
    """Each tool id to the indices of the messages holding its call or its result."""
    found: dict[str, list[int]] = defaultdict(list)
    for index, message in enumerate(messages):
        for tool_id in tool_ids(message):
            found[tool_id].append(index)
    return found


def exchanges(messages: Sequence[Message]) -> list[range]:
    """The messages cut into exchanges, oldest first, no tool pair across a cut."""
    starts = [0] + [
        i
        for i in range(1, len(messages))
        if _is_final_answer(messages[i - 1]) and is_outgoing(messages[i])
    ]
    if not messages:
        return []
    owner = [0] * len(messages)
    for n, start in enumerate(starts):
        for i in range(start, starts[n + 1] if n + 1 < len(starts) else len(messages)):
            owner[i] = n
    reach = list(range(len(starts)))
    for indices in holders(messages).values():
        first, last = owner[min(indices)], owner[max(indices)]
        reach[first] = max(reach[first], last)
    return _merged(starts, reach, len(messages))


def _merged(starts: list[int], reach: list[int], total: int) -> list[range]:
    merged: list[range] = []
    n = 0
    while n < len(starts):
        end = reach[n]
        m = n
        while m <= end:
            end = max(end, reach[m])
            m += 1
        stop = starts[m] if m < len(starts) else total
        merged.append(range(starts[n], stop))
        n = m
    return merged


def pair_closure(
    messages: Sequence[Message],
    keep: Iterable[int],
    held: Mapping[str, list[int]] | None = None,
) -> set[int]:
    """``keep`` grown until every tool call or result in a kept message has its partner
    kept too (``held``: the ``holders`` of ``messages``, when already computed)."""
    held = holders(messages) if held is None else held
    closed = set(keep)
    pending = list(closed)
    while pending:
        index = pending.pop()
        for tool_id in tool_ids(messages[index]):
            for partner in held.get(tool_id, ()):
                if partner not in closed:
                    closed.add(partner)
                    pending.append(partner)
    return closed


def kept_spans(held: Mapping[str, list[int]], kept: set[int]) -> list[tuple[int, int]]:
    """The first and last kept holder of each tool id held by more than one kept message."""
    spans = []
    for indices in held.values():
        inside = [i for i in indices if i in kept]
        if len(inside) > 1:
            spans.append((min(inside), max(inside)))
    return spans


def safe_position(position: int, spans: Sequence[tuple[int, int]]) -> int:
    """The first index at or after ``position`` that does not fall between a kept tool call
    and its kept result (``kept_spans``), so an inserted summary never separates them."""
    moved = True
    while moved:
        moved = False
        for first, last in spans:
            if first < position <= last:
                position, moved = last + 1, True
    return position
