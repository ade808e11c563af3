"""The library's source tree read as syntax, for the architecture tests: its modules, what
each imports (with or without the type-only imports), and the circles in an import graph.
Nothing here imports the library."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"runtime": "parlour.runtime", "stores": "parlour.stores", "actors": "parlour.actors"}


def _modules() -> Iterator[tuple[str, Path]]:
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((package, *parts)), path


MODULES = dict(_modules())
PACKAGES = {module for module, path in MODULES.items() if path.name == "__init__.py"}


@functools.cache
def parse(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text())


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_from(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of the module ``node`` (in ``module``) imports from."""
    base = node.module or ""
    if not node.level:
        return base
    anchor = module.split(".")
    anchor = anchor if module in PACKAGES else anchor[:-1]
    anchor = anchor[: len(anchor) - node.level + 1]
    return ".".join([*anchor, base] if base else anchor)


def imports(module: str, *, type_only: bool = False) -> set[str]:
    """The parlour modules ``module`` imports anywhere (functions included); the imports
    under ``if TYPE_CHECKING:`` only when ``type_only``. ``from package import name``
    counts as the submodule when one exists."""
    tree = parse(module)
    skipped = set()
    if not type_only:
        skipped = {
            id(n)
            for top in ast.walk(tree)
            if isinstance(top, ast.If) and is_type_checking(top)
            for n in ast.walk(top)
        }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(module, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != module}


def graph(*, type_only: bool = False) -> dict[str, set[str]]:
    """Every module's imports (see ``imports``)."""
    return {module: imports(module, type_only=type_only) for module in MODULES}


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
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

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def package_of(module: str) -> str:
    """The top package: ``parlour.runtime``, ``parlour.stores`` or ``parlour.actors``."""
    return ".".join(module.split(".")[:2])
