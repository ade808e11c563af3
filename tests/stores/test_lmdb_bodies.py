"""The body record (the snapshot less its messages and its stored version): a save that
leaves it as it was skips writing it, one that changes it writes it, and every load, of the
current record or of a kept version, gives the body its save had."""

from __future__ import annotations

from pathlib import Path

import lmdb

from parlour.runtime import ConversationContext
from parlour.stores import LmdbStore
from parlour.stores._records import encode_body


def _stored_body(path: Path, cid: str) -> bytes:
    env = lmdb.open(str(path), max_dbs=16, readonly=True, lock=False)
    with env.begin() as txn:
        raw = txn.get(cid.encode(), db=env.open_db(b"bodies", txn=txn, create=False))
    env.close()
    assert raw is not None
    return bytes(raw)


def test_every_body_change_is_written_and_read_back_and_the_rest_skip_it(tmp_path: Path) -> None:
    c = ConversationContext("c1", user_id="alice")
    c.add_user_message("first")
    objectives = {}
    with LmdbStore(tmp_path) as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        for turn in range(6):
            if turn % 2:
                c.put_main_objective("goal", f"objective {turn}")  # the body changes
            c.add_user_message(f"turn {turn}")
            c.stored_version = store.save_context(c.to_snapshot(), "alice")
            objectives[c.stored_version] = dict(c.to_snapshot().objective_slots())
        for version, expected in objectives.items():
            kept = store.load_version("c1", version, "alice")
            assert kept is not None and kept.stored_version == version
            assert {k: getattr(b, "text", b) for k, b in kept.objective_slots()} == {
                k: getattr(b, "text", b) for k, b in expected.items()
            }
    assert _stored_body(tmp_path, "c1") == encode_body(c.to_snapshot())
    with LmdbStore(tmp_path) as reopened:
        loaded = reopened.load("c1", "alice")
        assert loaded is not None and loaded.stored_version == c.stored_version == 7
        assert encode_body(loaded) == encode_body(c.to_snapshot())


def test_a_body_is_the_same_bytes_whatever_version_the_snapshot_was_loaded_at() -> None:
    c = ConversationContext("c1", user_id="alice")
    c.add_user_message("first")
    before = encode_body(c.to_snapshot())
    c.stored_version = 41
    assert encode_body(c.to_snapshot()) == before
