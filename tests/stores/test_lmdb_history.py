"""LmdbStore's version history: every save a version kept as what it wrote, read back
exactly; retention; the upgrade of a store without history; backup while in use."""

from __future__ import annotations

import datetime as dt
import itertools
import tempfile
import threading
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime import ConversationContext, OutgoingMessage
from parlour.runtime.errors import CorruptSnapshotError, IllegalStateError
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore
from parlour.stores.lmdb import _versions
from parlour.stores.lmdb._layout import LAYOUT

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Clock:
    """A wall clock the test moves: one second per reading."""

    def __init__(self) -> None:
        self.at = T0

    def __call__(self) -> dt.datetime:
        self.at += dt.timedelta(seconds=1)
        return self.at


def _conversation() -> ConversationContext:
    c = ConversationContext("c1", user_id="alice")
    c.add_user_message("question 0")
    return c


def _saves(store: LmdbStore, c: ConversationContext, turns: int) -> dict[int, bytes]:
    """Create (when new) and save ``turns`` turns; each version's bytes as saved."""
    saved = {}
    if c.stored_version == 0:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        saved[c.stored_version] = encode_snapshot(c.to_snapshot())
    for i in range(turns):
        c.add_message(OutgoingMessage(f"answer {i}"))
        c.add_user_message(f"question {i + 1}")
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        saved[c.stored_version] = encode_snapshot(c.to_snapshot())
    return saved


def _loaded(store: LmdbStore, version: int | dt.datetime) -> bytes:
    snapshot = store.load_version("c1", version, "alice")
    assert snapshot is not None
    return encode_snapshot(snapshot)


def test_every_save_is_a_version_that_loads_back_exactly_by_number_or_time(
    tmp_path: Path,
) -> None:
    clock = Clock()
    with LmdbStore(tmp_path, now=clock) as store:
        saved = _saves(store, _conversation(), 5)
        history = store.get_version_history("c1", "alice")
        assert [v.version for v in history] == [6, 5, 4, 3, 2, 1]
        assert [v.saved_at for v in history] == sorted((v.saved_at for v in history), reverse=True)
        for version, data in saved.items():
            assert _loaded(store, version) == data
        third = history[-3]
        assert _loaded(store, third.saved_at + dt.timedelta(microseconds=500)) == saved[3]
        assert store.load_version("c1", T0, "alice") is None  # before the first save
        assert store.load_version("c1", 99, "alice") is None


def test_another_user_is_refused_the_history_like_any_read(tmp_path: Path) -> None:
    with LmdbStore(tmp_path) as store:
        _saves(store, _conversation(), 1)
        with pytest.raises(PermissionError):
            store.get_version_history("c1", "mallory")
        with pytest.raises(PermissionError):
            store.load_version("c1", 1, "mallory")
        with pytest.raises(PermissionError):
            store.load_version("c1", dt.datetime.now(dt.UTC), "mallory")


def test_a_version_costs_what_its_save_wrote_and_reads_replay_a_bounded_chain(
    tmp_path: Path,
) -> None:
    with LmdbStore(tmp_path, keep_versions=None) as store:
        saved = _saves(store, _conversation(), 600)
        with store._directory.env.begin() as txn:
            kept = _versions.kept(txn, store._dbs, b"c1")
            sizes = [
                len(txn.get(_versions.version_key(b"c1", k.version), db=store._dbs.versions))
                for k in kept
            ]
        checkpoints = [k.version for k in kept if k.checkpoint]
        gaps = [b - a for a, b in itertools.pairwise(checkpoints)]
        assert max(gaps) <= _versions.MAX_CHAIN + 1
        deltas = [s for k, s in zip(kept, sizes, strict=True) if not k.checkpoint]
        assert max(deltas) < 3 * min(deltas)  # a delta holds its save's messages, not all
        full = len(saved[601])
        assert sum(sizes) < 8 * full  # not one full copy per version (that is 300 times)
        for version in (1, 2, 255, 256, 257, 400, 601):
            assert _loaded(store, version) == saved[version]


