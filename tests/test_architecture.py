"""The shape of the source tree, checked over its syntax: module size, import cycles, layers.

A newcomer reads the code in an hour only while modules stay small, imports run one way and
no two modules need each other. These tests read the source with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"runtime": "parlour.runtime", "stores": "parlour.stores", "actors": "parlour.actors"}
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


def _modules() -> Iterator[tuple[str, Path]]:
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((package, *parts)), path


MODULES = dict(_modules())


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path) -> set[str]:
    """The parlour modules ``module`` imports anywhere (functions included), type-only
    imports left out. ``from package import name`` counts as the submodule when one exists."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(n)
        for top in ast.walk(tree)
        if isinstance(top, ast.If) and _is_type_checking(top)
        for n in ast.walk(top)
    }
    found: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != module}


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in GRAPH[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in GRAPH:
        if node not in index:
            visit(node)
    return found


def _package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_module_is_over_the_size_limit_without_saying_why() -> None:
    too_long = []
    for module, path in MODULES.items():
        lines = len(path.read_text().splitlines())
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > MAX_LINES and REASON not in docstring and module not in BEING_REWORKED:
            too_long.append(f"{module} ({lines} lines)")
    assert too_long == []


def test_no_two_modules_import_each_other_even_inside_functions() -> None:
    assert _cycles() == []


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if _package_of(target) != _package_of(module)
        and _package_of(target) not in LAYER_BELOW[_package_of(module)]
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
