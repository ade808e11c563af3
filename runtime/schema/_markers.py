"""Schema markers and the per-class field table that schemas and the serializer share.

Markers ride in ``typing.Annotated[...]``::

    class SearchInput(msgspec.Struct):
        query: Annotated[str, LLMRequired, LLMDescription("The search query")]
        max_results: Annotated[int | None, LLMDescription("Maximum results (1-100)")] = None

A rename is ``msgspec.field(name=...)``; ``ClassVar`` fields are never fields.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import typing
from typing import Any, Final

import msgspec

__all__ = [
    "JsonIgnore",
    "LLMContextIgnore",
    "LLMDescription",
    "LLMExample",
    "LLMRequired",
    "LLMSummarizable",
    "SummarySize",
]


class _Flag:
    """A marker that is its own instance: ``Annotated[str, LLMRequired]``."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


LLMRequired: Final = _Flag("LLMRequired")
"""The model must fill this field: ``required`` in JSON Schema, ``@required`` in notation."""

LLMContextIgnore: Final = _Flag("LLMContextIgnore")
"""In the schema (a caller may fill it), but left out of the model-facing JSON."""

JsonIgnore: Final = _Flag("JsonIgnore")
"""Not a field at all for parlour: absent from both schema renderings and every write."""


@dataclasses.dataclass(frozen=True)
class LLMDescription:
    """What a field (or, via ``__llm_description__``, a class) means, for the model."""

    text: str


class LLMExample:
    """Example values; published as the standard ``examples`` keyword."""

    def __init__(self, *values: object) -> None:
        self.values: tuple[object, ...] = values

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LLMExample) and other.values == self.values

    def __hash__(self) -> int:
        return hash(self.values)


class SummarySize(enum.Enum):
    """How long a summary should be; the truncating summarizer keeps ~200/500/1200 chars."""

    BRIEF = "brief"
    SHORT = "short"
    PARAGRAPHS = "paragraphs"


@dataclasses.dataclass(frozen=True)
class LLMSummarizable:
    """A long text field the model reads summarized (``[SUMMARY: N chars] ...``).

    ``hint`` says what the text is; ``threshold`` is the length above which it is
    summarized; ``static_summary`` replaces any generated summary; ``llm_safe`` False asks an
    LLM-backed summarizer for its lossless path (truncation).
    """

    hint: str = ""
    threshold: int = 8000
    size: SummarySize = SummarySize.SHORT
    static_summary: str = ""
    llm_safe: bool = True

    def keyword(self) -> dict[str, Any]:
        """The ``x-parlour-summarizable`` keyword value: the marker as declared."""
        return {
            "hint": self.hint,
            "threshold": self.threshold,
            "size": self.size.value,
            "static_summary": self.static_summary,
            "llm_safe": self.llm_safe,
        }


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """One declared field: attribute name, JSON name, bare type and its markers."""

    attr: str
    json_name: str
    tp: Any
    markers: tuple[object, ...]
    has_default: bool

    def has(self, flag: _Flag) -> bool:
        return any(m is flag for m in self.markers)

    def find(self, kind: type[Any]) -> Any:
        return next((m for m in self.markers if isinstance(m, kind)), None)

    @property
    def summarizable(self) -> LLMSummarizable | None:
        found: LLMSummarizable | None = self.find(LLMSummarizable)
        return found


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(name: str) -> str:
    """``maxResults`` -> ``max_results``; an existing snake_case name is unchanged."""
    return _CAMEL.sub("_", name).lower()


def split_annotated(tp: Any) -> tuple[Any, tuple[object, ...]]:
    """The bare type and the flattened ``Annotated`` metadata of ``tp``."""
    markers: tuple[object, ...] = ()
    while typing.get_origin(tp) is typing.Annotated:
        markers = markers + tuple(tp.__metadata__)
        tp = tp.__origin__
    return tp, markers


def is_composite(tp: object) -> bool:
    """A user class parlour describes field by field: a msgspec Struct or a dataclass."""
    return isinstance(tp, type) and (issubclass(tp, msgspec.Struct) or dataclasses.is_dataclass(tp))


_SPECS: dict[type, tuple[FieldSpec, ...]] = {}


def field_specs(cls: type) -> tuple[FieldSpec, ...]:
    """The fields of a Struct or dataclass in declaration order, JsonIgnore'd ones dropped.
    Computed once per class.

    Raises:
        TypeError: ``cls`` is neither a msgspec Struct nor a dataclass.
    """
    specs = _SPECS.get(cls)
    if specs is None:
        specs = _SPECS.setdefault(cls, _field_specs(cls))
    return specs


def _field_specs(cls: type) -> tuple[FieldSpec, ...]:
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        raw = [
            (f.name, f.encode_name, f.type, f.required is False)
            for f in msgspec.structs.fields(cls)
        ]
    elif dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls, include_extras=True)
        raw = [
            (f.name, f.name, hints[f.name], _dataclass_has_default(f))
            for f in dataclasses.fields(cls)
        ]
    else:
        raise TypeError(f"{cls!r} is neither a msgspec Struct nor a dataclass")
    specs = []
    for attr, encode_name, annotated, has_default in raw:
        tp, markers = split_annotated(annotated)
        if any(m is JsonIgnore for m in markers):
            continue
        json_name = encode_name if encode_name != attr else snake_case(attr)
        specs.append(FieldSpec(attr, json_name, tp, markers, has_default))
    return tuple(specs)


def _dataclass_has_default(f: dataclasses.Field[Any]) -> bool:
    return not (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def class_description(cls: type) -> str | None:
    """A class's own description: ``Annotated`` is not available on classes, so a class
    declares ``__llm_description__`` (a str or an ``LLMDescription``)."""
    value = cls.__dict__.get("__llm_description__")
    if isinstance(value, LLMDescription):
        return value.text
    return value if isinstance(value, str) else None
