"""``parlour import``, run as a person runs it (a subprocess): a file a load could not read
back, however deep it nests, is refused in one line before anything is written; a mistyped
``--data-dir`` is refused and nothing is created there; what it imports keeps each version's
save time and the conversation's creation time."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from parlour.runtime import ConversationContext, OutgoingMessage
from parlour.runtime.blocks import PojoBlock
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore
from parlour.stores.testing import Ticks

_CLI = [
    sys.executable,
    "-c",
    "import sys; from parlour.actors.app._cli import main; sys.exit(main())",
]


def _parlour(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_CLI, *argv], capture_output=True, text=True, timeout=120, check=False)


def _refused(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a refusal prints (the exit status 1, no traceback)."""
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parlour import: "), done.stderr
    return lines[0]


def _nest(depth: int) -> str:
    return "[" * depth + "]" * depth


def _export(tmp_path: Path, *, usage: str = '{"type":"model_call"}', pojo: str = "1") -> Path:
    """An export file of one conversation whose ledger entry holds ``usage`` and whose
    PojoBlock value holds ``pojo`` (JSON text spliced in: any nesting)."""
    context = ConversationContext("deep-1", user_id="ann")
    context.add_user_message("hi")
    context.add_message(OutgoingMessage("", [PojoBlock(value={"k": "POJO"})]))
    context.usage_ledger.append({"type": "USAGE"})
    snapshot = encode_snapshot(context.to_snapshot()).decode()
    snapshot = snapshot.replace('{"type":"USAGE"}', usage).replace('"POJO"', pojo)
    document = (
        '{"format":"parlour-conversation","format_version":1,"conversation_id":"deep-1",'
        f'"user_id":"ann","exported_at":"2026-01-01T00:00:00Z","snapshot":{snapshot}}}'
    )
    path = tmp_path / "export.json"
    path.write_text(document)
    return path


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    LmdbStore(path).close()
    return path


@pytest.mark.parametrize(
    ("usage", "pojo"),
    [
        (f'{{"type":"model_call","x":{_nest(64)}}}', "1"),  # the ledger entry 65 deep
        (f'{{"type":"model_call","x":{_nest(989)}}}', "1"),  # 990 deep
        (f'{{"type":"model_call","x":{_nest(5000)}}}', "1"),
        ('{"type":"model_call"}', _nest(70)),  # the PojoBlock value
        ('{"type":"model_call"}', _nest(50_000)),
    ],
    ids=["ledger 65", "ledger 990", "ledger 5,000", "value 70", "value 50,000"],
)
def test_an_export_a_load_could_not_read_is_refused_in_one_line_and_nothing_is_written(
    tmp_path: Path, store_dir: Path, usage: str, pojo: str
) -> None:
    line = _refused(
        _parlour(
            "import",
            "ann",
            str(_export(tmp_path, usage=usage, pojo=pojo)),
            "--data-dir",
            str(store_dir),
        )
    )
    assert "nothing was imported" in line or "cannot load" in line or "nests" in line
    with LmdbStore(store_dir, readonly=True) as store:
        assert store.list_conversations("ann") == []


def test_an_export_nested_past_any_stack_outside_the_snapshot_is_refused_in_one_line(
    tmp_path: Path, store_dir: Path
) -> None:
    path = _export(tmp_path)
    path.write_text(path.read_text()[:-1] + f',"extra":{_nest(100_000)}}}')
    _refused(_parlour("import", "ann", str(path), "--data-dir", str(store_dir)))
    with LmdbStore(store_dir, readonly=True) as store:
        assert store.list_conversations("ann") == []


def test_an_import_into_a_directory_that_does_not_exist_is_refused_and_creates_nothing(
    tmp_path: Path,
) -> None:
    typo = tmp_path / "dtaa"
    line = _refused(_parlour("import", "ann", str(_export(tmp_path)), "--data-dir", str(typo)))
    assert str(typo) in line and "nothing was imported" in line
    assert not typo.exists()
    bad = _export(tmp_path, usage=f'{{"x":{_nest(70)}}}')
    _refused(_parlour("import", "ann", str(bad), "--data-dir", str(typo)))
    assert not typo.exists()


def test_an_import_keeps_each_versions_save_time_and_the_conversations_creation_time(
    tmp_path: Path,
) -> None:
    """Exported with its versions and without, imported into an empty directory: the kept
    versions and the listing carry the times of the original saves, not the import's."""
    clock = Ticks(dt.datetime(2025, 3, 1, 12, tzinfo=dt.UTC))
    source, copies = tmp_path / "source", tmp_path / "copies"
    context = ConversationContext("c1", user_id="ann")
    context.add_user_message("first")
    with LmdbStore(source, now=clock) as store:
        context.stored_version = store.create_context(context.to_snapshot(), "ann")
        for turn in range(3):
            context.add_user_message(f"turn {turn}")
            context.stored_version = store.save_context(context.to_snapshot(), "ann")
        history = store.get_version_history("c1", "ann")
        [summary] = store.list_conversations("ann")
    for flags in (["--versions"], []):
        into = copies / ("all" if flags else "current")
        into.mkdir(parents=True)
        exported = tmp_path / "c1.json"
        done = _parlour(
            "export", "ann", "c1", *flags, "--output", str(exported), "--data-dir", str(source)
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(exported.read_text())["saved_at"] is not None
        done = _parlour("import", "ann", str(exported), "--data-dir", str(into))
        assert done.returncode == 0, done.stderr
        with LmdbStore(into, readonly=True) as store:
            kept = store.get_version_history("c1", "ann")
            [listed] = store.list_conversations("ann")
        if flags:  # every version, at its own time
            assert [v.saved_at for v in kept] == [v.saved_at for v in history]
            assert listed.created_at == summary.created_at
        else:  # the current version alone, at its time
            assert [v.saved_at for v in kept] == [history[0].saved_at]
        assert listed.updated_at == summary.updated_at
