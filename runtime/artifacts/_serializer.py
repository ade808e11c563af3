"""Writing typed values for a model, and artifacts for persistence.

Three writes:

- ``write_plain``: every field as msgspec encodes it (persistence; reads back exactly).
- ``write_summarized``: property names as the schema publishes them, None fields omitted,
  long ``LLMSummarizable`` texts summarized (once per artifact: cached on it), a
  ``ListArtifact`` as a bounded digest. The registry dump uses it.
- ``write_summarized_with_refs``: the same, plus every artifact registered and replaced by
  ``{"@ref": "«artifact:...»"}``, and ``LLMContextIgnore`` fields omitted. What a prompt
  carries (the transformation pipeline).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import msgspec
from loguru import logger

from ..errors import CorruptSnapshotError
from ..schema._aliases import alias_of
from ..schema._markers import LLMContextIgnore, LLMSummarizable, field_specs
from ._registry import (
    Artifact,
    ArtifactRegistry,
    ListArtifact,
    class_for_alias,
    extract_alias_from_ref,
)
from ._summarizers import Summarizer, TruncatingSummarizer

__all__ = [
    "REGISTRY_GUIDANCE",
    "REGISTRY_HEADER",
    "build_registry_section",
    "read_artifact",
    "registry_entries",
    "restore_registry",
    "write_plain",
    "write_summarized",
    "write_summarized_with_refs",
]

REF_KEY = "@ref"
SAMPLE_SIZE = 3
REGISTRY_HEADER = "=== ARTIFACT REGISTRY ==="
REGISTRY_GUIDANCE = (
    "Long text fields show summaries with original length. Use get_artifact_field(ref, "
    "fieldName) for full content. Use search_artifact_content(query) to search across all "
    "artifact text."
)

_encoder = msgspec.json.Encoder()
_DEFAULT_SUMMARIZER = TruncatingSummarizer()


def write_plain(value: object) -> str:
    """Every field, no transformation: the persistence form."""
    return _encoder.encode(value).decode()


def write_summarized(value: object, summarizer: Summarizer | None = None) -> str:
    return _encoder.encode(_Writer(None, summarizer).value(value)).decode()


def write_summarized_with_refs(
    value: object, registry: ArtifactRegistry, summarizer: Summarizer | None = None
) -> str:
    """The model-facing JSON of ``value``; registers every artifact it meets in ``registry``.

    Raises:
        MissingTypeAliasError: an artifact met has no ref and its class no alias.
    """
    return _encoder.encode(_Writer(registry, summarizer).value(value)).decode()


class _Writer:
    def __init__(
        self,
        registry: ArtifactRegistry | None,
        summarizer: Summarizer | None,
        omit_ignored: bool = False,
    ) -> None:
        self.registry = registry
        self.summarizer = summarizer or _DEFAULT_SUMMARIZER
        # LLMContextIgnore'd fields leave everything a model reads: the refs-mode write and
        # the registry dump.
        self.omit_ignored = omit_ignored or registry is not None

    def value(self, v: object) -> Any:
        if isinstance(v, Artifact):
            if self.registry is not None:
                return {REF_KEY: self.registry.register(v)}
            if isinstance(v, ListArtifact):
                return self.digest(v)
            return self.fields(v, v)
        if isinstance(v, msgspec.Struct) or (
            dataclasses.is_dataclass(v) and not isinstance(v, type)
        ):
            return self.fields(v, None)
        if isinstance(v, dict):
            return {msgspec.to_builtins(k): self.value(x) for k, x in v.items()}
        if isinstance(v, list | tuple | set | frozenset):
            return [self.value(x) for x in v]
        return msgspec.to_builtins(v)

    def fields(self, obj: object, owner: Artifact | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for spec in field_specs(type(obj)):
            if self.omit_ignored and spec.has(LLMContextIgnore):
                continue
            x = getattr(obj, spec.attr)
            if x is None:
                continue
            hint = spec.summarizable
            if hint is not None and isinstance(x, str) and len(x) > hint.threshold:
                out[spec.json_name] = self.summary(x, hint, owner, spec.attr)
            else:
                out[spec.json_name] = self.value(x)
        return out

    def summary(self, text: str, hint: LLMSummarizable, owner: Artifact | None, key: str) -> str:
        if owner is None:
            return self.summarizer.summarize(text, hint)
        cache = owner.summary_cache()
        if key not in cache:
            cache[key] = self.summarizer.summarize(text, hint)
        return cache[key]

    def digest(self, listing: ListArtifact[Any]) -> dict[str, Any]:
        """A list as the model reads it: its ref, iterand type, count and a head sample;
        a list of lists stays bounded at every level."""
        first = listing.items[0] if listing.items else None
        return {
            "artifact_ref": listing.artifact_ref,
            "iterand_type": alias_of(type(first)) if first is not None else None,
            "count": len(listing.items),
            "sample": [self.value(x) for x in listing.items[:SAMPLE_SIZE]],
        }


# -- the registry dump and persistence ------------------------------------------------------


def build_registry_section(registry: ArtifactRegistry, summarizer: Summarizer | None = None) -> str:
    """The trailing user turn's text: header, guidance, then one entry per top-level
    artifact; ``""`` for a registry with no top-level artifact."""
    entries = registry.get_all_artifacts()
    if not entries:
        return ""
    parts = [f"\n\n{REGISTRY_HEADER}\n{REGISTRY_GUIDANCE}\n\n"]
    writer = _Writer(None, summarizer, omit_ignored=True)
    for ref, artifact in entries.items():
        text = _encoder.encode(writer.value(artifact)).decode()
        parts.append(f"--- {ref} ---\n{text}\n\n")
    return "".join(parts)


def registry_entries(registry: ArtifactRegistry) -> list[dict[str, Any]]:
    """Top-level artifacts in their plain (persistence) form; iterands ride inside their
    list, each with its own ref."""
    return [msgspec.to_builtins(a) for a in registry.get_all_artifacts().values()]


def restore_registry(
    registry: ArtifactRegistry, entries: Iterable[dict[str, Any]], conversation_id: object
) -> None:
    """Register each stored artifact of ``conversation_id``; an entry whose alias no longer
    resolves is skipped with a warning and the rest are restored.

    Raises:
        CorruptSnapshotError: an entry's data does not fit its type (or is refused as it
            registers); the message names the conversation and the artifact.
    """
    for entry in entries:
        ref = entry.get("artifact_ref")
        alias = extract_alias_from_ref(ref if isinstance(ref, str) else None)
        if alias is None or class_for_alias(alias) is None:
            logger.warning("Skipping stored artifact {}: type alias {!r} is unknown", ref, alias)
            continue
        try:
            registry.register(read_artifact(entry))
        except ValueError as exc:  # msgspec.ValidationError is one: data not fitting its type
            raise CorruptSnapshotError(
                f"Stored conversation {conversation_id} holds artifact {ref} whose data does "
                f"not fit its type: {exc}"
            ) from exc


def read_artifact(data: dict[str, Any]) -> Artifact:
    """An artifact from its plain form, its class found from its own ref's alias.

    Raises:
        ValueError: the ref is missing or its alias unknown, for the artifact or for any
            iterand of a list (a list is never silently shortened).
        msgspec.ValidationError: the data does not fit the class.
    """
    ref = data.get("artifact_ref")
    alias = extract_alias_from_ref(ref if isinstance(ref, str) else None)
    cls = class_for_alias(alias) if alias is not None else None
    if cls is None:
        raise ValueError(f"Artifact data with ref {ref!r} names no known type alias")
    if not issubclass(cls, ListArtifact):
        return msgspec.convert(data, cls)
    listing = msgspec.convert({**data, "items": []}, cls)
    listing.items = [_read_iterand(item, i, ref) for i, item in enumerate(data.get("items", []))]
    return listing


def _read_iterand(item: object, index: int, list_ref: object) -> Artifact:
    if not isinstance(item, dict) or not item.get("artifact_ref"):
        raise ValueError(
            f"Iterand {index} of list {list_ref} has no artifact_ref, so its type cannot be "
            "resolved; the list is refused rather than silently shortened"
        )
    return read_artifact(item)
