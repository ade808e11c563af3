"""The examples in the README and in each PACKAGE.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pykka
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("actors", "runtime", "stores")
DOCS = [
    ROOT / "README.md",
    *sorted(ROOT.glob("*/PACKAGE.md")),
    *sorted(p for p in ROOT.glob("*/*/PACKAGE.md") if p.parts[-3] in PACKAGES),
]
EXAMPLES = [
    pytest.param(code, id=f"{doc.relative_to(ROOT)}-{n}")
    for doc in DOCS
    for n, code in enumerate(re.findall(r"```python\n(.*?)```", doc.read_text(), re.S))
]


@pytest.mark.parametrize("code", EXAMPLES)
def test_the_example_runs(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples may create ./parlour-data
    # dont_inherit: this module's `from __future__ import annotations` must not leak in
    exec(compile(code, "<example>", "exec", dont_inherit=True), {"__name__": "example"})
    pykka.ActorRegistry.stop_all()
