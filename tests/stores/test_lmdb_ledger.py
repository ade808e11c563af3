"""The usage ledger as records of their own (one per entry, beside the messages): a save
writes only the entries past what the store committed, a ledger replaced or shortened is
stored exactly as the snapshot holds it, every kept version reads back its ledger, and
damaged or stray ledger records are refused or ignored like message records."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime import ConversationContext, OutgoingMessage
from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore, MemoryStore
from parlour.stores._records import message_key, plan_usage
from parlour.stores.lmdb import _versions

from .ledger_helpers import call, raw_db, snapshot_bytes, with_ledger


def _put(path: Path, name: bytes, key: bytes, value: bytes | None) -> None:
    env = lmdb.open(str(path), max_dbs=16)
    try:
        with env.begin(write=True) as txn:
            db = env.open_db(name, txn=txn)
            if value is None:
                txn.delete(key, db=db)
            else:
                txn.put(key, value, db=db)
    finally:
        env.close()


# -- the plan -------------------------------------------------------------------------------

_values = st.one_of(st.integers(-2, 2), st.booleans(), st.sampled_from([0.0, -0.0, 1.0]))
_entries = st.dictionaries(st.sampled_from("abc"), _values, max_size=3)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_entries, max_size=8),
    st.lists(st.tuples(st.sampled_from(["keep", "copy", "new"]), _entries), max_size=10),
)
def test_the_ledger_plan_writes_exactly_what_turns_the_stored_bytes_into_the_new_ledger(
    base: list[dict[str, Any]], steps: list[tuple[str, dict[str, Any]]]
) -> None:
    """Each new entry is the base's very object ("keep"), an equal copy ("copy", which may
    differ in bytes only by 1/True or 0.0/-0.0) or another entry; the list may be shorter
    or longer than the base."""
    new = []
    for i, (how, entry) in enumerate(steps):
        if how == "keep" and i < len(base):
            new.append(base[i])
        elif how == "copy" and i < len(base):
            new.append(dict(base[i]))
        else:
            new.append(entry)
    plan = plan_usage(base, new, "c1")
    stored = [msgspec.json.encode(e) for e in base][: len(new)]
    stored += [b""] * (len(new) - len(stored))
    for index, data in plan.writes:
        assert index >= len(base) or new[index] is not base[index]  # never a kept object
        stored[index] = data
    assert stored == [msgspec.json.encode(e) for e in new]
    assert plan.size == sum(len(d) for _, d in plan.writes)


def test_a_ledger_unchanged_since_the_last_plan_is_planned_as_that_plan_with_nothing_to_write() -> (
    None
):
    """Two snapshots of a conversation whose ledger did not change between them (the turn's
    first save): the second plan writes nothing and keeps the first plan's very list; one
    entry appended after it is the only write of the next."""
    c = ConversationContext("c1", user_id="alice")
    c.usage_ledger.extend(call(i) for i in range(3))  # its own ledger: an assigned list is not
    first = plan_usage(None, c.to_snapshot().usage, "c1")
    c.add_user_message("only a message changed")
    again = plan_usage(first.items, c.to_snapshot().usage, "c1")
    assert again.writes == [] and again.size == 0 and again.items is first.items
    c.usage_ledger.append(call(3))
    after = plan_usage(again.items, c.to_snapshot().usage, "c1")
    assert after.writes == [(3, msgspec.json.encode(call(3)))]
    c.usage_ledger[0] = call(9)  # a replaced entry: no longer the kept list's
    changed = plan_usage(after.items, c.to_snapshot().usage, "c1")
    assert changed.writes == [(0, msgspec.json.encode(call(9)))]


def test_an_appended_entry_is_the_only_ledger_record_a_save_writes(tmp_path: Path) -> None:
    c = with_ledger("c1", 3, "alice")
    with LmdbStore(tmp_path) as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        c.usage_ledger.append(call(3))
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
    versions = raw_db(tmp_path, b"versions")
    record = versions[_versions.version_key(b"c1", 2)]
    appended = _versions._decoder.decode(record[9:])  # the entry by reference: no copy
    assert record[:1] == _versions.APPENDED and appended.usage == []
    assert (appended.usage_start, appended.usage_count) == (3, 4)
    usage = raw_db(tmp_path, b"usage")
    assert [usage[message_key(b"c1", i)] for i in range(4)] == [
        msgspec.json.encode(call(i)) for i in range(4)
    ]
    assert b'"usage":[]' in raw_db(tmp_path, b"bodies")[b"c1"]


# -- every version exact --------------------------------------------------------------------

# ("append", n) adds n entries, ("rewrite", i) replaces entry i by a new dict, ("truncate",
# n) keeps the first n, ("replace", 0) swaps in equal copies of every entry (an import, a
# restored version), ("bools", i) replaces entry i by one equal to it but for 1/True,
# ("message", 0) adds a message only, ("reopen", 0) reopens the store; a save follows each.
_steps = st.lists(
    st.tuples(
        st.sampled_from(["append", "rewrite", "truncate", "replace", "bools", "message", "reopen"]),
        st.integers(0, 6),
    ),
    max_size=24,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps, st.sampled_from([3, None]))
def test_any_sequence_of_ledger_edits_keeps_every_version_exactly_as_saved(
    steps: list[tuple[str, int]], keep: int | None
) -> None:
    c = with_ledger("c1", 0, "alice")
    saved: dict[int, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = LmdbStore(tmp, keep_versions=keep)
        try:
            c.stored_version = store.create_context(c.to_snapshot(), "alice")
            saved[c.stored_version] = snapshot_bytes(c)
            for op, n in steps:
                ledger = c.usage_ledger
                if op == "reopen":
                    store.close()
                    store = LmdbStore(tmp, keep_versions=keep)
                elif op == "append":
                    ledger += [call(len(ledger) + i) for i in range(n)]
                elif op == "truncate":
                    del ledger[n:]
                elif op == "replace":
                    c.usage_ledger = [dict(e) for e in ledger]
                elif op == "message":
                    c.add_message(OutgoingMessage(f"said {n}"))
                elif ledger and op == "rewrite":
                    ledger[n % len(ledger)] = call(100 + n)
                elif ledger and op == "bools":
                    ledger[n % len(ledger)] = {"type": "x", "flag": bool(n % 2)}
                    saved_flag = {"type": "x", "flag": n % 2}  # equal, other bytes
                    c.stored_version = store.save_context(c.to_snapshot(), "alice")
                    saved[c.stored_version] = snapshot_bytes(c)
                    ledger[n % len(ledger)] = saved_flag
                c.stored_version = store.save_context(c.to_snapshot(), "alice")
                saved[c.stored_version] = snapshot_bytes(c)
            store.prune()
            kept = [v.version for v in store.get_version_history("c1", "alice")]
            newest = sorted(saved, reverse=True)
            assert kept == (newest if keep is None else newest[:keep])
            for version in kept:
                snapshot = store.load_version("c1", version, "alice")
                assert snapshot is not None
                snapshot.stored_version = 0
                assert encode_snapshot(snapshot) == saved[version], version
            current = store.load("c1", "alice")
            assert current is not None and current.usage == c.usage_ledger
            assert msgspec.json.encode(current.usage) == msgspec.json.encode(c.usage_ledger)
        finally:
            store.close()


def _versions_exact(store: LmdbStore, saved: dict[int, list[dict[str, Any]]]) -> None:
    for version, ledger in saved.items():
        snapshot = store.load_version("c1", version, "alice")
        assert snapshot is not None and snapshot.usage == ledger, version


def test_retention_turns_the_oldest_kept_delta_into_a_checkpoint_with_its_ledger(
    tmp_path: Path,
) -> None:
    c = with_ledger("c1", 1, "alice")
    saved: dict[int, list[dict[str, Any]]] = {}
    with LmdbStore(tmp_path, keep_versions=None) as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        for i in range(1, 12):
            c.usage_ledger.append(call(i))
            c.stored_version = store.save_context(c.to_snapshot(), "alice")
            saved[c.stored_version] = list(c.usage_ledger)
    with LmdbStore(tmp_path, keep_versions=4) as store:
        assert store.prune("c1") == 8
        assert [v.version for v in store.get_version_history("c1", "alice")] == [12, 11, 10, 9]
        _versions_exact(store, {v: saved[v] for v in (9, 10, 11, 12)})


def test_delete_removes_every_ledger_record_and_a_recreated_id_starts_empty(
    tmp_path: Path,
) -> None:
    with LmdbStore(tmp_path) as store:
        c = with_ledger("c1", 5, "alice")
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        c.usage_ledger.append(call(5))
        store.save_context(c.to_snapshot(), "alice")
        assert len(_raw_open(store)) == 6
        assert store.delete("c1", "alice")
        assert _raw_open(store) == {}
        fresh = ConversationContext("c1", user_id="alice")
        store.create_context(fresh.to_snapshot(), "alice")
        loaded = store.load("c1", "alice")
        assert loaded is not None and loaded.usage == []


def _raw_open(store: LmdbStore) -> dict[bytes, bytes]:
    """The usage database of an open store, read through its own environment."""
    with store._directory.env.begin() as txn:
        return {bytes(k): bytes(v) for k, v in txn.cursor(db=store._dbs.usage)}


def test_a_shortened_ledger_leaves_no_record_past_its_end(tmp_path: Path) -> None:
    with LmdbStore(tmp_path) as store:
        c = with_ledger("c1", 6, "alice")
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        del c.usage_ledger[2:]
        store.save_context(c.to_snapshot(), "alice")
        assert sorted(_raw_open(store)) == [message_key(b"c1", 0), message_key(b"c1", 1)]
        loaded = store.load("c1", "alice")
        assert loaded is not None and loaded.usage == [call(0), call(1)]


# -- damage ---------------------------------------------------------------------------------


def _stored(tmp_path: Path, entries: int = 3) -> None:
    with LmdbStore(tmp_path) as store:
        store.create_context(with_ledger("c1", entries, "alice").to_snapshot(), "alice")
        store.create_context(with_ledger("c2", 2, "bob").to_snapshot(), "bob")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (b"\x00garbage", "does not decode"),
        (b'{"type": "model_call"', "does not decode"),
        (b"[1, 2]", "does not decode"),
        (b'{"deep": ' + b"[" * 80 + b"]" * 80 + b"}", "nested deeper"),
    ],
)
def test_a_damaged_ledger_record_is_a_corrupt_snapshot_naming_the_conversation(
    tmp_path: Path, value: bytes, why: str
) -> None:
    _stored(tmp_path)
    _put(tmp_path, b"usage", message_key(b"c1", 1), value)
    with LmdbStore(tmp_path) as store:
        with pytest.raises(CorruptSnapshotError, match=rf"conversation c1 .*{why}|c1.*{why}"):
            store.load("c1", "alice")
        assert [cid for cid, _ in store.undecodable()] == ["c1"]
        other = store.load("c2", "bob")
        assert other is not None and other.usage == [call(0), call(1)]
        assert store.quarantine("c1")
        [record] = store.quarantined("c1")
        assert record.usage == [msgspec.json.encode(call(0)), value, msgspec.json.encode(call(2))]
        assert store.undecodable() == [] and sorted(_raw_open(store)) == [
            message_key(b"c2", 0),
            message_key(b"c2", 1),
        ]


def test_a_missing_ledger_record_is_named_and_a_stray_one_past_the_end_is_not_read(
    tmp_path: Path,
) -> None:
    _stored(tmp_path)
    _put(tmp_path, b"usage", message_key(b"c1", 3), msgspec.json.encode({"stray": True}))
    with LmdbStore(tmp_path) as store:
        loaded = store.load("c1", "alice")
        assert loaded is not None and loaded.usage == [call(i) for i in range(3)]
    _put(tmp_path, b"usage", message_key(b"c1", 1), None)
    with (
        LmdbStore(tmp_path) as store,
        pytest.raises(CorruptSnapshotError, match="c1 has 2 of its 3 usage ledger entries"),
    ):
        store.load("c1", "alice")


def test_a_ledger_record_forged_under_another_conversations_key_reaches_no_other_reader(
    tmp_path: Path,
) -> None:
    """Bob's entries copied under alice's conversation past its count, and under a
    conversation bob has with no ledger: neither load reads a record it does not count."""
    with LmdbStore(tmp_path) as store:
        store.create_context(with_ledger("c1", 1, "alice").to_snapshot(), "alice")
        store.create_context(with_ledger("c2", 0, "bob").to_snapshot(), "bob")
    secret = msgspec.json.encode({"type": "model_call", "model": "bob's secret"})
    _put(tmp_path, b"usage", message_key(b"c1", 1), secret)
    _put(tmp_path, b"usage", message_key(b"c2", 0), secret)
    _put(tmp_path, b"usage", message_key(b"c1", 0) + b"\x00", secret)  # a longer key
    with LmdbStore(tmp_path) as store:
        alice = store.load("c1", "alice")
        bob = store.load("c2", "bob")
        assert alice is not None and alice.usage == [call(0)]
        assert bob is not None and bob.usage == []
        with pytest.raises(PermissionError):
            store.load("c1", "bob")


def test_a_record_forged_under_a_longer_key_is_no_part_of_a_version_that_refers(
    tmp_path: Path,
) -> None:
    """The first version refers to the stored ledger records; a record forged under a key
    one byte longer sorts among them and is skipped, as a load skips it: the version reads
    as saved, neither short of an entry nor holding the forged one."""
    with LmdbStore(tmp_path) as store:
        store.create_context(with_ledger("c1", 2, "alice").to_snapshot(), "alice")
    secret = msgspec.json.encode({"type": "model_call", "model": "bob's secret"})
    _put(tmp_path, b"usage", message_key(b"c1", 0) + b"\x00", secret)  # between 0 and 1
    with LmdbStore(tmp_path) as store:
        version = store.load_version("c1", 1, "alice")
        assert version is not None and version.usage == [call(0), call(1)]


def test_the_memory_store_keeps_its_own_ledger_list(tmp_path: Path) -> None:
    store = MemoryStore()
    c = with_ledger("c1", 2, "alice")
    snapshot = c.to_snapshot()
    store.create_context(snapshot, "alice")
    snapshot.usage.append(call(9))
    loaded = store.load("c1", "alice")
    assert loaded is not None and loaded.usage == [call(0), call(1)]
    loaded.usage.clear()
    again = store.load("c1", "alice")
    assert again is not None and again.usage == [call(0), call(1)]


def test_a_backup_carries_every_ledger_record_and_version(tmp_path: Path) -> None:
    c = with_ledger("c1", 2, "alice")
    with LmdbStore(tmp_path / "live") as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        c.usage_ledger.append(call(2))
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        store.backup(tmp_path / "copy")
    with LmdbStore(tmp_path / "copy", readonly=True) as copy:
        current = copy.load("c1", "alice")
        first = copy.load_version("c1", 1, "alice")
        assert current is not None and current.usage == [call(0), call(1), call(2)]
        assert first is not None and first.usage == [call(0), call(1)]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=10,
)
_mutations = st.one_of(
    st.binary(max_size=48).map(lambda garbage: lambda raw: garbage),
    st.integers(0, 200).map(lambda cut: lambda raw: raw[: cut % max(len(raw), 1)]),
    _json.map(lambda value: lambda raw: msgspec.json.encode(value)),
    st.integers(1, 3).map(
        lambda k: lambda raw: b'{"a":' + b"[" * (k * 40) + b"]" * (k * 40) + b"}"
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2), _mutations)
def test_any_damaged_ledger_record_either_loads_as_its_bytes_say_or_is_named_corrupt(
    index: int, mutate: Any
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        _stored(path)
        raw = raw_db(path, b"usage")[message_key(b"c1", index)]
        _put(path, b"usage", message_key(b"c1", index), mutate(raw))
        stored = [raw_db(path, b"usage")[message_key(b"c1", i)] for i in range(3)]
        with LmdbStore(path) as store:
            try:
                loaded = store.load("c1", "alice")
            except CorruptSnapshotError as exc:
                assert "c1" in str(exc)
                assert [cid for cid, _ in store.undecodable()] == ["c1"]
            else:
                assert loaded is not None and all(isinstance(e, dict) for e in loaded.usage)
                assert loaded.usage == [msgspec.json.decode(e) for e in stored]
                assert store.undecodable() == []
            other = store.load("c2", "bob")
            assert other is not None and other.usage == [call(0), call(1)]
