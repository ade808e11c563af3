"""LmdbStore specifics: durability across reopen, group commit under threads, bad records,
map growth, unbuilt surface."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from parlour.runtime import ConversationContext
from parlour.runtime.errors import CorruptSnapshotError, IllegalStateError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import LmdbStore


def _snapshot(cid: str, text: str = "hello", version: int = 0) -> ConversationPersistenceSnapshot:
    context = ConversationContext(cid, user_id="alice")
    context.add_user_message(text)
    context.stored_version = version
    return context.to_snapshot()


def test_a_conversation_survives_closing_and_reopening_the_directory(tmp_path: Path) -> None:
    with LmdbStore(tmp_path) as store:
        store.create_context(_snapshot("c1", "kept"), "alice")
    with LmdbStore(tmp_path) as reopened:
        loaded = reopened.load("c1", "alice")
    assert loaded is not None and loaded.messages[0].raw_content == "kept"


def test_concurrent_saves_from_many_threads_lose_nothing(lmdb_store: LmdbStore) -> None:
    threads, per_thread = 16, 25
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(per_thread):
                cid = f"t{n}-{i}"
                lmdb_store.create_context(_snapshot(cid, cid), "alice")
                lmdb_store.save_context(_snapshot(cid, cid + "!", 1), "alice")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    for n in range(threads):
        for i in range(per_thread):
            loaded = lmdb_store.load(f"t{n}-{i}", "alice")
            assert loaded is not None and loaded.messages[0].raw_content == f"t{n}-{i}!"


def test_a_corrupt_record_raises_a_clear_error_and_other_records_still_load(
    tmp_path: Path,
) -> None:
    with LmdbStore(tmp_path) as store:
        store.create_context(_snapshot("good"), "alice")
        store.create_context(_snapshot("bad"), "alice")
    import lmdb

    env = lmdb.open(str(tmp_path), max_dbs=4)
    with env.begin(write=True) as txn:
        txn.put(b"bad", b"{not json", db=env.open_db(b"bodies", txn=txn))
    env.close()
    with LmdbStore(tmp_path) as store:
        with pytest.raises(CorruptSnapshotError, match="bad"):
            store.load("bad", "alice")
        assert store.load("good", "alice") is not None


@pytest.mark.parametrize("sync", [True, False])
def test_a_synced_store_writes_its_pages_and_an_unsynced_one_maps_the_whole_file(
    tmp_path: Path, sync: bool
) -> None:
    """Synced, pages are written at commit (no page faults on the flushed map), so the file
    is as large as the pages in use; unsynced, the map is written in place and the file
    spans the whole map."""
    map_size = 1 << 26
    with LmdbStore(tmp_path, map_size=map_size, sync=sync) as store:
        store.create_context(_snapshot("c1", "kept"), "alice")
        size = (tmp_path / "data.mdb").stat().st_size
        assert (size < map_size // 8) if sync else (size == map_size)
        assert store.statistics().map_size == map_size
    with LmdbStore(tmp_path, sync=sync) as reopened:
        loaded = reopened.load("c1", "alice")
    assert loaded is not None and loaded.messages[0].raw_content == "kept"


def test_the_map_grows_instead_of_failing_when_full(tmp_path: Path) -> None:
    with LmdbStore(tmp_path, map_size=64 * 1024) as store:
        big = "x" * 20_000
        for i in range(20):
            store.create_context(_snapshot(f"c{i}", big), "alice")
        assert store.statistics().map_size > 64 * 1024
        loaded = store.load("c19", "alice")
        assert loaded is not None and loaded.messages[0].raw_content == big


def test_a_closed_store_refuses_writes(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path)
    store.close()
    store.close()  # idempotent
    with pytest.raises(IllegalStateError, match="closed"):
        store.create_context(_snapshot("c1"), "alice")


def test_readers_keep_reading_while_the_map_grows_under_them(tmp_path: Path) -> None:
    with LmdbStore(tmp_path, map_size=64 * 1024) as store:
        store.create_context(_snapshot("seed", "seed"), "alice")
        stop = threading.Event()
        failures: list[BaseException] = []

        def read() -> None:
            while not stop.is_set():
                try:
                    loaded = store.load("seed", "alice")
                    assert loaded is not None and loaded.messages[0].raw_content == "seed"
                except BaseException as exc:
                    failures.append(exc)
                    return

        readers = [threading.Thread(target=read) for _ in range(4)]
        for r in readers:
            r.start()
        try:
            for i in range(30):
                store.create_context(_snapshot(f"c{i}", "y" * 10_000), "alice")
        finally:
            stop.set()
            for r in readers:
                r.join()
        assert failures == []
        assert store.statistics().map_size > 64 * 1024
