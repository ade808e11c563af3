"""Schema generation: a Struct or dataclass reflected once into a schema model.

``generate_schema(cls)`` walks the class with the types currently ON THE PATH, so a field
that comes back to one becomes a reference (``$ref`` into the root's ``$defs``) and the
walk terminates on every type graph, while two sibling fields of one acyclic type are both
described in full. Two different classes sharing a ``__name__`` are refused: the title and
the ``$defs`` key would not tell them apart.
"""

from __future__ import annotations

import collections.abc as abc
import datetime as dt
import decimal
import enum
import json
import pathlib
import types
import typing
import uuid
from collections.abc import Collection, Mapping
from typing import Any

import msgspec

from ..errors import IllegalStateError
from ._aliases import alias_of
from ._markers import (
    LLMContextIgnore,
    LLMDescription,
    LLMExample,
    LLMRequired,
    LLMSummarizable,
    class_description,
    field_specs,
    is_composite,
    split_annotated,
)
from ._nodes import (
    ArrayNode,
    Definition,
    EnumNode,
    FieldDescriptor,
    MapNode,
    Node,
    ObjectNode,
    RefNode,
    Scalar,
    UnionNode,
)
from ._render import (
    CONTEXT_IGNORE_KEYWORD,
    SUMMARIZABLE_KEYWORD,
    TYPE_ALIAS_KEYWORD,
    for_model,
    json_definition,
    notation_definition,
)

__all__ = ["Schema", "generate_schema", "validate_required_fields"]

_LEAVES: dict[type, Scalar] = {
    bool: Scalar("boolean"),
    int: Scalar("integer"),
    float: Scalar("number"),
    str: Scalar("string"),
    bytes: Scalar("string", "byte"),
    bytearray: Scalar("string", "byte"),
    dt.datetime: Scalar("string", "date-time"),
    dt.date: Scalar("string", "date"),
    dt.time: Scalar("string", "time"),
    dt.timedelta: Scalar("string", "duration"),
    uuid.UUID: Scalar("string", "uuid"),
    decimal.Decimal: Scalar("string"),
    type(None): Scalar("null"),
}
_ARRAYS = (
    list,
    tuple,
    set,
    frozenset,
    abc.Sequence,
    abc.MutableSequence,
    abc.Set,
    abc.MutableSet,
    abc.Collection,
    abc.Iterable,
)
_MAPS = (dict, abc.Mapping, abc.MutableMapping)


