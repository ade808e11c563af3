"""LmdbStore's collaborators on their own, each over a real directory: ``Directory`` (reads,
writes, close), ``History`` (its retention its own state) and ``Maintenance`` (the
listeners it was given)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parlour.runtime import ConversationContext, OutgoingMessage
from parlour.runtime.errors import IllegalStateError
from parlour.stores import LmdbStore
from parlour.stores._memory import DeleteListeners
from parlour.stores.lmdb._directory import Directory
from parlour.stores.lmdb._history import History
from parlour.stores.lmdb._maintenance import Maintenance
from parlour.stores.lmdb._versions import Retention
from parlour.stores.testing import Ticks


def _open(path: Path, readonly: bool = False) -> Directory:
    return Directory(
        path, map_size=1 << 20, sync=False, max_batch=8, remembered=8, readonly=readonly
    )


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A closed store whose conversation c1 (alice's) has ten versions, every one kept."""
    with LmdbStore(tmp_path, keep_versions=None, now=Ticks()) as store:
        context = ConversationContext("c1", user_id="alice")
        context.add_user_message("question 0")
        context.stored_version = store.create_context(context.to_snapshot(), "alice")
        for i in range(1, 10):
            context.add_message(OutgoingMessage(f"answer {i}"))
            context.stored_version = store.save_context(context.to_snapshot(), "alice")
    return tmp_path


@pytest.fixture
def directory(saved: Path) -> Iterator[Directory]:
    opened = _open(saved)
    yield opened
    opened.close()


def _put(key: bytes, value: bytes, directory: Directory) -> Any:
    return lambda txn: txn.put(key, value, db=directory.dbs.meta)


def test_a_directory_reads_what_it_committed_and_after_close_refuses_both_alike(
    tmp_path: Path,
) -> None:
    directory = _open(tmp_path)
    assert directory.submit(_put(b"probe", b"1", directory), 1) is True
    slot = directory.defer(_put(b"later", b"2", directory), 1)
    directory.close()  # commits the deferred write first
    directory.close()  # idempotent
    assert directory.commits.settle(slot) is True
    with pytest.raises(IllegalStateError, match="is closed"):
        directory.view(lambda txn: txn.get(b"probe", db=directory.dbs.meta))
    with pytest.raises(IllegalStateError, match="is closed"):
        directory.submit(_put(b"probe", b"3", directory), 1)
    again = _open(tmp_path)
    read = again.view(
        lambda txn: [bytes(txn.get(k, db=again.dbs.meta)) for k in (b"probe", b"later")]
    )
    again.close()
    assert read == [b"1", b"2"]


def test_a_read_only_directory_reads_and_refuses_every_write_before_queueing_it(
    saved: Path,
) -> None:
    reader = _open(saved, readonly=True)
    try:
        assert reader.view(lambda txn: txn.stat(reader.dbs.heads)["entries"]) == 1
        for attempt in (reader.submit, reader.defer):
            with pytest.raises(IllegalStateError, match="read-only; nothing was written"):
                attempt(_put(b"probe", b"1", reader), 1)
    finally:
        reader.close()


def test_each_history_prunes_by_its_own_retention_and_every_kept_version_still_reads(
    directory: Directory,
) -> None:
    everything = History(directory, Retention.of(None, None, Ticks()))
    before = {n: everything.load_version("c1", n, "alice") for n in (8, 9, 10)}
    assert everything.prune() == 0  # keeps all
    assert History(directory, Retention.of(3, None, Ticks())).prune("c1") == 7
    assert [v.version for v in everything.versions("c1", "alice")] == [10, 9, 8]
    assert {n: everything.load_version("c1", n, "alice") for n in (8, 9, 10)} == before
    assert everything.load_version("c1", 7, "alice") is None


def test_a_history_without_retention_refuses_to_prune_and_to_read_naming_the_setting(
    directory: Directory,
) -> None:
    """History off says so from every read, even over versions another History recorded:
    never an empty answer for a saved conversation."""
    off = History(directory, None)
    with pytest.raises(IllegalStateError, match="keeps no version history"):
        off.prune()
    for read in (
        lambda: off.versions("c1", "alice"),
        lambda: off.versions("c2", "alice"),
        lambda: off.load_version("c1", 1, "alice"),
        lambda: off.load_version("c1", dt.datetime.now(dt.UTC), "mallory"),
    ):
        with pytest.raises(NotImplementedError, match="history=False"):
            read()


def test_a_quarantine_is_heard_by_the_listeners_the_maintenance_was_given(
    directory: Directory,
) -> None:
    listeners = DeleteListeners()
    heard: list[str] = []
    listeners.add(heard.append)
    maintenance = Maintenance(directory, listeners)
    assert maintenance.statistics().conversations == 1
    assert maintenance.quarantine("c1") is True
    assert maintenance.quarantine("c1") is False  # nothing left: nobody hears again
    assert heard == ["c1"]
    assert len(maintenance.quarantined("c1")) == 1
    assert maintenance.statistics().conversations == 0
    kept = History(directory, Retention.of(None, None, Ticks()))
    assert kept.versions("c1", "alice") == []  # its history went too
