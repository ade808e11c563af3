"""The core of ``parlour.actors`` (its top-level modules) knows none of its wings: the
agent host, the app and the cluster import the core, never the reverse. Read with ``ast``;
type-only imports count too."""

from __future__ import annotations

import ast
from pathlib import Path

ACTORS = Path(__file__).resolve().parents[2] / "actors"
WINGS = ("agent", "app", "cluster")


def _wings_imported(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module or ''}.{a.name}" for a in node.names]
            relative = node.level == 1
        elif isinstance(node, ast.Import):
            names, relative = [a.name for a in node.names], False
        else:
            continue
        for name in names:
            parts = name.strip(".").split(".")
            wing = parts[0] if relative else ".".join(parts[:3])
            if wing in WINGS or wing in {f"parlour.actors.{w}" for w in WINGS}:
                found.append(f"{path.name}: {name}")
    return found


def test_no_top_level_module_of_the_actors_core_imports_a_wing() -> None:
    core = [*sorted(ACTORS.glob("_*.py")), ACTORS / "tuning.py"]
    core = [path for path in core if path.name != "__init__.py"]  # the facade re-exports
    assert len(core) > 10
    assert [hit for path in core for hit in _wings_imported(path)] == []


def test_the_check_sees_an_import_of_a_wing_in_any_form(tmp_path: Path) -> None:
    for line in (
        "from .agent import _joiners",
        "from .agent._events import AgentEvent",
        "import parlour.actors.cluster",
        "from parlour.actors.app import serve",
    ):
        module = tmp_path / "_probe.py"
        module.write_text(f"if TYPE_CHECKING:\n    {line}\n")
        assert _wings_imported(module), line
