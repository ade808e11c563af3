"""Artifacts: typed data the model refers to by reference and never rewrites.

An artifact class is a msgspec Struct subclassing ``Artifact`` with a type alias::

    @type_alias("link:cite")
    class CitationArtifact(Artifact):
        title: str
        url: str

Its references read ``«artifact:link:cite~a1b2c3»``. The registry holds two tiers: top-level
artifacts (what the registry dump and persistence iterate) and reachable ones (iterands of a
registered list, artifacts nested in another's fields), resolvable by reference but rendered
only through their top-level owner. A registry belongs to one conversation and is not
thread-safe.
"""

from __future__ import annotations

import dataclasses
import random
import re
import string
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar, cast

import msgspec

from .._validation import check_value
from ..errors import MissingTypeAliasError
from ..schema._aliases import ALIAS, alias_of, check_alias, class_with_alias, register_alias

__all__ = [
    "Artifact",
    "ArtifactRegistry",
    "ListArtifact",
    "canonicalize_artifact_refs",
    "class_for_alias",
    "extract_alias_from_ref",
    "normalize_ref",
    "refs_mentioned_in",
    "type_alias",
]

_ID = r"[a-z0-9]+"
# The documented spellings: «artifact:a~id», artifact:a~id, «a~id», a~id (whitespace around
# any of them is trimmed first). Anything else is not a reference.
_REF_RE = re.compile(rf"^(?P<open>«)?(?:artifact:)?(?P<alias>{ALIAS})~(?P<id>{_ID})(?P<close>»)?$")
_MENTION_RE = re.compile(r"«artifact:([^»\s]+)»")
_ID_CHARS = string.ascii_lowercase + string.digits


class Artifact(msgspec.Struct, kw_only=True, dict=True):
    """Base of artifact classes: carries its reference, minted at first registration.

    Instances also keep a per-field summary cache (outside the fields, so it never
    persists): a summary is computed once per artifact.
    """

    artifact_ref: str | None = None

    def has_reference(self) -> bool:
        return bool(self.artifact_ref)

    def summary_cache(self) -> dict[str, str]:
        cache: dict[str, str] | None = self.__dict__.get("_parlour_summaries")
        if cache is None:
            cache = {}
            self.__dict__["_parlour_summaries"] = cache
        return cache

    def __str__(self) -> str:
        return self.artifact_ref or super().__repr__()


A = TypeVar("A", bound=type[Artifact])


def type_alias(alias: str) -> Callable[[A], A]:
    """Class decorator giving an artifact class its alias; registers it both ways (in the
    alias table, ``schema._aliases``).

    Colons are IS-A levels and hyphens join words (``link:cite:pubmed``).

    Raises:
        ValueError: a malformed alias, or one already held by a different class.
    """
    check_alias(alias)

    def register(cls: A) -> A:
        register_alias(alias, cls)
        return cls

    return register


def class_for_alias(alias: str) -> type[Artifact] | None:
    # only type_alias registers, and only artifact classes
    return cast("type[Artifact] | None", class_with_alias(alias))


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# -- references -----------------------------------------------------------------------------


def normalize_ref(ref: str | None) -> str | None:
    """The canonical ``«artifact:alias~id»`` for any documented spelling, else None.

    Accepted: canonical; without guillemets; wrapped in whitespace; bare ``alias~id``;
    guillemets without the ``artifact:`` prefix. A lone guillemet is refused.
    """
    if ref is None:
        return None
    m = _REF_RE.match(ref.strip())
    if m is None or bool(m.group("open")) != bool(m.group("close")):
        return None
    return f"«artifact:{m.group('alias')}~{m.group('id')}»"


def extract_alias_from_ref(ref: str | None) -> str | None:
    """``«artifact:link:cite:pubmed~x1y2z3»`` -> ``link:cite:pubmed``; None if malformed."""
    canonical = normalize_ref(ref)
    if canonical is None:
        return None
    return canonical[len("«artifact:") : canonical.rindex("~")]


def refs_mentioned_in(text: str | None) -> list[str]:
    """Every well-formed reference mentioned in ``text``, canonical, deduplicated, in
    first-mention order; ``[]`` when there are none."""
    refs: list[str] = []
    for body in _MENTION_RE.findall(text or ""):
        canonical = normalize_ref(f"«artifact:{body}»")
        if canonical is not None and canonical not in refs:
            refs.append(canonical)
    return refs


def canonicalize_artifact_refs(declared: Iterable[str], text: str | None) -> list[str]:
    """Declared refs first, then refs mentioned in ``text`` in first-mention order, all
    canonical and deduplicated; a declared string that is no reference is dropped."""
    out: list[str] = []
    for ref in [*(normalize_ref(r) for r in declared), *refs_mentioned_in(text)]:
        if ref is not None and ref not in out:
            out.append(ref)
    return out


