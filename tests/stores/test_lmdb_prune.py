"""LmdbStore's pruning by count: the newest versions kept exactly, the oldest kept one
recorded as a checkpoint ahead of the prune that keeps it, and no other conversation's
versions touched (their keys sort beside its own)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime import ConversationContext, OutgoingMessage
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore
from parlour.stores._ids import conversation_key
from parlour.stores._records import message_key
from parlour.stores.lmdb import _pruning, _versions


def _saves(store: LmdbStore, cid: str, count: int) -> dict[int, bytes]:
    """Create ``cid`` and save it ``count`` more times; each version's bytes as saved."""
    c = ConversationContext(cid, user_id="alice")
    c.add_user_message("question 0")
    c.stored_version = store.create_context(c.to_snapshot(), "alice")
    saved = {c.stored_version: encode_snapshot(c.to_snapshot())}
    for i in range(count):
        c.add_message(OutgoingMessage(f"answer {i}"))
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
        saved[c.stored_version] = encode_snapshot(c.to_snapshot())
    return saved


def _loaded(store: LmdbStore, cid: str, version: int) -> bytes:
    snapshot = store.load_version(cid, version, "alice")
    assert snapshot is not None
    return encode_snapshot(snapshot)


def _kinds(store: LmdbStore, cid: str) -> dict[int, bool]:
    """Each recorded version of ``cid``: whether it is a checkpoint."""
    with store._directory.env.begin() as txn:
        return {
            k.version: k.checkpoint for k in _versions.kept(txn, store._dbs, conversation_key(cid))
        }


def test_the_version_a_coming_prune_keeps_oldest_is_a_checkpoint_so_the_prune_rebuilds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 10 versions kept, the prune at version 64 keeps 55 to 64: version 55 was
    recorded as a checkpoint, so the prune deletes and rebuilds no version from its
    chain; every kept version reads exactly as saved."""
    rebuilt: list[Any] = []
    real = _pruning._materialize
    monkeypatch.setattr(_pruning, "_materialize", lambda *args: rebuilt.append(real(*args)))
    with LmdbStore(tmp_path, keep_versions=10) as store:
        saved = _saves(store, "c1", 63)  # version 64 is the last: it pruned
        kinds = _kinds(store, "c1")
        assert sorted(kinds) == list(range(55, 65))
        assert kinds[55] and not any(kinds[v] for v in range(56, 65))
        assert rebuilt == []
        for version in kinds:
            assert _loaded(store, "c1", version) == saved[version]
        assert store.prune() == 0  # nothing left to prune: already the newest 10


def test_a_prune_out_of_step_with_the_saves_still_rebuilds_the_oldest_kept_version(
    tmp_path: Path,
) -> None:
    """An explicit prune whose oldest kept version was recorded as a delta makes it a
    checkpoint from its chain, and it reads as saved."""
    with LmdbStore(tmp_path, keep_versions=4) as store:
        saved = _saves(store, "c1", 20)
        assert not _kinds(store, "c1")[18]
        assert store.prune("c1") == 17
        kinds = _kinds(store, "c1")
        assert sorted(kinds) == [18, 19, 20, 21] and kinds[18]
        for version in kinds:
            assert _loaded(store, "c1", version) == saved[version]


# ids whose keys sort right before, right after and far from "c1" (a key is the id, then NUL)
_NEIGHBOURS = ["c0", "c1 ", "c1\x01", "c10", "b", "d"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 12),
    st.integers(0, 140),
    st.lists(st.sampled_from(_NEIGHBOURS), unique=True, max_size=4),
    st.integers(0, 12),
)
def test_pruning_keeps_the_newest_versions_of_its_conversation_and_no_neighbours_lose_any(
    keep: int, saves: int, neighbours: list[str], neighbour_saves: int
) -> None:
    """Whatever the number kept and saved, after the saves' own prunes and an explicit one
    the conversation keeps exactly its newest ``keep`` versions, each reading as saved; a
    conversation whose key sorts beside its own (before, after, a prefix of its id) keeps
    every version it would keep alone."""
    with tempfile.TemporaryDirectory() as tmp, LmdbStore(tmp, keep_versions=keep) as store:
        others = {cid: _saves(store, cid, neighbour_saves) for cid in neighbours}
        saved = _saves(store, "c1", saves)
        store.prune("c1")
        newest = sorted(saved, reverse=True)[:keep]
        assert sorted(_kinds(store, "c1"), reverse=True) == newest
        for version in newest:
            assert _loaded(store, "c1", version) == saved[version]
        for cid, versions in others.items():  # too few saves to have pruned themselves
            assert sorted(_kinds(store, cid)) == sorted(versions)
            for version in versions:
                assert _loaded(store, cid, version) == versions[version]


def test_a_checkpoint_over_a_missing_message_record_takes_nothing_from_the_next_conversation(
    tmp_path: Path,
) -> None:
    """A checkpoint reads the records a save left by one cursor range; with one of them
    missing (damage) the range runs into the next conversation's records, whose keys sort
    right after, and none of those may enter this conversation's history."""
    with LmdbStore(tmp_path, keep_versions=63) as store:  # version 2: kept oldest at 64
        _saves(store, "c1 ", 3)
        _saves(store, "c1", 0)
        with store._directory.env.begin(write=True) as txn:
            assert txn.delete(message_key(b"c1", 0), db=store._dbs.messages)
        c = ConversationContext("c1", user_id="alice")  # the store still plans from its memory
        c.add_user_message("question 0")
        c.stored_version = 1
        c.add_message(OutgoingMessage("answer"))
        assert store.save_context(c.to_snapshot(), "alice") == 2
        assert _kinds(store, "c1")[2]
        with store._directory.env.begin() as txn:
            theirs = set(_versions._raw_records(txn, store._dbs.messages, b"c1 "))
            state = _versions.state(txn, store._dbs, b"c1", 2)
        assert state is not None and theirs and not theirs & set(state.messages)
