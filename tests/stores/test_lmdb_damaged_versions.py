"""A damaged past never blocks the present: a version record that does not decode fails no
save and stops no prune. The run of records that cannot be read is moved into quarantine,
raw; the error names the conversation and the version; the current record and every
readable version stay; ``damaged_versions`` (and ``parlour fsck``) find such records."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from parlour.runtime import ConversationContext, OutgoingMessage
from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore
from parlour.stores._ids import conversation_key
from parlour.stores.lmdb import _versions

from .test_crash import _killed_after_200_saves

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class _Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def _create(store: LmdbStore, cid: str) -> tuple[ConversationContext, dict[int, bytes]]:
    c = ConversationContext(cid, user_id="alice")
    c.add_user_message("question 0")
    c.stored_version = store.create_context(c.to_snapshot(), "alice")
    return c, {c.stored_version: encode_snapshot(c.to_snapshot())}


def _save(store: LmdbStore, c: ConversationContext, saved: dict[int, bytes], count: int) -> None:
    for i in range(count):
        c.add_message(OutgoingMessage(f"answer {c.stored_version} {i}"))
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        saved[c.stored_version] = encode_snapshot(c.to_snapshot())


def _damage(store: LmdbStore, cid: str, version: int) -> bytes:
    """Overwrite what follows the kind and time of ``version``'s record with bytes that are
    no msgpack; the record's new bytes."""
    key = _versions.version_key(conversation_key(cid), version)
    with store._directory.env.begin(write=True) as txn:
        raw = txn.get(key, db=store._dbs.versions)
        assert raw is not None
        damaged = bytes(raw[:9]) + b"\xc1\xc1\xc1"
        txn.put(key, damaged, db=store._dbs.versions)
    return damaged


def _versions_of(store: LmdbStore, cid: str) -> list[int]:
    return sorted(v.version for v in store.get_version_history(cid, "alice"))


def _reads_as_saved(store: LmdbStore, cid: str, saved: dict[int, bytes]) -> None:
    for version in _versions_of(store, cid):
        snapshot = store.load_version(cid, version, "alice")
        assert snapshot is not None and encode_snapshot(snapshot) == saved[version]


def test_a_save_whose_prune_meets_a_damaged_version_is_acknowledged_and_loads(
    tmp_path: Path,
) -> None:
    """The issue's reproduction: the 64th save prunes, its oldest kept version (41, a
    delta) must be rebuilt through the damaged version 20. Before, that save raised a raw
    ``msgspec.DecodeError`` and so did every later one."""
    clock = _Clock()
    with LmdbStore(tmp_path, keep_versions=None, keep_for=dt.timedelta(hours=1), now=clock) as s:
        c, saved = _create(s, "c1")
        _save(s, c, saved, 39)  # versions 1 to 40, an hour and more before the prune
        clock.now += dt.timedelta(hours=2)
        _save(s, c, saved, 23)  # 41 to 63
        damaged = _damage(s, "c1", 20)
        with pytest.raises(CorruptSnapshotError, match="Version 30 of stored conversation c1"):
            s.load_version("c1", 30, "alice")
        _save(s, c, saved, 3)  # 64 prunes; 65 and 66 go on from it
        assert c.stored_version == 66
        [moved] = s.quarantined("c1")
        assert (20, damaged) in moved.versions and moved.messages == [] and moved.body is None
        assert [v for v, _ in moved.versions] == list(range(1, 65))  # 41-63 replayed through 20
        assert _versions_of(s, "c1") == [64, 65, 66]
        _reads_as_saved(s, "c1", saved)
        assert s.damaged_versions() == []
    with LmdbStore(tmp_path, keep_versions=None, keep_for=dt.timedelta(hours=1), now=clock) as s:
        loaded = s.load("c1", "alice")
        assert loaded is not None and encode_snapshot(loaded) == saved[66]
        _reads_as_saved(s, "c1", saved)


def test_prune_goes_on_past_damaged_versions_and_a_damaged_header(tmp_path: Path) -> None:
    with LmdbStore(tmp_path, keep_versions=4) as store:
        saved = {}
        for cid in ("a", "b", "c"):
            c, saved[cid] = _create(store, cid)
            _save(store, c, saved[cid], 20)  # versions 1 to 21: only 1 is a checkpoint
        for cid in ("a", "c"):
            _damage(store, cid, 10)  # the oldest kept (18) replays through it
        with store._directory.env.begin(write=True) as txn:
            txn.put(b"0-header", b"{not a header", db=store._dbs.heads)
            txn.put(_versions.version_key(b"0-header", 1), b"C" + bytes(8), db=store._dbs.versions)
        assert store.prune() == 3 * 21 - 4 - 2  # a and c: all moved, 21 recorded anew
        assert _versions_of(store, "a") == _versions_of(store, "c") == [21]
        assert _versions_of(store, "b") == [18, 19, 20, 21]
        for cid in ("a", "b", "c"):
            _reads_as_saved(store, cid, saved[cid])
            loaded = store.load(cid, "alice")
            assert loaded is not None and encode_snapshot(loaded) == saved[cid][21]
        assert store.damaged_versions() == []


