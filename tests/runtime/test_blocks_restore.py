"""Blocks by msgspec's rules, and a restore that never imports what stored data names.

A stored PojoBlock names its class as ``module:QualName``. Restore resolves that path only
among the classes the application registered (artifact type aliases) and the modules the
process has already imported; anything else comes back as a JsonBlock of the same value.
"""

from __future__ import annotations

import inspect
import sys
import types
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parlour.runtime import Artifact, ConversationContext, type_alias
from parlour.runtime.blocks import (
    BLOCK_KINDS,
    ContentBlock,
    ContentBlockSnapshot,
    JsonBlock,
    PojoBlock,
    TextBlock,
    revive,
)
from parlour.runtime.snapshots import decode_snapshot, encode_snapshot


class Citation(msgspec.Struct):
    title: str
    year: int


def _stored_pojo(class_path: str, value: dict[str, object]) -> ContentBlock:
    """A PojoBlock as a decoded record holds it: a dict value and the stored path."""
    return ContentBlockSnapshot(
        type="pojo", fields={"value": value, "class_path": class_path}
    ).to_block()


# -- blocks by msgspec's rules ----------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(BLOCK_KINDS))
def test_every_block_kind_is_keyword_only_and_frozen(kind: str) -> None:
    cls: Any = BLOCK_KINDS[kind]
    parameters = inspect.signature(cls).parameters.values()
    assert parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)
    assert cls.__struct_config__.frozen is True
    with pytest.raises(TypeError):
        cls("x")


def test_a_text_block_refuses_a_positional_argument() -> None:
    with pytest.raises(TypeError, match="positional"):
        TextBlock("x")  # type: ignore[call-arg]
    assert TextBlock(text="x").text == "x"


def test_the_stored_kind_table_is_derived_from_the_union() -> None:
    assert set(BLOCK_KINDS.values()) == set(typing.get_args(ContentBlock))
    assert all(cls.__struct_config__.tag == kind for kind, cls in BLOCK_KINDS.items())


# -- restore never imports ----------------------------------------------------------------------


def test_a_stored_path_to_an_unimported_module_is_not_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module with an import-time side effect, named by a stored record, stays unimported,
    its side effect never runs, and the value comes back as JSON."""
    flag = tmp_path / "imported.flag"
    (tmp_path / "parlour_side_effect_mod.py").write_text(
        f"import pathlib\npathlib.Path({str(flag)!r}).write_text('ran')\nclass Payload:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("parlour_side_effect_mod", None)
    stored = ConversationContext("c-import", user_id="u")
    stored.put_main_objective("data", {"a": 1})
    snapshot = stored.to_snapshot()
    slot = msgspec.structs.replace(
        snapshot.objective[0],
        block=PojoBlock(value={"a": 1}, class_path="parlour_side_effect_mod:Payload"),
    )
    raw = encode_snapshot(msgspec.structs.replace(snapshot, objective=[slot]))

    restored = decode_snapshot(raw, "c-import").to_conversation()

    assert "parlour_side_effect_mod" not in sys.modules
    assert not flag.exists()
    assert restored.get_main_objective()["data"] == JsonBlock(json='{"a":1}')


@pytest.mark.parametrize(
    "class_path",
    [
        "",
        "nocolon",
        ":Citation",
        "os:",
        "os:1abc",
        "os:path..sep",
        "os:sep",  # an attribute that is no class
        "os:getcwd",  # a function
        "o s:Thing",
        "os.:Thing",
        "tests.runtime.test_blocks_restore:<locals>.X",
        "no_such_module_anywhere:Thing",
    ],
)
def test_an_odd_or_unresolvable_path_degrades_to_json_with_the_same_value(
    class_path: str,
) -> None:
    block = _stored_pojo(class_path, {"title": "t", "year": 1})
    assert block == JsonBlock(json='{"title":"t","year":1}')


@given(st.text(max_size=40))
def test_property_no_stored_path_raises_or_imports(class_path: str) -> None:
    before = set(sys.modules)
    block = revive(PojoBlock(value={"k": [1, "v"]}, class_path=class_path))
    assert set(sys.modules) == before
    assert isinstance(block, PojoBlock | JsonBlock)
    if isinstance(block, JsonBlock):
        assert msgspec.json.decode(block.json) == {"k": [1, "v"]}


def test_an_imported_application_class_still_round_trips_typed() -> None:
    c = ConversationContext("c-typed", user_id="u")
    c.put_main_objective("cite", Citation(title="On Actors", year=1973))
    raw = encode_snapshot(c.to_snapshot())
    restored = decode_snapshot(raw, "c-typed").to_conversation()
    block = restored.get_main_objective()["cite"]
    assert isinstance(block, PojoBlock)
    assert block.value == Citation(title="On Actors", year=1973)


def test_a_registered_artifact_class_resolves_even_where_getattr_cannot() -> None:
    """A class defined in a function has a ``<locals>`` path no module lookup can follow;
    its type alias registered it, so restore still finds it."""

    @type_alias("test:restore-local")
    class LocalNote(Artifact):
        body: str

    block = _stored_pojo(f"{LocalNote.__module__}:{LocalNote.__qualname__}", {"body": "b"})
    assert isinstance(block, PojoBlock)
    assert block.value == LocalNote(body="b")


def test_a_class_that_refuses_the_data_degrades_to_json() -> None:
    block = _stored_pojo(f"{__name__}:Citation", {"title": "t", "year": "not a year"})
    assert block == JsonBlock(json='{"title":"t","year":"not a year"}')


def test_a_stored_path_to_an_imported_non_struct_class_never_raises() -> None:
    block = _stored_pojo("datetime:datetime", {"a": 1})
    assert block == JsonBlock(json='{"a":1}')


def test_a_lazy_module_attribute_hook_never_runs_for_a_stored_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A module's ``__getattr__`` may import on demand; a stored path never triggers it."""
    called: list[str] = []
    lazy = types.ModuleType("parlour_lazy_mod")

    def lazy_getattr(name: str) -> object:
        called.append(name)
        raise AttributeError(name)

    lazy.__getattr__ = lazy_getattr  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "parlour_lazy_mod", lazy)
    block = _stored_pojo("parlour_lazy_mod:Submodule.Thing", {"a": 1})
    assert block == JsonBlock(json='{"a":1}')
    assert called == []
