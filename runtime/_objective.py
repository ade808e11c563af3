"""The objective map: named slots whose values, in insertion order, are the system content.

Keys never reach the wire. A re-put keeps the slot's position; a nuke empties everything.
The map freezes at its conversation's first render: afterwards a put that renders the same
is silent and anything else is a loudly logged no-op, because it would invalidate the
provider's cached prefix.
"""

from __future__ import annotations

import sys
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
from loguru import logger

from ._validation import check_text, is_valid_text
from .blocks import (
    Block,
    ContentBlock,
    PojoBlock,
    TextBlock,
    ToolDefinitionBlock,
    check_block,
)
from .errors import IllegalStateError

LEGEND_KEY = "legend"
TOOL_WEIGHTS_KEY = "toolWeights"
TOOL_KEY_PREFIX = "tool:"


class ObjectiveSlot(msgspec.Struct, frozen=True, kw_only=True):
    """One slot of the objective map as a snapshot stores it."""

    key: str
    block: ContentBlock


def as_slot_block(value: object) -> ContentBlock | None:
    """The block a put stores: text as a TextBlock, a block as itself, anything else (a
    msgspec Struct, a dataclass, a dict) as a PojoBlock; None or "" stores nothing."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return TextBlock(text=value)
    if isinstance(value, TextBlock) and not value.text:
        return None
    if isinstance(value, Block):
        return value  # type: ignore[return-value]  # every Block subclass is a ContentBlock
    return PojoBlock(value=value)


class ObjectiveMap:
    """An insertion-ordered map of slots with the freeze. Single-flow, like its context.

    Args:
        render: the text a slot contributes to the system content, called as
            ``render(owner, block)``; the conversation's own pipeline, so the head and the
            turns render alike (and freeze-time equality means equal rendered form).
        owner: a weak reference to what ``render`` renders for (the conversation, which
            holds this map: a weak one leaves no cycle, and one object, where a bound
            method held weakly is eight).
    """

    __slots__ = (
        "_owner",
        "_render_of",
        "_rendered",
        "_slots",
        "_stored",
        "_tools",
        "changes",
        "frozen",
    )

    def __init__(self, render: Callable[[Any, ContentBlock], str], owner: weakref.ref[Any]) -> None:
        self._render_of, self._owner = render, owner
        self._slots: dict[str, ContentBlock] = {}
        self.frozen = False
        # system text per dialect (native tools or not); filled only once frozen, when the
        # map can no longer change, so a render never recomputes the head
        self._rendered: dict[bool, str] = {}
        self._tools: dict[str, ToolDefinitionBlock] | None = None  # likewise, the palette
        self._stored: tuple[ObjectiveSlot, ...] | None = None  # and the slots (``stored``)
        self.changes = 0  # moved by every change to the slots (a save's proof of none)

    def _render(self, block: ContentBlock) -> str:
        return self._render_of(self._owner(), block)

    def put(self, key: str, value: object) -> None:
        """Put ``value`` in slot ``key``, enforcing the freeze (see the module docstring).

        Raises:
            ValueError: the value could not be stored (a lone surrogate, nesting deeper
                than ``MAX_NESTING``, not encodable); the message names the slot. The map
                is left as it was, frozen or not.
        """
        if not isinstance(key, str) or not is_valid_text(key):
            check_text(key if isinstance(key, str) else repr(key), "an objective slot key")
            raise ValueError(f"An objective slot key is a str, not {type(key).__name__}")
        block = as_slot_block(value)
        if block is None:
            return
        check_block(block, f"objective slot {key!r}")
        if not self.frozen:
            self._slots[key] = block
            self.changes += 1
            return
        current = self._slots.get(key)
        if current is not None and self._render(current) == self._render(block):
            return
        loud_noop(f'put_main_objective("{key}")')

    def nuke(self) -> None:
        """Empty the map, framework slots included; after the freeze, a logged no-op."""
        if self.frozen:
            loud_noop("nuke_main_objective()")
            return
        self._slots.clear()
        self.changes += 1

    def place(self, key: str, block: ContentBlock, *, before_prefix: str | None = None) -> None:
        """A framework put before the freeze: in place when the key exists, else appended,
        or inserted ahead of the first key starting with ``before_prefix``."""
        self.changes += 1
        if key in self._slots or before_prefix is None:
            self._slots[key] = block
            return
        keys = list(self._slots)
        at = next((i for i, k in enumerate(keys) if k.startswith(before_prefix)), len(keys))
        items = list(self._slots.items())
        items.insert(at, (key, block))
        self._slots = dict(items)

    def freeze(self) -> None:
        self.frozen = True

    def system_text(self, native_tools: bool) -> str:
        """The values rendered in order; a native dialect's tool slots travel typed instead."""
        cached = self._rendered.get(native_tools)
        if cached is not None:
            return cached
        text = "\n\n".join(
            self._render(block)
            for block in self._slots.values()
            if not (native_tools and isinstance(block, ToolDefinitionBlock))
        )
        if self.frozen:
            self._rendered[native_tools] = text
        return text

    def stored(self) -> list[ObjectiveSlot]:
        """The slots in order, as a snapshot stores them (a fresh list; once frozen, of the
        same slot objects every time, so a save can tell by identity that they are as
        they were)."""
        if self._stored is not None:
            return list(self._stored)
        slots = [ObjectiveSlot(key=k, block=v) for k, v in self._slots.items()]
        if self.frozen:
            self._stored = tuple(slots)
        return slots

    def tool_definitions(self) -> list[ToolDefinitionBlock]:
        """The palette announced in the head, in slot order (a fresh list)."""
        return list(self.head_tools().values())

    def head_tools(self) -> dict[str, ToolDefinitionBlock]:
        """The head's palette by name; do not modify it (it is cached once frozen)."""
        if self._tools is not None:
            return self._tools
        tools = {b.name: b for b in self._slots.values() if isinstance(b, ToolDefinitionBlock)}
        if self.frozen:
            self._tools = tools
        return tools

    def holds_pojo(self) -> bool:
        """Whether a slot holds a ``PojoBlock`` (whose value may change in place)."""
        return PojoBlock in map(type, self._slots.values())

    def has_tool_slots(self) -> bool:
        return any(k.startswith(TOOL_KEY_PREFIX) for k in self._slots)

    def copy(self) -> dict[str, ContentBlock]:
        return dict(self._slots)

    def get(self, key: str) -> ContentBlock | None:
        return self._slots.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._slots

    def __iter__(self) -> Iterator[str]:
        return iter(self._slots)

    def __len__(self) -> int:
        return len(self._slots)


def loud_noop(attempt: str) -> None:
    """Log a refused head mutation: one record naming the call, one with the stack."""
    logger.error(
        "{} was ignored: the head is frozen after the first render, and changing it would "
        "invalidate the cached prefix. Compose before the first render, or say it in the "
        "conversation as a message.",
        attempt,
    )
    error = IllegalStateError(f"post-freeze head mutation: {attempt}")
    error = error.with_traceback(_caller_traceback())
    logger.opt(exception=error).error("The frozen head was left unchanged; the caller's stack:")


def _caller_traceback() -> types.TracebackType | None:
    """The current stack as a traceback, so the log names whoever tried the mutation."""
    tb: types.TracebackType | None = None
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None:
        tb = types.TracebackType(tb, frame, frame.f_lasti, frame.f_lineno)
        frame = frame.f_back
    return tb
