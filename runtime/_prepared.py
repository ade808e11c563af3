"""What a render hands a provider client: the system text and the turns, separately."""

from __future__ import annotations

import msgspec

from parlour.runtime._roles import TurnRole
from parlour.runtime.blocks import ContentBlock, SkillBlock, ToolDefinitionBlock


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    """One wire turn: a role (user or assistant, nothing else), its blocks, its cache flag."""

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
        for turn in self.turns:
            for block in turn.blocks:
                if isinstance(block, ToolDefinitionBlock):
                    by_name[block.name] = block
        return list(by_name.values())
