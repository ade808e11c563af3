"""What a render hands a provider client: the system text and the turns, separately."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain, compress
from operator import attrgetter
from typing import TypeVar

import msgspec

from ._roles import TurnRole
from .blocks import ContentBlock, SkillBlock, ToolDefinitionBlock

_B = TypeVar("_B")


class Turn(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One wire turn: a role (user or assistant, nothing else), its blocks, its cache flag.

    Untracked by the cycle collector (``gc=False``): it holds only blocks, so it closes no
    cycle, and every message of a live conversation keeps its turn (as it keeps its
    ``MessageSnapshot``, likewise untracked): a full collection then visits five objects
    per message instead of seven (the cold benchmark's collector share 15 -> 11%)."""

    role: TurnRole
    blocks: list[ContentBlock]
    cache: bool = False


class PreparedConversation(msgspec.Struct, frozen=True, kw_only=True):
    """The channel contract, made once: ``system_text`` is the only system content.

    ``tool_definitions`` is the palette announced in the head; stream announcements ride the
    turns as ``ToolDefinitionBlock``s, and ``all_tool_definitions()`` joins both.
    """

    system_text: str
    turns: list[Turn]
    cache_system: bool = True
    tool_definitions: list[ToolDefinitionBlock] = msgspec.field(default_factory=list)
    # skills admitted before the freeze: system content ahead of the objective
    skills: list[SkillBlock] = msgspec.field(default_factory=list)

    def has_system_text(self) -> bool:
        return bool(self.system_text)

    def all_tool_definitions(self) -> list[ToolDefinitionBlock]:
        """Every announced tool once by name: head palette first, then stream additions.

        A later announcement of the same name wins.
        """
        by_name = {d.name: d for d in self.tool_definitions}
        for block in of_kind(self.all_blocks(), ToolDefinitionBlock):
            by_name[block.name] = block
        return list(by_name.values())

    def all_blocks(self) -> list[ContentBlock]:
        """Every block of every turn, in order (a fresh list, gathered at C speed)."""
        return list(chain.from_iterable(map(_BLOCKS, self.turns)))


def of_kind(blocks: list[ContentBlock], kind: type[_B]) -> Iterator[_B]:
    """The blocks that are instances of ``kind``, in order.

    Each block's class is looked up once at C speed and ``isinstance`` asked only of the
    few distinct classes, so a long conversation costs no Python step per block.
    """
    classes = list(map(type, blocks))
    wanted = {cls for cls in set(classes) if issubclass(cls, kind)}
    if not wanted:
        return iter(())
    return compress(blocks, map(wanted.__contains__, classes))  # type: ignore[arg-type]


_BLOCKS = attrgetter("blocks")
