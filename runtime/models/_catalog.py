"""The model catalog: what each model can take and emit, and how a seat's grade finds one.

A ``ModelSpec`` is plain frozen data, so a catalog is a list of them that loads from JSON or
TOML with msgspec. ``ModelCatalog.default()`` ships current Anthropic, OpenAI and Bedrock
models; ``ModelCatalog.load(path)`` reads a user's file, and ``merged`` lays it over another.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import msgspec

from .._roles import Grade
from ..errors import UncorrectableLLMError
from ._catalog_data import DEFAULT_SPECS
from ._spec import ModelSpec


class _CatalogFile(msgspec.Struct, forbid_unknown_fields=True):
    models: list[ModelSpec]


# Rank order, for a grade with no entry: the nearest larger grade, then the nearest smaller.
_GRADES = list(Grade)


class ModelCatalog:
    """An immutable set of ``ModelSpec``s by id, in a preference order. Thread-safe to share."""

    def __init__(self, specs: Iterable[ModelSpec] = ()) -> None:
        self._specs: dict[str, ModelSpec] = {}
        for spec in specs:
            self._specs[spec.id] = spec

    def __contains__(self, model_id: object) -> bool:
        return model_id in self._specs

    def __iter__(self) -> Iterator[ModelSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def get(self, model_id: str) -> ModelSpec:
        """The spec for ``model_id``.

        Raises:
            ValueError: no such model; the message lists the ids the catalog knows.
        """
        try:
            return self._specs[model_id]
        except KeyError:
            known = ", ".join(sorted(self._specs))
            raise ValueError(
                f"Model '{model_id}' is not in the catalog. Known models: {known}. "
                "Add it with ModelCatalog.load(path).merged(...)."
            ) from None

    def merged(self, other: ModelCatalog) -> ModelCatalog:
        """This catalog with ``other``'s entries laid over it; ``other`` wins on an id."""
        return ModelCatalog([*self, *other])

    def for_grade(self, grade: Grade, providers: Sequence[str] | None = None) -> ModelSpec:
        """The spec serving ``grade``: the first entry of that grade among ``providers``
        (in the order given), else of the nearest larger grade, else the nearest smaller.

        Raises:
            UncorrectableLLMError: no entry of any grade is available from ``providers``.
        """
        order = list(providers) if providers is not None else None
        for candidate in _grade_preference(grade):
            found = self._first_of(candidate, order)
            if found is not None:
                return found
        raise UncorrectableLLMError(
            f"No model in the catalog serves grade {grade.value} from providers {order}."
        )

    def _first_of(self, grade: Grade, providers: list[str] | None) -> ModelSpec | None:
        graded = [s for s in self if s.grade is grade]
        if providers is None:
            return graded[0] if graded else None
        for provider in providers:
            for spec in graded:
                if spec.provider == provider:
                    return spec
        return None

    @classmethod
    def load(cls, path: str | Path) -> ModelCatalog:
        """Read a catalog file: ``{"models": [ModelSpec, ...]}`` as ``.json`` or ``.toml``
        (``[[models]]`` tables).

        Raises:
            ValueError: the suffix is neither, or the file does not describe valid specs.
        """
        path = Path(path)
        if path.suffix not in (".json", ".toml"):
            raise ValueError(f"Catalog {path} must be a .json or .toml file.")
        data = path.read_bytes()
        try:
            if path.suffix == ".json":
                parsed = msgspec.json.decode(data, type=_CatalogFile)
            else:
                parsed = msgspec.toml.decode(data, type=_CatalogFile)
        except msgspec.DecodeError as exc:  # ValidationError included
            raise ValueError(f"Catalog {path} is not a valid model catalog: {exc}") from exc
        return cls(parsed.models)

    @classmethod
    def default(cls) -> ModelCatalog:
        """The models parlour ships, most preferred first within each provider."""
        return cls(DEFAULT_SPECS)


def _grade_preference(grade: Grade) -> list[Grade]:
    at = _GRADES.index(grade)
    return [grade, *_GRADES[at + 1 :], *reversed(_GRADES[:at])]


def resolve_grade(
    grade: Grade | None,
    catalog: ModelCatalog | None = None,
    providers: Sequence[str] | None = None,
) -> ModelSpec:
    """The spec a conversation's declared grade resolves to.

    Raises:
        UncorrectableLLMError: no grade is declared (the seat never said which model), or
            nothing in the catalog serves it from ``providers``.
    """
    if grade is None:
        raise UncorrectableLLMError(
            "The conversation declares no grade, so no model can be resolved for it. "
            "Declare one (context.grade = Grade.MEDIUM) or bind a ModelBinding."
        )
    return (catalog or ModelCatalog.default()).for_grade(grade, providers)
