"""Values are validated when they enter a conversation, so nothing stored can poison it.

Three things would make every later save of a conversation fail, or a stored record fail to
load: a lone surrogate in any text (``"\\ud800"``, which a JSON string with a broken escape
decodes to, cannot be written as UTF-8), nesting deeper than ``MAX_NESTING`` containers,
and a value msgspec cannot encode (or a block field of the wrong type, which encodes but
never decodes). Every entry point that stores into a context refuses them with a
``ValueError`` naming what was refused and where. (``blocks.check_block`` applies these to
a block's fields; this module imports nothing of parlour's, so the artifact registry and
the blocks can both use it.)

The check is cheap on a turn's path: a block with only text fields costs a type lookup and
one ``str.isascii()`` per field (a strict UTF-8 encode only for non-ASCII text); only the
free-form value of a ``PojoBlock`` (and an artifact) is walked and encoded.

The walk is iterative, so its answer never depends on the caller's stack depth. Pure
functions: safe from any thread.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

__all__ = ["MAX_NESTING", "check_text", "check_value", "is_valid_text", "nesting_depth"]

MAX_NESTING = 64
"""The deepest nesting of containers (lists, dicts, structs) a stored value may have."""

_LEAVES = (str, bytes, int, float, bool, type(None))
_SEQUENCES = (list, tuple, set, frozenset)
_encoder = msgspec.json.Encoder()


def is_valid_text(text: str) -> bool:
    """True when ``text`` can be written as UTF-8 (holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(text: str, where: str) -> None:
    """Refuse text that cannot be written as UTF-8 (a lone surrogate).

    Raises:
        ValueError: ``text`` holds a lone surrogate; the message names ``where`` and the
            index.
    """
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{where} holds a lone surrogate {text[exc.start]!r} at index {exc.start}; "
            "text must be valid Unicode (a broken \\u escape in decoded JSON makes one), "
            "so it was refused"
        ) from None


def check_value(value: object, where: str) -> None:
    """Refuse a free-form value (a PojoBlock's, an artifact) that could not be stored.

    Raises:
        ValueError: the value nests deeper than ``MAX_NESTING``, holds a lone surrogate in a
            string or a key, or msgspec cannot encode it; the message names ``where`` and
            the path inside the value.
    """
    _walk(value, where)
    try:
        _encoder.encode(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{where} cannot be encoded: {exc}; refused") from None


def nesting_depth(value: object, limit: int = MAX_NESTING) -> int:
    """How many containers deep ``value`` nests, counting stops just past ``limit``.

    A scalar is 0, ``[]`` is 1, ``[{"a": 1}]`` is 2. Iterative: safe at any stack depth.
    """
    deepest = 0
    seen: dict[int, int] = {}
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        children = _children(node)
        if children is None or seen.get(id(node), -1) >= depth:
            continue
        seen[id(node)] = depth
        depth += 1
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        stack.extend((child, depth) for _, child in children)
    return deepest


def _walk(value: object, where: str) -> None:
    # entries: (node, depth, parent entry, key in parent); the path is built only to report.
    # A container shared (or cyclic) is walked again only from a deeper place than before.
    seen: dict[int, int] = {}
    stack: list[tuple[object, int, Any, object]] = [(value, 0, None, None)]
    while stack:
        entry = stack.pop()
        node, depth = entry[0], entry[1]
        if isinstance(node, str):
            check_text(node, f"{where} at {_path(entry)}")
            continue
        children = _children(node)
        if children is None or seen.get(id(node), -1) >= depth:
            continue
        seen[id(node)] = depth
        if depth >= MAX_NESTING:
            raise ValueError(
                f"{where} nests deeper than {MAX_NESTING} levels (at {_path(entry)}); "
                "a stored value may nest at most that deep, so it was refused"
            )
        for key, child in children:
            if isinstance(key, str):
                check_text(key, f"{where} key at {_path(entry)}")
            stack.append((child, depth + 1, entry, key))


def _children(node: object) -> list[tuple[object, object]] | None:
    """The (key, child) pairs of a container; None for a leaf."""
    if isinstance(node, _LEAVES):
        return None
    if isinstance(node, dict):
        return list(node.items())
    if isinstance(node, _SEQUENCES):
        return list(enumerate(node))
    if isinstance(node, msgspec.Struct):
        return [(name, getattr(node, name)) for name in node.__struct_fields__]
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return [(f.name, getattr(node, f.name)) for f in dataclasses.fields(node)]
    return None


def _path(entry: tuple[object, int, Any, object]) -> str:
    """Where ``entry`` sits in the value, as ``$.key[0]``; a long path keeps its ends."""
    parts: list[str] = []
    while entry[2] is not None:
        key = entry[3]
        parts.append(f".{key}" if isinstance(key, str) else f"[{key!r}]")
        entry = entry[2]
    path = "$" + "".join(reversed(parts))
    return path if len(path) <= 60 else f"{path[:30]}...{path[-24:]}"
