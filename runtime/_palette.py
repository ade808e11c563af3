"""The palette: the tools a seat declared and the skills it admitted, each once per name.

A declared tool is converted to its wire definition lazily, at the first render that needs
it, and only once (the definition replaces the declaration). Validation happens as a tool
or skill enters, so nothing stored can poison a later render. Held by
``ConversationContext``; not thread-safe (only the conversation's owner touches it).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Protocol

from ._messages import Message
from ._validation import check_text
from .blocks import SkillBlock, ToolDefinitionBlock, check_block


class DeclaredTool(Protocol):
    """A tool declared to a conversation; converted to its wire definition lazily, once.

    A ``ToolDefinitionBlock`` is its own DeclaredTool (``definition()`` returns itself).
    """

    @property
    def name(self) -> str: ...

    def definition(self) -> ToolDefinitionBlock: ...


class Palette:
    """Declared tools by name and admitted skills by name, in the order they came."""

    __slots__ = ("_converted", "_skills", "_tools", "changes")

    def __init__(self) -> None:
        self._tools: dict[str, DeclaredTool] = {}
        self._skills: dict[str, SkillBlock] = {}
        self._converted = True  # every declaration is its own definition already
        self.changes = 0  # moved by every tool or skill taken and every conversion

    def declare(self, tool: DeclaredTool) -> None:
        """Declare ``tool``; a name already declared is a no-op (nothing is checked: the
        tool is not taken), so a turn that declares its agent's tools again costs a lookup.

        Raises:
            ValueError: the tool's name, or the definition given, could not be stored.
        """
        name = tool.name
        if type(name) is str and name in self._tools:
            return
        defined = isinstance(tool, ToolDefinitionBlock)
        if defined:
            check_block(tool, f"tool definition {name!r}")
        else:
            check_text(name, "a declared tool's name")
        if self._tools.setdefault(name, tool) is tool:
            self.changes += 1
            if not defined:
                self._converted = False

    def tools(self) -> dict[str, DeclaredTool]:
        return dict(self._tools)

    def definitions(self) -> list[ToolDefinitionBlock]:
        if self._converted:  # each save asks: a copy of the values, the same blocks each time
            return list(self._tools.values())  # type: ignore[arg-type]
        definitions = [self.definition(name) for name in self._tools]
        self._converted = True  # only now: a conversion that raised leaves it False
        return definitions

    def definition(self, name: str) -> ToolDefinitionBlock:
        """The wire definition of tool ``name``, converting its declaration the first time.

        Raises:
            ValueError: the converted definition could not be stored.
        """
        # a definition is its own DeclaredTool: storing what the declaration produced makes
        # this the one and only conversion
        declared = self._tools[name]
        definition = declared.definition()
        if definition is not declared:
            check_block(definition, f"tool definition {name!r}")
            self.changes += 1
        self._tools[name] = definition
        return definition

    def pending(
        self, head: Mapping[str, object], stream: Container[str]
    ) -> list[ToolDefinitionBlock]:
        """The definitions of the declared tools shown neither in the head nor in the
        stream, in declaration order (converting them, once)."""
        if self._tools.keys() <= head.keys():  # every render asks: the head shows them all
            return []
        return [self.definition(n) for n in self._tools if n not in head and n not in stream]

    def admit(self, skill: SkillBlock) -> bool:
        """Admit ``skill``; False when a skill of that name was already admitted.

        Raises:
            ValueError: ``skill`` is not a SkillBlock that could be stored.
        """
        if not isinstance(skill, SkillBlock):
            raise ValueError(f"A skill is a SkillBlock, not {type(skill).__name__}; refused")
        check_block(skill, f"skill {skill.name!r}")
        if skill.name in self._skills:
            return False
        self._skills[skill.name] = skill
        self.changes += 1
        return True

    def skills(self) -> list[SkillBlock]:
        return list(self._skills.values())

    def unsaid_skills(self, messages: Iterable[Message]) -> list[SkillBlock]:
        """Admitted skills no app-authored message already says (those admitted after a
        freeze travel in the stream)."""
        if not self._skills:
            return []
        streamed = {
            b.name
            for m in messages
            if m.app_authored
            for b in m.blocks
            if isinstance(b, SkillBlock)
        }
        return [s for name, s in self._skills.items() if name not in streamed]
