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

A slot keeps the rendered value itself rather than a hash of it: blocks are frozen and shared
between renders, so comparing is mostly identity checks, and the check does not grow into
re-encoding the whole conversation on every call.
"""

from __future__ import annotations

from collections import OrderedDict

from loguru import logger

from parlour.runtime._prepared import PreparedConversation

# (kind, what names it, the rendered value): the name is spelled out only for a divergence
Slot = tuple[str, object, object]


def prefix_slots(prepared: PreparedConversation, native_tools: bool = False) -> list[Slot]:
    """The slots of ``prepared``'s prefix, in wire order (see the module docstring)."""
    slots: list[Slot] = []
    if native_tools:
        slots.append(("tools", None, prepared.all_tool_definitions()))
    slots.append(("system", None, prepared.system_text))
    slots += [("turn", turn.role, turn.blocks) for turn in prepared.turns]
    return slots


def _name(slots: list[Slot], at: int) -> str:
    kind, key, _ = slots[at]
    if kind != "turn":
        return kind
    first_turn = next(i for i, slot in enumerate(slots) if slot[0] == "turn")
    return f"turn {at - first_turn + 1} ({getattr(key, 'value', key)})"


def first_divergence(previous: list[Slot], current: list[Slot]) -> str | None:
    """The name of the first slot of ``previous`` (its last turn excluded) that ``current``
    does not repeat, or None when the prefix held."""
    stable = len(previous) - 1 if previous and previous[-1][0] == "turn" else len(previous)
    for at in range(stable):
        if at >= len(current):
            return f"{_name(previous, at)} (dropped)"
        if current[at] != previous[at]:
            return _name(previous, at)
    return None


class PrefixMonitor:
    """Per-conversation prefix records, bounded to the ``capacity`` most recent conversations.

    Thread-safety: each conversation is reached by one owner at a time, so its record is
    never written concurrently; the bounded map itself is only touched by single dict
    operations.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._records: OrderedDict[str, list[Slot]] = OrderedDict()

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
        current = prefix_slots(prepared, native_tools)
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
