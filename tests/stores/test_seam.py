"""What ``parlour.stores`` takes from the rest of parlour, read from its source with ``ast``:
of the runtime only the snapshots and their codec, the errors and ``PojoBlock`` (and, for the
conformance suite, ``ConversationContext``); and no wing of it (``lmdb/``, ``postgres/``)
imports another. (That nothing imports ``parlour.actors`` is ``test_architecture``'s.)"""

from __future__ import annotations

import ast
from pathlib import Path

STORES = Path(__file__).resolve().parents[2] / "stores"
WINGS = ("lmdb", "postgres")
RUNTIME_USED = {"parlour.runtime.snapshots", "parlour.runtime.errors", "parlour.runtime.blocks"}
SUITE = {"testing.py", "_contract.py"}  # they build snapshots with ConversationContext


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every import of the module: (level, module name); level 0 is absolute."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.extend((0, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
    return found


def _by_module() -> dict[str, list[tuple[int, str]]]:
    return {str(path.relative_to(STORES)): _imports(path) for path in sorted(STORES.rglob("*.py"))}


def test_the_stores_take_of_the_runtime_only_snapshots_errors_and_pojo_blocks() -> None:
    taken: dict[str, set[str]] = {}
    for module, imports in _by_module().items():
        for level, name in imports:
            if level == 0 and name.startswith("parlour"):
                taken.setdefault(name, set()).add(module)
    assert set(taken) <= RUNTIME_USED | {"parlour.runtime"}, taken
    assert taken.get("parlour.runtime", set()) <= SUITE, taken["parlour.runtime"]
    assert set(taken) >= RUNTIME_USED  # the sentence in PACKAGE.md names each one used


def test_no_wing_imports_another_and_the_root_imports_wings_only_to_export_them() -> None:
    for module, imports in _by_module().items():
        wing = module.split("/")[0] if "/" in module else None
        for level, name in imports:
            first = name.split(".")[0]
            if wing is not None and level == 2:  # from the root: from .._records import ...
                assert first not in WINGS, (module, name)
            if wing is None and level == 1 and first in WINGS:
                assert module == "__init__.py", (module, name)