def test_an_append_records_no_copy_and_rewrites_checkpoint_once_past_the_chain_floor(
    tmp_path: Path,
) -> None:
    """An append's version holds none of what it added, however big (those messages are
    the conversation's records); a save that rewrites messages records their bytes, and
    once those pass the floor the next version is a checkpoint (of what is stored: no
    bytes either). Every version reads back as saved, before and after the rewrites."""
    with LmdbStore(tmp_path, keep_versions=None) as store:
        c = _conversation()
        saved = _saves(store, c, 2)
        padding = "x" * (_versions.CHAIN_FLOOR // 4)  # stored twice: text and its block
        for i in range(3):  # big appends: versions 4 to 6
            c.add_user_message(f"{padding} {i}")
            c.stored_version = store.save_context(c.to_snapshot(), "alice")
            saved[c.stored_version] = encode_snapshot(c.to_snapshot())
        assert all(len(_payloads(store)[v].writes) == 0 for v in (2, 3, 4, 5, 6))
        assert _sizes(store)[6] < 64
        rewrite = "y" * (_versions.CHAIN_FLOOR * 6 // 10)  # stored once
        for i in range(2):  # rewrites of a big message: versions 7 and 8
            c.messages[5 + i] = OutgoingMessage(f"{rewrite} {i}")
            c.stored_version = store.save_context(c.to_snapshot(), "alice")
            saved[c.stored_version] = encode_snapshot(c.to_snapshot())
        checkpoints = [v for v, checkpoint in _kinds(store).items() if checkpoint]
        assert checkpoints == [1, 8]  # the second big rewrite passed the floor
        assert _sizes(store)[7] > _versions.CHAIN_FLOOR // 2 and _sizes(store)[8] < 64
        for version in saved:
            assert _loaded(store, version) == saved[version]


def _sizes(store: LmdbStore) -> dict[int, int]:
    with store._directory.env.begin() as txn:
        cursor = txn.cursor(db=store._dbs.versions)
        return {int.from_bytes(bytes(key)[-8:], "big"): len(value) for key, value in cursor}


def test_retention_keeps_the_newest_versions_and_every_kept_one_still_reads(
    tmp_path: Path,
) -> None:
    with LmdbStore(tmp_path, keep_versions=3) as store:
        saved = _saves(store, _conversation(), 9)
        assert store.prune() == 7
        assert [v.version for v in store.get_version_history("c1", "alice")] == [10, 9, 8]
        for version in (8, 9, 10):
            assert _loaded(store, version) == saved[version]
        assert store.load_version("c1", 7, "alice") is None
        assert store.prune("c1") == 0


def test_retention_by_age_keeps_younger_versions_and_always_the_current(tmp_path: Path) -> None:
    clock = Clock()
    with LmdbStore(tmp_path, keep_versions=None, keep_for=dt.timedelta(seconds=3), now=clock) as s:
        saved = _saves(s, _conversation(), 5)  # saved at T0+1s .. T0+6s
        clock.at = T0 + dt.timedelta(seconds=7)  # the next reading is 8s: keeps 5s and later
        assert s.prune() == 4
        assert [v.version for v in s.get_version_history("c1", "alice")] == [6, 5]
        assert _loaded(s, 5) == saved[5]
        clock.at = T0 + dt.timedelta(days=1)
        s.prune()
        assert [v.version for v in s.get_version_history("c1", "alice")] == [6]


def test_every_64th_save_prunes_its_conversation(tmp_path: Path) -> None:
    with LmdbStore(tmp_path, keep_versions=10) as store:
        saved = _saves(store, _conversation(), 63)  # version 64 is the last
        history = store.get_version_history("c1", "alice")
        assert [v.version for v in history] == list(range(64, 54, -1))
        assert _loaded(store, 55) == saved[55]


def test_a_delete_removes_the_history_and_a_recreated_id_starts_a_new_one(
    tmp_path: Path,
) -> None:
    with LmdbStore(tmp_path) as store:
        _saves(store, _conversation(), 3)
        assert store.delete("c1", "alice")
        assert store.get_version_history("c1", "alice") == []
        assert store.load_version("c1", 2, "alice") is None
        c = _conversation()
        saved = _saves(store, c, 0)
        assert [v.version for v in store.get_version_history("c1", "alice")] == [5]
        assert _loaded(store, 5) == saved[5]
        with store._directory.env.begin() as txn:
            assert len(_versions.kept(txn, store._dbs, b"c1")) == 1


def test_a_store_without_history_says_so_from_every_history_read_and_refuses_to_prune(
    tmp_path: Path,
) -> None:
    """A conversation saved twice on a store keeping no versions: its history reads raise
    NotImplementedError naming the setting, never an empty answer."""
    with LmdbStore(tmp_path, history=False) as store:
        _saves(store, _conversation(), 2)  # the create and two saves
        assert store.version_of("c1", "alice") == 3
        with pytest.raises(NotImplementedError, match="history=False"):
            store.get_version_history("c1", "alice")
        for version in (1, 2, dt.datetime.now(dt.UTC)):
            with pytest.raises(NotImplementedError, match="history=False"):
                store.load_version("c1", version, "alice")
        with pytest.raises(IllegalStateError, match="keeps no version history"):
            store.prune()


def test_history_survives_reopening_and_a_reopened_store_checkpoints_its_first_save(
    tmp_path: Path,
) -> None:
    c = _conversation()
    with LmdbStore(tmp_path) as store:
        saved = _saves(store, c, 3)
    with LmdbStore(tmp_path) as store:
        saved |= _saves(store, c, 2)
        for version, data in saved.items():
            assert _loaded(store, version) == data
        with store._directory.env.begin() as txn:
            kinds = {k.version: k.checkpoint for k in _versions.kept(txn, store._dbs, b"c1")}
    assert kinds[5] is True  # nothing remembered after the reopen: written in full
    assert kinds[6] is False


def _as_layout2(path: Path) -> None:
    """Make a store look as layout 2 wrote it: no history databases."""
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        for name in (b"versions", b"chains"):
            txn.drop(env.open_db(name, txn=txn), delete=True)
        txn.put(b"layout", b"2", db=env.open_db(b"meta", txn=txn))
    env.close()


def test_a_store_written_before_history_is_upgraded_and_its_current_versions_kept(
    tmp_path: Path,
) -> None:
    c = _conversation()
    with LmdbStore(tmp_path) as store:
        saved = _saves(store, c, 2)
    _as_layout2(tmp_path)
    with pytest.raises(IllegalStateError, match=r"older layout.*open it once for writing"):
        LmdbStore(tmp_path, readonly=True)
    with LmdbStore(tmp_path) as store:
        assert [v.version for v in store.get_version_history("c1", "alice")] == [3]
        assert _loaded(store, 3) == saved[3]
        saved |= _saves(store, c, 1)
        assert _loaded(store, 4) == saved[4]
    with LmdbStore(tmp_path, readonly=True) as reader:
        assert [v.version for v in reader.get_version_history("c1", "alice")] == [4, 3]


# Each step: ("add", text) appends, ("edit", i) replaces message i, ("drop", i) removes it,
# ("objective", i) changes the body, ("reopen", 0) closes the store and opens it again; a
# save follows every step.
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.text(max_size=6)),
        st.tuples(st.sampled_from(["edit", "drop", "objective", "reopen"]), st.integers(0, 20)),
    ),
    max_size=20,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps, st.sampled_from([2, 5, None]))
