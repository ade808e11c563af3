"""Type aliases: the name a class is known by, in an artifact's reference
(``«artifact:link:cite~a1b2c3»``), in its schema (``x-parlour-type-alias``) and, by its
``module:QualName`` path, in a stored value's class. ``artifacts.type_alias`` gives an
artifact class its alias; the table lives here, below both the schema, which reads it, and
the artifacts, which register and resolve through it, so neither package imports the other
for it. The table is process-wide and written only at class definition.
"""

from __future__ import annotations

import re

__all__ = [
    "ALIAS",
    "alias_of",
    "check_alias",
    "class_with_alias",
    "register_alias",
    "registered_classes",
]

# The alias grammar: lowercase words joined by ``:`` (IS-A levels) or ``-`` (words).
ALIAS = r"[a-z0-9]+(?:[:-][a-z0-9]+)*"
_ALIAS_RE = re.compile(rf"^{ALIAS}$")

_ALIAS_TO_CLASS: dict[str, type] = {}
_CLASS_TO_ALIAS: dict[type, str] = {}
# by "module:QualName", the form a stored PojoBlock names its class in
_PATH_TO_CLASS: dict[str, type] = {}


def check_alias(alias: str) -> None:
    """Refuse a malformed alias.

    Raises:
        ValueError: ``alias`` breaks the grammar, or begins with the word ``artifact``.
    """
    if not _ALIAS_RE.match(alias) or alias.split(":")[0] == "artifact":
        raise ValueError(f"Malformed type alias {alias!r}: use lowercase words joined by : or -")


def register_alias(alias: str, cls: type) -> None:
    """Give ``cls`` the alias ``alias`` (checked), both ways and by its class path.

    Raises:
        ValueError: a malformed alias, or one already held by a different class.
    """
    check_alias(alias)
    holder = _ALIAS_TO_CLASS.get(alias)
    if holder is not None and _qualified(holder) != _qualified(cls):
        raise ValueError(
            f"Type alias {alias!r} is held by {_qualified(holder)}; {_qualified(cls)} needs another"
        )
    _ALIAS_TO_CLASS[alias] = cls
    _CLASS_TO_ALIAS[cls] = alias
    _PATH_TO_CLASS[f"{cls.__module__}:{cls.__qualname__}"] = cls


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def alias_of(cls: type) -> str | None:
    """The alias ``cls`` itself declares (never inherited), or None."""
    return _CLASS_TO_ALIAS.get(cls)


def class_with_alias(alias: str) -> type | None:
    return _ALIAS_TO_CLASS.get(alias)


def registered_classes() -> dict[str, type]:
    """Every class given a type alias, by its ``module:QualName`` path; do not modify it."""
    return _PATH_TO_CLASS
