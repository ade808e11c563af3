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


def _reads_the_system_time(path: Path) -> list[str]:
    """Calls of ``time.monotonic``/``time.time``/``time.perf_counter`` and ``*.now()`` on a
    ``datetime`` in ``path``: a deadline read there would escape the injected clock."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = ast.unparse(node.func.value)
        if (owner == "time" and node.func.attr in {"monotonic", "time", "perf_counter"}) or (
            node.func.attr in {"now", "utcnow"} and "datetime" in owner
        ):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_every_deadline_of_the_core_reads_the_injected_clock() -> None:
    assert [
        hit for path in sorted(ACTORS.glob("*.py")) for hit in _reads_the_system_time(path)
    ] == []


def test_the_clock_check_sees_each_way_of_reading_the_system_time(tmp_path: Path) -> None:
    for line in ("time.monotonic()", "time.time()", "dt.datetime.now(dt.UTC)"):
        module = tmp_path / "_probe.py"
        module.write_text(f"deadline = {line} + 5\n")
        assert _reads_the_system_time(module), line
