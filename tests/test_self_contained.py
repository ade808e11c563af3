"""The repository is self-contained: no text points at a document it does not hold.

A contract is stated in words where it is kept (a test's name and docstring, a code
comment), never as a number in a catalogue outside the repository that a newcomer cannot
open. The scan reads every Python and Markdown file of the source folders, the tests, the
benchmarks and the README.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("runtime", "stores", "actors", "tests", "benchmarks")
# a numbered behaviour or decision of the outside catalogue, or the catalogue itself
FOREIGN = re.compile(r"\b[BD][0-9]{1,3}\b|behaviors\.md|conversation" r"-internals")
# Folders and files kept out of the scan: none. (A branch that must keep an old reference
# for a while names the path here, with the reason, and empties it when it lands.)
STILL_OWNED_ELSEWHERE: tuple[str, ...] = ()


def _scanned_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in SCANNED:
        files += sorted((ROOT / folder).rglob("*.py")) + sorted((ROOT / folder).rglob("*.md"))
    return [
        f for f in files if not f.relative_to(ROOT).as_posix().startswith(STILL_OWNED_ELSEWHERE)
    ]


def test_no_file_cites_a_document_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {match.group()}"
        for path in _scanned_files()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in FOREIGN.finditer(line)
    ]
    assert found == []


def test_the_scan_sees_a_numbered_reference_and_the_allow_list_names_real_paths() -> None:
    assert FOREIGN.search("the head freezes (" + "B" + "41)")
    assert not FOREIGN.search("a B-tree of 41 pages, base64, sha256")
    assert all((ROOT / entry).exists() for entry in STILL_OWNED_ELSEWHERE)