def test_damaged_versions_lists_each_unreadable_version_and_quarantine_keeps_the_rest(
    tmp_path: Path,
) -> None:
    """Versions before the damaged record read (their replay stops before it) and stay;
    the damaged one and those replayed through it, up to the newest, are moved aside, and
    the current version is recorded anew, so the history goes on."""
    with LmdbStore(tmp_path, keep_versions=None) as store:
        c, saved = _create(store, "c1")
        _save(store, c, saved, 20)
        damaged = _damage(store, "c1", 10)
        found = store.damaged_versions()
        assert [(cid, v) for cid, v, _ in found] == [("c1", v) for v in range(10, 22)]
        assert all(why for _, _, why in found)
        assert store.quarantine_damaged_versions("c1") == list(range(10, 22))
        assert store.damaged_versions() == []
        assert _versions_of(store, "c1") == [*range(1, 10), 21]
        [moved] = store.quarantined("c1")
        assert moved.versions[0] == (10, damaged)
        _save(store, c, saved, 2)
        _reads_as_saved(store, "c1", saved)
        assert store.quarantine_damaged_versions("c1") == []


PRUNING_WRITER = """
import sys, threading
from parlour.runtime import ConversationContext
from parlour.stores import LmdbStore
from parlour.stores._ids import conversation_key
from parlour.stores.lmdb import _versions

store = LmdbStore(sys.argv[1], keep_versions=5)
conversations = [ConversationContext(f"c{i}", user_id="alice") for i in range(4)]
for c in conversations:
    c.add_user_message("first")
    c.stored_version = store.create_context(c.to_snapshot(), "alice")
for turn in range(-40, 0):  # ten versions each, then one of c0's records damaged
    c = conversations[turn % 4]
    c.add_user_message(f"early {turn}")
    c.stored_version = store.save_context(c.to_snapshot(), "alice")
key = _versions.version_key(conversation_key("c0"), 3)
with store._directory.env.begin(write=True) as txn:
    txn.put(key, bytes(txn.get(key, db=store._dbs.versions))[:9] + b"\\xc1", db=store._dbs.versions)
store.prune()  # keeps c0's newest 5, which replay through it: it goes to quarantine

def prune_for_ever():
    while True:
        store.prune()

threading.Thread(target=prune_for_ever, daemon=True).start()
turn = 0
while True:  # saves while another thread prunes, until killed; each acknowledged
    c = conversations[turn % 4]
    c.add_user_message(f"turn {turn}")
    c.stored_version = store.save_context(c.to_snapshot(), "alice")
    print(turn, flush=True)
    turn += 1
"""


def test_a_writer_killed_while_pruning_loses_no_acknowledged_save_and_no_version_reads_wrong(
    tmp_path: Path,
) -> None:
    acknowledged = _killed_after_200_saves(PRUNING_WRITER, tmp_path)
    with LmdbStore(tmp_path, keep_versions=5) as store:
        assert store.undecodable() == [] and store.damaged_versions() == []
        assert any(record.versions for record in store.quarantined("c0"))
        for i in range(4):
            snapshot = store.load(f"c{i}", "alice")
            assert snapshot is not None
            said = [str(m.raw_content) for m in snapshot.messages]
            expected = [f"turn {t}" for t in range(i, acknowledged + 1, 4)]
            assert said[11 : 11 + len(expected)] == expected
            versions = [v.version for v in store.get_version_history(f"c{i}", "alice")]
            assert versions[0] == snapshot.stored_version and len(versions) <= 5 + 64
            for version in versions:  # every kept version reads, its messages a prefix
                old = store.load_version(f"c{i}", version, "alice")
                assert old is not None
                assert [m.raw_content for m in old.messages] == [
                    m.raw_content for m in snapshot.messages[: len(old.messages)]
                ]


def test_a_save_over_a_version_that_refers_to_a_missing_body_quarantines_it_and_reads_right(
    tmp_path: Path,
) -> None:
    """A checkpoint of what is stored refers to the body record; with that record gone
    (damage), a save that writes a new body would make the checkpoint read as the new one.
    The save moves it into quarantine instead, records its own version as a checkpoint,
    and no version reads as anything but what was saved: the delta that followed the lost
    checkpoint is a corrupt snapshot, the new version reads as saved."""
    c = ConversationContext("c1", user_id="alice")
    c.add_user_message("question 0")
    with LmdbStore(tmp_path) as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")  # 1: by reference
        c.add_message(OutgoingMessage("answer 0"))
        c.stored_version = store.save_context(c.to_snapshot(), "alice")  # 2: an append
        with store._directory.env.begin(write=True) as txn:
            assert txn.delete(b"c1", db=store._dbs.bodies)
        c.put_main_objective("goal", "a new body")
        c.stored_version = store.save_context(c.to_snapshot(), "alice")  # 3: overwrites it
        saved = encode_snapshot(c.to_snapshot())
        assert [v.version for v in store.get_version_history("c1", "alice")] == [3, 2]
        assert [r.versions[0][0] for r in store.quarantined("c1") if r.versions] == [1]
        with pytest.raises(CorruptSnapshotError, match="Version 2 of stored conversation c1"):
            store.load_version("c1", 2, "alice")
        loaded = store.load_version("c1", 3, "alice")
        assert loaded is not None and encode_snapshot(loaded) == saved
