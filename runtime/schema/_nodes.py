"""The schema model: a class reflected once into definitions, fields and type nodes.

Both renderings (JSON Schema and the @-notation) are made from this model; neither is
derived from the other's text.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Scalar:
    """A JSON leaf: ``json_type`` is None for an untyped value (``Any``)."""

    json_type: str | None
    format: str | None = None
    minimum: float | None = None
    maximum: float | None = None


@dataclasses.dataclass(frozen=True)
class EnumNode:
    """Constants in the encoder's wire form (enum values)."""

    values: tuple[Any, ...]

    @property
    def json_type(self) -> str:
        if all(isinstance(v, bool) for v in self.values):
            return "boolean"
        if all(isinstance(v, int) and not isinstance(v, bool) for v in self.values):
            return "integer"
        return "string"


@dataclasses.dataclass(frozen=True)
class ArrayNode:
    items: Node


@dataclasses.dataclass(frozen=True)
class MapNode:
    """``dict[str, V]``; ``values`` None means any value (``additionalProperties: true``)."""

    values: Node | None


@dataclasses.dataclass(frozen=True)
class UnionNode:
    options: tuple[Node, ...]


@dataclasses.dataclass(frozen=True)
class RefNode:
    """A field that comes back to a type already on the walk's path (a cycle)."""

    name: str


@dataclasses.dataclass
class Definition:
    """One class: its name (the title), description and ordered fields.

    ``alias`` is the type alias when the class is an artifact.
    """

    name: str
    qualname: str
    description: str | None
    fields: list[FieldDescriptor] = dataclasses.field(default_factory=list)
    alias: str | None = None

    @property
    def shown_description(self) -> str:
        return self.description or f"Schema of {self.name}"


@dataclasses.dataclass(frozen=True)
class ObjectNode:
    definition: Definition


Node = Scalar | EnumNode | ArrayNode | MapNode | UnionNode | RefNode | ObjectNode


@dataclasses.dataclass(frozen=True)
class FieldDescriptor:
    """One field as published: JSON name, description, node, examples, required flag, and
    the harness keywords (``x-parlour-*``)."""

    name: str
    description: str | None
    node: Node
    required: bool = False
    examples: tuple[Any, ...] = ()
    keywords: tuple[tuple[str, Any], ...] = ()

    @property
    def shown_description(self) -> str:
        return self.description or f"Field {self.name}"