def test_any_sequence_of_edits_keeps_every_version_exactly_as_saved(
    steps: list[tuple[str, object]], keep: int | None
) -> None:
    c = _conversation()
    saved: dict[int, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = LmdbStore(tmp, keep_versions=keep)
        try:
            saved |= _saves(store, c, 0)
            for op, arg in steps:
                if op == "reopen":
                    store.close()
                    store = LmdbStore(tmp, keep_versions=keep)
                elif op == "add":
                    c.add_user_message(f"said {arg}")
                elif op == "objective":
                    c.put_main_objective("goal", f"objective {int(str(arg)) % 3}")
                elif c.messages:
                    i = int(str(arg)) % len(c.messages)
                    if op == "edit":
                        c.messages[i] = OutgoingMessage(f"edited {i}")
                    else:
                        del c.messages[i]
                c.stored_version = store.save_context(c.to_snapshot(), "alice")
                saved[c.stored_version] = encode_snapshot(c.to_snapshot())
            store.prune()
            kept = [v.version for v in store.get_version_history("c1", "alice")]
            newest = sorted(saved, reverse=True)
            assert kept == (newest if keep is None else newest[:keep])
            for version in kept:
                assert _loaded(store, version) == saved[version]
        finally:
            store.close()


def _payloads(store: LmdbStore) -> dict[int, _versions.Payload]:
    with store._directory.env.begin() as txn:
        cursor = txn.cursor(db=store._dbs.versions)
        return {
            int.from_bytes(bytes(key)[-8:], "big"): _versions._decoder.decode(bytes(value)[9:])
            for key, value in cursor
        }


def test_a_version_that_left_the_body_as_it_was_stores_none_and_reads_back_whole(
    tmp_path: Path,
) -> None:
    """A delta whose save kept the body holds an empty body (a tool-laden body is most of a
    record); every version, and the oldest a prune keeps, still reads back with its own."""
    c = _conversation()
    c.put_main_objective("goal", "a long objective " * 50)
    saved: dict[int, bytes] = {}
    with LmdbStore(tmp_path, keep_versions=None) as store:
        saved |= _saves(store, c, 3)  # versions 1 to 4: the body as it was
        c.put_main_objective("goal", "another objective")
        saved |= _saves(store, c, 2)  # 5 changes it, 6 keeps it
        payloads = _payloads(store)
        assert [v for v, p in payloads.items() if not p.body] == [2, 3, 4, 6]
        assert _kinds(store)[1] and not any(_kinds(store)[v] for v in (2, 3, 4, 5, 6))
        for version, expected in saved.items():
            assert _loaded(store, version) == expected
    with LmdbStore(tmp_path, keep_versions=2) as store:
        assert store.prune() == 4  # 5 becomes the oldest: a checkpoint
        assert _payloads(store)[5].body and _kinds(store)[5]
        assert _loaded(store, 5) == saved[5] and _loaded(store, 6) == saved[6]


def test_a_layout_4_store_opens_as_it_is_and_is_marked_with_this_layout(tmp_path: Path) -> None:
    """Layout 4 recorded every version's body; this code reads those records as they are
    and only records its layout, so a parlour that knows only 4 refuses the directory."""
    c = _conversation()
    with LmdbStore(tmp_path) as store:
        saved = _saves(store, c, 3)
    env = lmdb.open(str(tmp_path), max_dbs=16)
    with env.begin(write=True) as txn:  # as layout 4 left it: the body in every record
        versions, meta = env.open_db(b"versions", txn=txn), env.open_db(b"meta", txn=txn)
        stored = txn.get(b"c1", db=env.open_db(b"bodies", txn=txn))
        assert stored is not None
        body = bytes(stored)
        for key, value in list(txn.cursor(db=versions)):
            payload = _versions._decoder.decode(bytes(value)[9:])
            full = msgspec.structs.replace(payload, body=payload.body or body)
            txn.put(key, bytes(value)[:9] + msgspec.msgpack.encode(full), db=versions)
        txn.put(b"layout", b"4", db=meta)
    env.close()
    with LmdbStore(tmp_path) as store:
        assert all(p.body for p in _payloads(store).values())
        for version, expected in saved.items():
            assert _loaded(store, version) == expected
        with store._directory.env.begin() as txn:
            assert bytes(txn.get(b"layout", db=store._dbs.meta)) == str(LAYOUT).encode()


def test_a_layout_6_history_reads_as_it_is_and_goes_on_with_records_that_refer(
    tmp_path: Path,
) -> None:
    """Layout 6 wrote every version with its bytes. This code reads those records as they
    are and marks the directory 7 (so a parlour knowing only 6 refuses it); its appends then
    refer to the stored records, an edit gives them their bytes, and every version of both
    kinds reads as saved throughout."""
    c = _conversation()
    with LmdbStore(tmp_path, keep_versions=None) as store:
        saved = _saves(store, c, 3)
        with store._directory.env.begin(write=True) as txn:  # as layout 6 left them
            assert _versions.pin(txn, store._dbs, b"c1") == []
            txn.put(b"layout", b"6", db=store._dbs.meta)
        assert set(_raw_kinds(store).values()) == {b"C", b"D"}
    with LmdbStore(tmp_path, keep_versions=None) as store:
        with store._directory.env.begin() as txn:
            assert bytes(txn.get(b"layout", db=store._dbs.meta)) == b"7"
        saved |= _saves(store, c, 2)  # 5 writes every record (the store did not remember)
        assert [_raw_kinds(store)[v] for v in (5, 6)] == [b"S", b"A"]
        for version, expected in saved.items():
            assert _loaded(store, version) == expected
        c.messages[1] = OutgoingMessage("edited")  # version 7 overwrites message 1
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        saved[c.stored_version] = encode_snapshot(c.to_snapshot())
        assert set(_raw_kinds(store).values()) == {b"C", b"D"}
        for version, expected in saved.items():
            assert _loaded(store, version) == expected


def test_a_whole_save_the_store_does_not_remember_leaves_versions_referring_when_it_only_adds(
    tmp_path: Path,
) -> None:
    """Reopened, the store no longer remembers what it wrote, so a whole save writes every
    record again; when it writes each one's own bytes over it and cuts none, nothing a
    version refers to changed and none is given bytes. An edit after it still pins them,
    and every version reads as saved throughout."""
    c = _conversation()
    with LmdbStore(tmp_path, keep_versions=None) as store:
        saved = _saves(store, c, 2)  # 1 to 3: a checkpoint and appends, by reference
    with LmdbStore(tmp_path, keep_versions=None) as store:
        saved |= _saves(store, c, 1)  # 4: every record written again, the same bytes
        assert _raw_kinds(store) == {1: b"S", 2: b"A", 3: b"A", 4: b"S"}
        for version, expected in saved.items():
            assert _loaded(store, version) == expected
    with LmdbStore(tmp_path, keep_versions=None) as store:
        c.messages[0] = OutgoingMessage("edited")  # 5: overwrites message 0
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        saved[c.stored_version] = encode_snapshot(c.to_snapshot())
        assert _raw_kinds(store) == {1: b"C", 2: b"D", 3: b"D", 4: b"C", 5: b"S"}
        for version, expected in saved.items():
            assert _loaded(store, version) == expected


def _raw_kinds(store: LmdbStore) -> dict[int, bytes]:
    with store._directory.env.begin() as txn:
        cursor = txn.cursor(db=store._dbs.versions)
        return {int.from_bytes(bytes(key)[-8:], "big"): bytes(value[:1]) for key, value in cursor}


def test_a_backup_taken_while_writers_save_opens_with_every_acknowledged_save(
    tmp_path: Path,
) -> None:
    acknowledged: dict[str, int] = {}
    stop = threading.Event()
    going = [threading.Event() for _ in range(4)]
    with LmdbStore(tmp_path / "live") as store:

        def writer(n: int) -> None:
            c = ConversationContext(f"w{n}", user_id="alice")
            c.add_user_message("start")
            c.stored_version = store.create_context(c.to_snapshot(), "alice")
            acknowledged[f"w{n}"] = c.stored_version
            while not stop.is_set() and c.stored_version < 200:
                c.add_user_message("more")
                c.stored_version = store.save_context(c.to_snapshot(), "alice")
                acknowledged[f"w{n}"] = c.stored_version
                if c.stored_version >= 5:
                    going[n].set()

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for event in going:
            assert event.wait(30)
        before = dict(acknowledged)
        copy = store.backup(tmp_path / "copy")
        stop.set()
        for t in threads:
            t.join()
        with pytest.raises(FileExistsError):
            store.backup(copy)
    with LmdbStore(copy) as restored:
        for cid, version in before.items():
            got = restored.version_of(cid, "alice")
            assert got is not None and got >= version
            loaded = restored.load(cid, "alice")
            assert loaded is not None and len(loaded.messages) == got
            assert restored.load_version(cid, got, "alice") == loaded


def test_a_backup_into_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with LmdbStore(tmp_path / "db") as store, pytest.raises(NotADirectoryError):
        store.backup(tmp_path / "file")


@pytest.mark.parametrize("damage", [b"D" + bytes(8) + b"\xc1garbage", b"", b"D\x00"])
def test_a_damaged_version_record_is_a_corrupt_snapshot_and_the_rest_still_reads(
    tmp_path: Path, damage: bytes
) -> None:
    with LmdbStore(tmp_path) as store:
        saved = _saves(store, _conversation(), 3)
        with store._directory.env.begin(write=True) as txn:
            txn.put(_versions.version_key(b"c1", 2), damage, db=store._dbs.versions)
        with pytest.raises(CorruptSnapshotError, match="c1"):
            store.load_version("c1", 3, "alice")  # its chain runs through version 2
        assert _loaded(store, 1) == saved[1]
        loaded = store.load("c1", "alice")
        assert loaded is not None and encode_snapshot(loaded) == saved[4]


def _kinds(store: LmdbStore) -> dict[int, bool]:
    with store._directory.env.begin() as txn:
        return {k.version: k.checkpoint for k in _versions.kept(txn, store._dbs, b"c1")}


def _header(store: LmdbStore) -> dict[str, Any]:
    with store._directory.env.begin() as txn:
        decoded: dict[str, Any] = msgspec.json.decode(txn.get(b"c1", db=store._dbs.heads))
    return decoded


def test_the_chain_rides_in_the_header_and_a_header_without_it_makes_a_checkpoint(
    tmp_path: Path,
) -> None:
    """Each save's header carries the chain its version left; a save after a header
    without one (as an older parlour rewrites it, between two opens of the store) is a
    checkpoint although the save wrote one message, and every version still reads
    exactly."""
    c = _conversation()
    for i in range(20):  # a long first record: the deltas stay lighter than its checkpoint
        c.add_user_message(f"opening {i}")
    with LmdbStore(tmp_path) as store:
        saved = _saves(store, c, 3)
        assert _header(store)["history"][0] == 3  # three deltas since the create
        header = _header(store)
        del header["history"]
        with store._directory.env.begin(write=True) as txn:
            txn.put(b"c1", msgspec.json.encode(header), db=store._dbs.heads)
    with LmdbStore(tmp_path) as store:  # reopened: what is on disk, not what it last wrote
        saved |= _saves(store, c, 2)
        assert _kinds(store) == {1: True, 2: False, 3: False, 4: False, 5: True, 6: False}
        assert _header(store)["history"][0] == 1
        for version, data in saved.items():
            assert _loaded(store, version) == data
