"""The three layers install under one namespace and import only downward."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

LAYERS = {
    "parlour.runtime": ("parlour.stores", "parlour.actors"),
    "parlour.stores": ("parlour.actors",),
    "parlour.actors": (),
}


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_a_layer_loads_nothing_above_it(package: str, tmp_path: Path) -> None:
    forbidden = LAYERS[package]
    code = (
        f"import sys, {package}\n"
        f"bad = [m for m in sys.modules if m.startswith({forbidden!r})]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    # run from a temporary directory: parlour must import from its installation
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_top_level_runtime_stores_or_actors_module_is_installed(tmp_path: Path) -> None:
    code = (
        "import importlib.util as u\n"
        "print([n for n in ('runtime', 'stores', 'actors') if u.find_spec(n)])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_all_lists_exactly_the_public_names(package: str) -> None:
    # its order (isort-style) is ruff's RUF022 to keep
    module = importlib.import_module(package)
    public = {n for n in vars(module) if not n.startswith("_")}
    public -= {"annotations", "logger"}
    public = {n for n in public if not isinstance(getattr(module, n), type(module))}
    assert len(module.__all__) == len(set(module.__all__))
    assert set(module.__all__) == public
