"""The shape of the source tree, checked over its syntax: module size, import cycles (type-only
imports too), package folders that need each other, layers.

A newcomer reads the code in an hour only while modules stay small, imports run one way and
no two modules, nor two package folders, need each other. These tests read the source with
``ast`` (through ``tests/_source_tree.py``); nothing is imported. The shape of the classes is
checked in ``test_architecture_shape``.
"""

from __future__ import annotations

import ast
import tomllib

from tests._source_tree import (
    FOLDERS,
    MODULES,
    PACKAGES,
    ROOT,
    cycles,
    graph,
    package_of,
)

MAX_LINES = 400
# A module may grow past MAX_LINES only when its docstring says why, in a line starting so.
REASON = "Why this module is long:"
# Modules another branch is reworking right now may stay long until that work lands; the
# list is emptied when it is merged (it is empty now).
BEING_REWORKED: set[str] = set()
LAYER_BELOW = {
    "parlour.runtime": (),
    "parlour.stores": ("parlour.runtime",),
    "parlour.actors": ("parlour.runtime", "parlour.stores"),
}
GRAPH = graph()
# The same, with the imports under ``if TYPE_CHECKING:``: a circle of annotations is still
# two modules a reader must take in together.
TYPED_GRAPH = graph(type_only=True)


# The one package whose top-level modules and wings still import each other: its top level
# holds both the base every wing builds on (blocks, errors, roles, messages) and the
# conversation built from the wings (context, rendering). Splitting the two is the next step
# (runtime/INTERNALS.md); until then only its sibling wings are held apart.
TOP_LEVEL_SHARED_WITH_WINGS = {"parlour.runtime"}


def _unit(module: str) -> str:
    """The folder a module lives in, as a package name: a subpackage is one unit, and a
    package's own top-level modules (``parlour.actors._service``) are another."""
    return module if module in PACKAGES else module.rsplit(".", 1)[0]


def _unit_imports() -> dict[tuple[str, str], list[str]]:
    """Each unit's imports of another unit, type-only ones included, with the module imports
    behind them. A package's ``__init__`` re-exporting its own subpackages' names is its
    public face, not its modules reaching down, so those imports are left out."""
    found: dict[tuple[str, str], list[str]] = {}
    for module, targets in TYPED_GRAPH.items():
        for target in sorted(targets):
            if module in PACKAGES and target.startswith(f"{module}."):
                continue
            if _unit(module) != _unit(target):
                found.setdefault((_unit(module), _unit(target)), []).append(f"{module} -> {target}")
    return found


def test_no_module_is_over_the_size_limit_without_saying_why() -> None:
    too_long = []
    for module, path in MODULES.items():
        lines = len(path.read_text().splitlines())
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > MAX_LINES and REASON not in docstring and module not in BEING_REWORKED:
            too_long.append(f"{module} ({lines} lines)")
    assert too_long == []


def test_no_two_modules_import_each_other_even_inside_functions() -> None:
    assert cycles(GRAPH) == []


def test_no_two_modules_import_each_other_even_for_type_annotations_only() -> None:
    found = cycles(TYPED_GRAPH)
    edges = [
        f"{module} -> {target}" + ("" if target in GRAPH[module] else " (type-only)")
        for circle in found
        for module in circle
        for target in sorted(TYPED_GRAPH[module] & set(circle))
    ]
    assert found == [], "modules in a circle, type-only imports counted:\n" + "\n".join(edges)


def test_no_two_package_folders_import_each_other_even_for_type_annotations_only() -> None:
    imports = _unit_imports()
    both_ways = [
        f"{one} <-> {other}:\n  " + "\n  ".join(imports[one, other] + imports[other, one])
        for one, other in sorted(imports)
        if one < other and (other, one) in imports and one not in TOP_LEVEL_SHARED_WITH_WINGS
    ]
    assert both_ways == [], "package folders importing each other:\n" + "\n".join(both_ways)


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if package_of(target) != package_of(module)
        and package_of(target) not in LAYER_BELOW[package_of(module)]
    ]
    assert upward == []


def test_every_package_folder_is_listed_and_mapped_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {}
    for init in sorted(path for folder in FOLDERS for path in (ROOT / folder).rglob("__init__.py")):
        folder = init.parent.relative_to(ROOT)
        package = ".".join((FOLDERS[folder.parts[0]], *folder.parts[1:]))
        folders[package] = folder.as_posix()
    assert sorted(config["packages"]) == sorted(folders)
    assert config["package-dir"] == folders
