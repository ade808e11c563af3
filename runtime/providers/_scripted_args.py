"""The offline model's tool arguments: a value for a JSON schema, made deterministically.

The scripted model's default policy calls a declared tool with arguments that pass the
tool's own validation, so an agent's tools really run offline. A value is a pure function
of the schema and the user's message: the same conversation always calls the same way.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["arguments_for", "names_tool", "tool_asked_for"]

_FORMATS = {
    "date": "2025-01-01",
    "date-time": "2025-01-01T00:00:00Z",
    "time": "00:00:00",
    "email": "someone@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
}
_MAX_DEPTH = 8  # a recursive schema ends in its simplest value here
# words of a tool's name too common to say the message asked for that tool
_COMMON = frozenset(
    {
        "call",
        "check",
        "create",
        "delete",
        "fetch",
        "find",
        "from",
        "into",
        "list",
        "look",
        "lookup",
        "make",
        "query",
        "read",
        "search",
        "send",
        "show",
        "tool",
        "tools",
        "update",
        "with",
        "write",
    }
)
_CAPITALISED = re.compile(r"\b[A-Z][\w'-]*")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD = re.compile(r"\w+")


def names_tool(text: str, name: str) -> bool:
    """Whether ``text`` asks for the tool ``name``: it holds the name itself, or one of the
    name's words (``get_weather``: "weather"; ``holdOn``: "hold") of four letters or more
    as a word of its own, in any case, that is not a common verb ("list", "search", ...)."""
    return tool_asked_for(text, [name]) == name


def tool_asked_for(text: str, names: Iterable[str]) -> str | None:
    """The tool of ``names`` that ``text`` asks for (as ``names_tool``), or None: the first
    whose whole name it holds, else the first one of whose words it says. The message's
    words are read only when no whole name is in it."""
    names = list(names)
    if not names:  # nothing declared: no words to read
        return None
    whole = next((name for name in names if name in text), None)
    if whole is not None:
        return whole
    said = set(_WORD.findall(text.lower()))
    return next((name for name in names if not _words_of(name).isdisjoint(said)), None)


@functools.lru_cache(maxsize=4096)
def _words_of(name: str) -> frozenset[str]:
    """The words of a tool's name that ask for it: four letters or more, not common."""
    spaced = _CAMEL.sub(" ", name).replace("_", " ").replace("-", " ")
    return frozenset(w.lower() for w in spaced.split() if len(w) >= 4) - _COMMON


def arguments_for(schema: dict[str, Any] | None, text: str) -> dict[str, Any]:
    """Arguments for a tool whose input schema is ``schema`` (None: it takes none): every
    required property, each with the first value its schema allows: ``const``, the first
    of an ``enum``, a ``default``, a sample of a ``format``; a string is the message's last
    capitalised word (most often the name the user asked about), else the property's name;
    a number its ``minimum`` (else 1); a boolean true; an array one item; an object its
    required properties. Optional properties are left out."""
    if not schema:
        return {}
    hint = _CAPITALISED.findall(text)
    value = _value(schema, schema, "value", hint[-1].rstrip("'-") if hint else None, 0)
    return value if isinstance(value, dict) else {}


def _value(node: Any, root: dict[str, Any], name: str, hint: str | None, depth: int) -> Any:
    node = _resolved(node, root)
    if not isinstance(node, dict):
        return None
    if "const" in node:
        return node["const"]
    if node.get("enum"):
        return node["enum"][0]
    if "default" in node:
        return node["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        options = [o for o in node.get(key, []) if _resolved(o, root).get("type") != "null"]
        if options:
            return _value(options[0], root, name, hint, depth)
    kind = node.get("type", "object" if "properties" in node else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if depth >= _MAX_DEPTH:
        return {"object": {}, "array": []}.get(kind)
    if kind == "object":
        properties = node.get("properties", {})
        return {
            key: _value(properties.get(key, {}), root, key, hint, depth + 1)
            for key in node.get("required", [])
        }
    if kind == "array":
        count = min(max(node.get("minItems", 1), 1), node.get("maxItems", 1 << 16))
        return [_value(node.get("items", {}), root, name, hint, depth + 1)] * count
    return _scalar(node, kind, name, hint)


def _scalar(node: dict[str, Any], kind: str, name: str, hint: str | None) -> Any:
    if kind in ("integer", "number"):
        return _number(node, kind == "integer")
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = _FORMATS.get(node.get("format", ""), hint or name)
    shortest, longest = node.get("minLength", 0), node.get("maxLength")
    text = text + "x" * (shortest - len(text)) if len(text) < shortest else text
    return text[:longest] if longest is not None else text


def _number(node: dict[str, Any], integral: bool) -> int | float:
    """The ``minimum`` (else 1), kept under the ``maximum``; exclusive bounds stepped over
    by 1 (by 0.5 for a number)."""
    step = 1 if integral else 0.5
    low, high = node.get("minimum"), node.get("maximum")
    if low is None and "exclusiveMinimum" in node:
        low = node["exclusiveMinimum"] + step
    if high is None and "exclusiveMaximum" in node:
        high = node["exclusiveMaximum"] - step
    value = 1 if low is None else low
    if high is not None and value > high:
        value = high
    return math.ceil(value) if integral else float(value)


def _resolved(node: Any, root: dict[str, Any]) -> Any:
    """``node``, or the definition its local ``$ref`` (``#/$defs/X``) points to."""
    for _ in range(_MAX_DEPTH):
        ref = node.get("$ref") if isinstance(node, dict) else None
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return node
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        node = target
    return node
