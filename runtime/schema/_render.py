"""The two renderings of a schema model (standard JSON Schema and the @-notation), and the
model-facing strip of the harness keywords."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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

KEYWORD_PREFIX = "x-parlour-"
TYPE_ALIAS_KEYWORD = "x-parlour-type-alias"
SUMMARIZABLE_KEYWORD = "x-parlour-summarizable"
CONTEXT_IGNORE_KEYWORD = "x-parlour-context-ignore"
ARTIFACT_REF_FIELD = "artifact_ref"

# -- JSON Schema ---------------------------------------------------------------------------


def json_definition(defn: Definition, overrides: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An object node: ``title`` always, ``description`` when declared, ``required`` in
    declaration order when any field is required."""
    out: dict[str, Any] = {"type": "object", "title": defn.name}
    if defn.description:
        out["description"] = defn.description
    properties: dict[str, Any] = {}
    for f in defn.fields:
        override = overrides.get(f.name) if overrides else None
        properties[f.name] = json_field(f, override)
    out["properties"] = properties
    required = [f.name for f in defn.fields if f.required]
    if required:
        out["required"] = required
    return out


def json_field(f: FieldDescriptor, description: str | None = None) -> dict[str, Any]:
    out = json_node(f.node)
    text = description if description is not None else f.description
    if text:
        out["description"] = text
    if f.examples:
        out["examples"] = [_example(v, f.node) for v in f.examples]
    out.update(dict(f.keywords))
    return out


def json_node(node: Node) -> dict[str, Any]:
    if isinstance(node, ObjectNode):
        return json_definition(node.definition)
    if isinstance(node, RefNode):
        return {"$ref": f"#/$defs/{node.name}"}
    if isinstance(node, EnumNode):
        return {"type": node.json_type, "enum": list(node.values)}
    if isinstance(node, ArrayNode):
        return {"type": "array", "items": json_node(node.items)}
    if isinstance(node, MapNode):
        values: Any = True if node.values is None else json_node(node.values)
        return {"type": "object", "additionalProperties": values}
    if isinstance(node, UnionNode):
        return {"anyOf": [json_node(o) for o in node.options]}
    return _json_scalar(node)


def _json_scalar(node: Scalar) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if node.json_type is not None:
        out["type"] = node.json_type
    if node.format is not None:
        out["format"] = node.format
    if node.minimum is not None:
        out["minimum"] = node.minimum
    if node.maximum is not None:
        out["maximum"] = node.maximum
    return out


def _example(value: Any, node: Node) -> Any:
    """An example that parses as an integer publishes as a number on a numeric field."""
    numeric = isinstance(node, Scalar) and node.json_type in ("integer", "number")
    if numeric and isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return value
    return value


# -- the @-notation ------------------------------------------------------------------------


def notation_definition(defn: Definition, omit: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``omit`` names fields left out at every depth (the ``tool_calls`` or ``reasoning``
    strip a response handler asks for)."""
    return {
        "@type": defn.name,
        "@description": defn.shown_description,
        "@fields": _notation_fields(defn, omit),
    }


def _notation_fields(defn: Definition, omit: frozenset[str]) -> dict[str, Any]:
    return {f.name: notation_field(f, omit) for f in defn.fields if f.name not in omit}


def notation_field(f: FieldDescriptor, omit: frozenset[str] = frozenset()) -> dict[str, Any]:
    out: dict[str, Any] = {"@type": type_label(f.node), "@description": f.shown_description}
    if f.required:
        out["@required"] = True
    if f.examples:
        out["@examples"] = [_example(v, f.node) for v in f.examples]
    out.update(_notation_detail(f.node, omit))
    return out


def _notation_detail(node: Node, omit: frozenset[str]) -> dict[str, Any]:
    """``@values`` for enums and ``@fields`` for objects, looking through arrays and maps.
    A reference prints its name only: the occurrence containing it already described it."""
    while isinstance(node, ArrayNode | MapNode):
        inner = node.items if isinstance(node, ArrayNode) else node.values
        if inner is None:
            return {}
        node = inner
    if isinstance(node, EnumNode):
        return {"@values": list(node.values)}
    if isinstance(node, ObjectNode):
        return {"@fields": _notation_fields(node.definition, omit)}
    return {}


def type_label(node: Node) -> str:
    if isinstance(node, ObjectNode):
        return node.definition.name
    if isinstance(node, RefNode):
        return node.name
    if isinstance(node, EnumNode):
        return "enum"
    if isinstance(node, ArrayNode):
        return f"array of {type_label(node.items)}"
    if isinstance(node, MapNode):
        return "map of " + ("any" if node.values is None else type_label(node.values))
    if isinstance(node, UnionNode):
        return " or ".join(type_label(o) for o in node.options)
    return node.format or node.json_type or "any"


# -- the model-facing strip ----------------------------------------------------------------


def for_model(schema: Any) -> Any:
    """A copy of a JSON Schema fit for a model: artifact-typed fields reduced to an object
    whose one property is ``artifact_ref`` (a model refers to an artifact, never writes one),
    then every ``x-parlour-*`` keyword removed."""
    if isinstance(schema, list):
        return [for_model(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    if TYPE_ALIAS_KEYWORD in schema:
        schema = _reduce_artifact(schema)
    return {
        k: (v if k == "enum" or k == "examples" else for_model(v))
        for k, v in schema.items()
        if not (isinstance(k, str) and k.startswith(KEYWORD_PREFIX))
    }


def _reduce_artifact(schema: dict[str, Any]) -> dict[str, Any]:
    if schema.get("type") == "array":
        return {**schema, "items": _artifact_ref_object(schema["items"])}
    reduced = _artifact_ref_object(schema)
    if "description" in schema:
        reduced["description"] = schema["description"]
    return reduced


def _artifact_ref_object(schema: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object"}
    if "title" in schema:
        out["title"] = schema["title"]
    out["properties"] = {
        ARTIFACT_REF_FIELD: {
            "type": "string",
            "description": "The artifact's reference, «artifact:type~id».",
        }
    }
    out["required"] = [ARTIFACT_REF_FIELD]
    return out
