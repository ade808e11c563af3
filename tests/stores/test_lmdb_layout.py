"""The store's layout version: a directory written before layouts were versioned (checked in
under data/layout1, see data/make_layout1.py) is upgraded in place; a newer one is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import lmdb
import msgspec
import pytest

from parlour.runtime import ConversationContext
from parlour.runtime.errors import IllegalStateError, StaleVersionError
from parlour.stores import LmdbStore
from parlour.stores.lmdb._layout import LAYOUT

LAYOUT1 = Path(__file__).parent / "data" / "layout1"


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    target = tmp_path / "old"
    shutil.copytree(LAYOUT1, target)
    return target


def _meta(path: Path) -> bytes | None:
    env = lmdb.open(str(path), max_dbs=8, readonly=True)
    try:
        with env.begin() as txn:
            value = txn.get(b"layout", db=env.open_db(b"meta", txn=txn, create=False))
    finally:
        env.close()
    return value


def test_a_store_written_before_layout_versions_is_upgraded_in_place(old_store: Path) -> None:
    with LmdbStore(old_store) as store:
        assert [s.conversation_id for s in store.list_conversations("alice")] == [
            "alice-1",
            "alice-0",
        ]
        assert [s.conversation_id for s in store.list_conversations("bob")] == ["bob-1", "bob-0"]
        loaded = store.load("alice-1", "alice")
        assert loaded is not None and loaded.stored_version == 1
        assert [m.raw_content for m in loaded.messages] == [
            "alice asks question 1",
            "answer 1 for alice",
        ]
        assert store.load("alice-2", "alice") is None
        with pytest.raises(PermissionError):
            store.load("bob-0", "alice")
        with pytest.raises(StaleVersionError):
            store.save_context(msgspec.structs.replace(loaded, stored_version=0), "alice")
        assert store.save_context(loaded, "alice") == 2
    assert _meta(old_store) == str(LAYOUT).encode()
    with LmdbStore(old_store) as again:  # the upgrade ran once; the store opens as it is
        assert again.version_of("alice-1", "alice") == 2
        history = again.get_version_history("alice-1", "alice")
        assert [v.version for v in history] == [2, 1]  # the upgraded record is version 1
        first = again.load_version("alice-1", 1, "alice")
        assert first is not None and first.messages == loaded.messages
        assert len(again.list_conversations("alice")) == 2


def test_a_read_only_open_of_an_old_layout_names_the_upgrade(old_store: Path) -> None:
    with pytest.raises(IllegalStateError, match=r"older layout.*open it once for writing"):
        LmdbStore(old_store, readonly=True)
    assert _meta_absent(old_store)


def _meta_absent(path: Path) -> bool:
    env = lmdb.open(str(path), max_dbs=8, readonly=True)
    try:
        with env.begin() as txn:
            env.open_db(b"meta", txn=txn, create=False)
    except lmdb.NotFoundError:
        return True
    finally:
        env.close()
    return False


def test_a_layout_newer_than_the_code_is_refused_and_left_alone(tmp_path: Path) -> None:
    with LmdbStore(tmp_path) as store:
        c = ConversationContext("c1", user_id="alice")
        c.add_user_message("kept")
        store.create_context(c.to_snapshot(), "alice")
    env = lmdb.open(str(tmp_path), max_dbs=8)
    with env.begin(write=True) as txn:
        txn.put(b"layout", b"99", db=env.open_db(b"meta", txn=txn))
    env.close()
    for readonly in (False, True):
        with pytest.raises(IllegalStateError, match="layout 99, newer than this parlour knows"):
            LmdbStore(tmp_path, readonly=readonly)
    assert _meta(tmp_path) == b"99"
    with LmdbStore(tmp_path / "elsewhere") as other:  # the refused open released the directory
        assert other.list_conversations("alice") == []


def test_an_old_header_that_does_not_decode_is_quarantined_by_the_upgrade(
    old_store: Path,
) -> None:
    env = lmdb.open(str(old_store), max_dbs=8)
    with env.begin(write=True) as txn:
        txn.put(b"bob-0", b"\x00garbage", db=env.open_db(b"heads", txn=txn))
    env.close()
    with LmdbStore(old_store) as store:
        assert [s.conversation_id for s in store.list_conversations("bob")] == ["bob-1"]
        assert store.load("bob-0", "bob") is None
        [record] = store.quarantined("bob-0")
        assert record.header == b"\x00garbage" and len(record.messages) == 2
        assert store.damaged() == []