# -- lists ----------------------------------------------------------------------------------

T = TypeVar("T", bound=Artifact)


@type_alias("list")
class ListArtifact(Artifact, Generic[T]):
    """An ordered list of artifacts. The model reads it as a bounded digest; its iterands
    are reachable artifacts, each resolvable by its own reference."""

    items: list[T] = msgspec.field(default_factory=list)


# -- the registry ---------------------------------------------------------------------------


class ArtifactRegistry:
    """The artifacts of one conversation, by canonical reference. Not thread-safe."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._top: dict[str, Artifact] = {}
        self._reachable: dict[str, Artifact] = {}
        # the module's shared generator unless one is given: seeding a new one reads the OS's
        # entropy, a system call per conversation restored (refs need only be unique here)
        self._choice = random.choice if rng is None else rng.choice

    def register(self, artifact: Artifact) -> str:
        """Register ``artifact`` as top-level (minting its ref if it has none) and index every
        artifact reachable from it. Returns the canonical ref.

        Raises:
            MissingTypeAliasError: the artifact's class (or a reachable one's) has no alias.
            ValueError: the artifact could not be stored (a lone surrogate, nesting deeper
                than ``MAX_NESTING``, a value msgspec cannot encode); nothing is registered.
        """
        if artifact.artifact_ref is not None and self._top.get(artifact.artifact_ref) is artifact:
            return artifact.artifact_ref  # registered already: skip the checks and the walk
        _check(artifact)
        ref = self._ensure_ref(artifact)
        if self._top.get(ref) is artifact:
            return ref
        self._top[ref] = artifact
        self._walk(artifact, set())
        return ref

    def index_reachable(self, artifact: Artifact) -> str:
        """Index ``artifact`` as reachable: resolvable, but not a top-level entry.

        Raises:
            MissingTypeAliasError, ValueError: as ``register``.
        """
        _check(artifact)
        ref = self._ensure_ref(artifact)
        self._reachable[ref] = artifact
        self._walk(artifact, set())
        return ref

    def get(self, ref: str | None) -> Artifact | None:
        """The artifact under ``ref`` in any documented spelling, or None."""
        key = normalize_ref(ref)
        if key is None:
            return None
        return self._top.get(key) or self._reachable.get(key)

    def contains(self, ref: str | None) -> bool:
        return self.get(ref) is not None

    def get_all_artifacts(self) -> dict[str, Artifact]:
        """Top-level artifacts by ref, in registration order (a copy)."""
        return dict(self._top)

    def get_all_artifacts_including_reachable(self) -> dict[str, Artifact]:
        combined = dict(self._top)
        for ref, artifact in self._reachable.items():
            combined.setdefault(ref, artifact)
        return combined

    def size(self) -> int:
        return len(self._top)

    def __len__(self) -> int:
        return len(self._top)

    def clear(self) -> None:
        """Forget every artifact, the reachable tier included."""
        self._top.clear()
        self._reachable.clear()

    def _ensure_ref(self, artifact: Artifact) -> str:
        existing = normalize_ref(artifact.artifact_ref)
        if existing is not None:
            artifact.artifact_ref = existing
            return existing
        alias = alias_of(type(artifact))
        if alias is None:
            raise MissingTypeAliasError(
                f"Artifact class {_qualified(type(artifact))} has no type alias; "
                f'decorate it with @type_alias("...")'
            )
        while True:
            short = "".join(self._choice(_ID_CHARS) for _ in range(6))
            ref = f"«artifact:{alias}~{short}»"
            if ref not in self._top and ref not in self._reachable:
                artifact.artifact_ref = ref
                return ref

    def _walk(self, node: object, seen: set[int]) -> None:
        """Index every artifact below ``node`` (not ``node`` itself) as reachable."""
        if id(node) in seen:
            return
        seen.add(id(node))
        for child in _children(node):
            if isinstance(child, Artifact) and id(child) not in seen:
                self._reachable[self._ensure_ref(child)] = child
            self._walk(child, seen)


def _check(artifact: Artifact) -> None:
    name = f"{type(artifact).__name__} {artifact.artifact_ref or '(unregistered)'}"
    check_value(artifact, f"artifact {name}")


def _children(node: object) -> Iterable[object]:
    if isinstance(node, msgspec.Struct):
        return [getattr(node, name) for name in node.__struct_fields__]
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return [getattr(node, f.name) for f in dataclasses.fields(node)]
    if isinstance(node, list | tuple | set | frozenset):
        return list(node)
    if isinstance(node, dict):
        return list(node.values())
    return ()
