"""The prefix-stability check: catch the silent cache-bust before the bill does.

A provider's prompt cache pays only while each call's prefix repeats the previous call's.
``PrefixMonitor`` records, per conversation, every slot of the cacheable prefix and logs a
warning naming the first slot that differs from the previous call where it should not have.
The slots, in wire order: for a dialect with native tools, the ``tools`` array sent (head
and late tools alike: Anthropic caches tools first, then system, then messages, and OpenAI
needs identical tools), then the system text, then each turn; for a text dialect the palette
is part of the system text, and a late tool is a new turn at the end, so the prefix holds.
The previous call's last turn is not compared: response instructions ride it at render and
leave it afterwards, by design.

A record keeps the rendered values themselves rather than hashes of them: turns are
memoized on their messages and shared between renders, so the check is one comparison of
two lists of the same objects (identity first, at C speed) and does not grow into
re-encoding the whole conversation on every call; only a prefix that did change is walked
to name the slot.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from loguru import logger

from .._prepared import PreparedConversation, Turn
from ..blocks import ToolDefinitionBlock


class Prefix(NamedTuple):
    """One call's cacheable prefix: the tools array sent (None for a text dialect), the
    system text, and the turns."""

    tools: list[ToolDefinitionBlock] | None
    system: str
    turns: list[Turn]

    @classmethod
    def of(cls, prepared: PreparedConversation, native_tools: bool = False) -> Prefix:
        tools = prepared.all_tool_definitions() if native_tools else None
        return cls(tools, prepared.system_text, list(prepared.turns))  # a copy: it is kept


def first_divergence(previous: Prefix, current: Prefix) -> str | None:
    """The name of the first slot of ``previous`` (its last turn excluded) that ``current``
    does not repeat (``tools``, ``system``, ``turn N (role)``, a turn gone with
    `` (dropped)``), or None when the prefix held."""
    if previous.tools is not None and current.tools != previous.tools:
        return "tools"
    if previous.tools is None and current.tools is not None:
        return "system"  # the slots no longer line up from the first one
    if current.system != previous.system:
        return "system"
    stable = max(len(previous.turns) - 1, 0)
    if previous.turns[:stable] == current.turns[:stable]:  # mostly the very same Turns
        return None
    return _diverged_turn(previous.turns[:stable], current.turns)


def _diverged_turn(previous: list[Turn], current: list[Turn]) -> str | None:
    """The first of ``previous`` that ``current`` does not repeat (its role and blocks: the
    cache flag is no content), or None."""
    for at, turn in enumerate(previous):
        name = f"turn {at + 1} ({turn.role.value})"
        if at >= len(current):
            return f"{name} (dropped)"
        if current[at].role is not turn.role or current[at].blocks != turn.blocks:
            return name
    return None


class PrefixMonitor:
    """Per-conversation prefix records, bounded to the ``capacity`` most recent conversations.

    Thread-safety: each conversation is reached by one owner at a time, so its record is
    never written concurrently; the bounded map itself is only touched by single dict
    operations.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._records: OrderedDict[str, Prefix] = OrderedDict()

    def check(
        self,
        model_id: str,
        conversation_id: str | None,
        prepared: PreparedConversation,
        native_tools: bool = False,
    ) -> str | None:
        """Record this call's prefix; warn and return the first differing slot's name
        (``tools``, ``system``, or ``turn N (role)``)."""
        if conversation_id is None:
            return None
        current = Prefix.of(prepared, native_tools)
        previous = self._records.pop(conversation_id, None)
        self._records[conversation_id] = current
        while len(self._records) > self._capacity:
            self._records.popitem(last=False)
        if previous is None:
            return None
        diverged = first_divergence(previous, current)
        if diverged is not None:
            logger.bind(conversation_id=conversation_id).warning(
                "Cacheable prefix of conversation {} on {} changed at {} since the previous "
                "call: the provider cache misses from there on.",
                conversation_id,
                model_id,
                diverged,
            )
        return diverged
