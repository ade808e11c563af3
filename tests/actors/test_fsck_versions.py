"""``parlour fsck`` checks the stored versions too: a version record that does not read is
listed with its conversation and version (exit 1, one line on stderr), and
``--quarantine`` moves the unreadable run aside, leaving the current record and every
readable version as they were."""

from __future__ import annotations

from pathlib import Path

import pytest

from parlour.actors.app._cli import main
from parlour.runtime import ConversationContext, OutgoingMessage
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore
from parlour.stores._ids import conversation_key
from parlour.stores.lmdb import _versions


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_fsck_lists_a_damaged_version_and_quarantine_moves_its_run_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    with LmdbStore(data, keep_versions=None) as store:
        c = ConversationContext("conv-1", user_id="alice")
        c.add_user_message("hello")
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        for i in range(5):
            c.add_message(OutgoingMessage(f"answer {i}"))
            c.stored_version = store.save_context(c.to_snapshot(), "alice")
        current = encode_snapshot(c.to_snapshot())
        key = _versions.version_key(conversation_key("conv-1"), 4)
        with store._directory.env.begin(write=True) as txn:
            raw = bytes(txn.get(key, db=store._dbs.versions))
            txn.put(key, raw[:9] + b"\xc1", db=store._dbs.versions)
    status, out, err = _run(capsys, "fsck", "--data-dir", str(data))
    assert status == 1 and "conv-1" in out and "stored versions that do not read" in out
    assert err == "parlour fsck: 3 damaged versions; --quarantine moves them away\n"
    status, out, err = _run(capsys, "fsck", "--quarantine", "--data-dir", str(data))
    assert status == 0 and err == ""
    status, out, err = _run(capsys, "fsck", "--data-dir", str(data))
    assert status == 0 and "do not read" not in out and err == ""
    with LmdbStore(data, readonly=True) as store:
        assert [v.version for v in store.get_version_history("conv-1", "alice")] == [6, 3, 2, 1]
        loaded = store.load("conv-1", "alice")
        assert loaded is not None and encode_snapshot(loaded) == current
        [moved] = store.quarantined("conv-1")
        assert [v for v, _ in moved.versions] == [4, 5, 6]