class Schema:
    """A class's schema model and its renderings. Immutable once generated."""

    def __init__(self, root: Definition, defs: dict[str, Definition]) -> None:
        self.root = root
        self._defs = defs

    @property
    def title(self) -> str:
        return self.root.name

    def to_json_schema(self, overrides: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Standard JSON Schema, harness keywords (``x-parlour-*``) included.

        ``overrides`` replaces the descriptions of the named top-level fields.
        """
        out = json_definition(self.root, overrides)
        if self._defs:
            out["$defs"] = {name: json_definition(d) for name, d in self._defs.items()}
        return out

    def to_model_json_schema(self) -> dict[str, Any]:
        """The JSON Schema a model reads: artifact fields reduced to refs, keywords stripped."""
        reduced: dict[str, Any] = for_model(self.to_json_schema())
        return reduced

    def to_model_json(self) -> str:
        """``to_model_json_schema()`` as compact JSON text, as a ToolDefinitionBlock carries it."""
        return json.dumps(self.to_model_json_schema(), ensure_ascii=False, separators=(",", ":"))

    def to_notation(self, omit: Collection[str] = ()) -> dict[str, Any]:
        """The @-notation (``@type``, ``@description``, ``@required``, ``@examples``,
        ``@values``, ``@fields``) that SCHEMA_NOTATION_GUIDANCE explains.

        Fields whose names are in ``omit`` are left out at every depth, so a response
        handler can strip ``tool_calls`` or ``reasoning``.
        """
        return notation_definition(self.root, frozenset(omit))

    def render_notation(self, omit: Collection[str] = ()) -> str:
        return json.dumps(self.to_notation(omit), ensure_ascii=False, indent=2)


def generate_schema(cls: type) -> Schema:
    """Reflect ``cls`` (a msgspec Struct or a dataclass) into a ``Schema``.

    Raises:
        TypeError: ``cls`` is neither a Struct nor a dataclass.
        IllegalStateError: two different classes named alike are reached from ``cls``.
    """
    if not is_composite(cls):
        raise TypeError(f"{cls!r} is neither a msgspec Struct nor a dataclass")
    walker = _Walker()
    root = walker.definition(cls)
    return Schema(root, walker.defs)


class _Walker:
    def __init__(self) -> None:
        self.path: dict[type, Definition] = {}
        self.names: dict[str, type] = {}
        self.defs: dict[str, Definition] = {}

    def definition(self, cls: type) -> Definition:
        self._claim_name(cls)
        alias = alias_of(cls)  # only an artifact class has one (artifacts.type_alias)
        defn = Definition(cls.__name__, _qualified(cls), class_description(cls), alias=alias)
        self.path[cls] = defn
        try:
            for spec in field_specs(cls):
                defn.fields.append(self.field(spec.json_name, spec.tp, spec.markers))
        finally:
            del self.path[cls]
        return defn

    def _claim_name(self, cls: type) -> None:
        holder = self.names.setdefault(cls.__name__, cls)
        if holder is not cls:
            raise IllegalStateError(
                f"Two types named {cls.__name__} in one schema: {_qualified(holder)} and "
                f"{_qualified(cls)}; rename one, since the title and $defs key would collide"
            )

    def field(self, name: str, tp: Any, markers: tuple[object, ...]) -> FieldDescriptor:
        node = self.node(tp, markers)
        description = _first(markers, LLMDescription)
        meta = _first(markers, msgspec.Meta)
        text = description.text if description else (meta.description if meta else None)
        examples: tuple[Any, ...] = ()
        for m in markers:
            if isinstance(m, LLMExample):
                examples += m.values
        return FieldDescriptor(
            name=name,
            description=text,
            node=node,
            required=any(m is LLMRequired for m in markers),
            examples=examples,
            keywords=_keywords(node, markers),
        )

    def node(self, tp: Any, markers: tuple[object, ...] = ()) -> Node:
        tp, inner = split_annotated(tp)
        markers = markers + inner
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if tp is Any or tp is object or isinstance(tp, typing.TypeVar):
            return Scalar(None)
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args)
        if origin is typing.Literal:
            return EnumNode(tuple(args))
        if origin in _ARRAYS or tp in _ARRAYS:
            item = args[0] if args and args[0] is not Ellipsis else Any
            return ArrayNode(self.node(item))
        if origin in _MAPS or tp in _MAPS:
            value = args[1] if len(args) == 2 else Any
            return MapNode(None if value in (Any, object) else self.node(value))
        if isinstance(origin, type) and is_composite(origin):
            tp = origin  # a generic Struct: its type variables read as untyped values
        return self._class(tp, markers)

    def _union(self, args: tuple[Any, ...]) -> Node:
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return self.node(options[0])
        return UnionNode(tuple(self.node(a) for a in options))

    def _class(self, tp: Any, markers: tuple[object, ...]) -> Node:
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return EnumNode(tuple(msgspec.to_builtins(m) for m in tp))
        if is_composite(tp):
            if tp in self.path:
                self.defs.setdefault(tp.__name__, self.path[tp])
                return RefNode(tp.__name__)
            return ObjectNode(self.definition(tp))
        leaf = next(
            (s for t, s in _LEAVES.items() if isinstance(tp, type) and issubclass(tp, t)), None
        )
        if leaf is None:
            # Path, URL strings and other standard value types are leaves, written as text.
            leaf = (
                Scalar("string")
                if isinstance(tp, type) and issubclass(tp, pathlib.PurePath)
                else Scalar(None)
            )
        return _bounded(leaf, markers)


def _bounded(leaf: Scalar, markers: tuple[object, ...]) -> Scalar:
    """Python ints have no width: bounds come only from ``msgspec.Meta(ge=, le=)``."""
    meta = _first(markers, msgspec.Meta)
    if meta is None or leaf.json_type not in ("integer", "number"):
        return leaf
    return Scalar(leaf.json_type, leaf.format, meta.ge, meta.le)


def _keywords(node: Node, markers: tuple[object, ...]) -> tuple[tuple[str, Any], ...]:
    out: list[tuple[str, Any]] = []
    summarizable = _first(markers, LLMSummarizable)
    if summarizable is not None:
        out.append((SUMMARIZABLE_KEYWORD, summarizable.keyword()))
    if any(m is LLMContextIgnore for m in markers):
        out.append((CONTEXT_IGNORE_KEYWORD, True))
    target = node.items if isinstance(node, ArrayNode) else node
    if isinstance(target, ObjectNode) and target.definition.alias:
        out.append((TYPE_ALIAS_KEYWORD, target.definition.alias))
    return tuple(out)


def _first(markers: tuple[object, ...], kind: type[Any]) -> Any:
    return next((m for m in markers if isinstance(m, kind)), None)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def validate_required_fields(instance: object) -> bool:
    """False when a required field is None or a blank string; an empty collection is an
    answer ("nothing found") and passes."""
    for spec in field_specs(type(instance)):
        if not spec.has(LLMRequired):
            continue
        value = getattr(instance, spec.attr, None)
        if value is None or (isinstance(value, str) and not value.strip()):
            return False
    return True
