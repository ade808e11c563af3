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


def test_no_doc_or_message_installs_parlour_from_a_registry_where_it_is_not_published() -> None:
    """parlour installs from its checkout (``pip install -e '.[serve]'``); a line telling a
    user to ``pip install 'parlour[...]'`` would send them to a package that is not there."""
    sources = [
        *ROOT.glob("*.md"),
        *(p for package in PACKAGES for p in (ROOT / package).rglob("*.md")),
        *(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")),
    ]
    registry = re.compile(r"pip install ['\"]?parlour\b")
    found = [f"{p.relative_to(ROOT)}" for p in sources if registry.search(p.read_text())]
    assert found == []
