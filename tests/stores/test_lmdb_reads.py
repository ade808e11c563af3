"""LmdbStore's load path: messages read as one run from the first, decoded by the plain
decoder when nothing calls for the checked one, with the same answers as the checked read:
a missing message named, a stray record past the end ignored, a value nested too deeply
refused, and every message back exactly as saved."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime import ConversationContext, IncomingMessage
from parlour.runtime.blocks import PojoBlock, TextBlock
from parlour.runtime.errors import CorruptSnapshotError
from parlour.stores import LmdbStore


def _message_key(cid: str, index: int) -> bytes:
    return cid.encode() + b"\x00" + index.to_bytes(8, "big")


def _store_three(path: Path) -> None:
    with LmdbStore(path, sync=False) as store:
        for cid in ("c1", "c2"):
            c = ConversationContext(cid, user_id="alice")
            for i in range(3):
                c.add_user_message(f"{cid} message {i}")
            store.create_context(c.to_snapshot(), "alice")


def _raw(path: Path, change: Any) -> None:
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        change(txn, env.open_db(b"messages", txn=txn))
    env.close()


def test_a_missing_middle_message_is_named_and_the_next_conversation_lends_none(
    tmp_path: Path,
) -> None:
    _store_three(tmp_path)
    _raw(tmp_path, lambda txn, db: txn.delete(_message_key("c1", 1), db=db))
    with LmdbStore(tmp_path) as store:
        with pytest.raises(CorruptSnapshotError, match="c1 has 2 of its 3 messages"):
            store.load("c1", "alice")
        loaded = store.load("c2", "alice")
        assert loaded is not None
        assert [m.raw_content for m in loaded.messages] == [f"c2 message {i}" for i in range(3)]


def test_a_stray_record_past_the_last_message_is_not_read(tmp_path: Path) -> None:
    _store_three(tmp_path)
    _raw(tmp_path, lambda txn, db: txn.put(_message_key("c1", 3), b"{not json", db=db))
    with LmdbStore(tmp_path) as store:
        loaded = store.load("c1", "alice")
        assert loaded is not None
        assert [m.raw_content for m in loaded.messages] == [f"c1 message {i}" for i in range(3)]


def _nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def test_a_pojo_value_nested_too_deeply_is_refused_though_it_decodes(tmp_path: Path) -> None:
    """The plain decoder reads it; the load still refuses it, as the checked read does."""
    _store_three(tmp_path)
    record = (
        b'{"direction":"plain","role":"user","blocks":[{"type":"pojo","value":'
        + _nested(80)
        + b"}]}"
    )
    _raw(tmp_path, lambda txn, db: txn.put(_message_key("c1", 2), record, db=db))
    refused = pytest.raises(CorruptSnapshotError, match=r"c1 holds a value .* nested deeper")
    with LmdbStore(tmp_path) as store, refused:
        store.load("c1", "alice")


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
_blocks = st.lists(
    st.text(min_size=1, max_size=12).map(lambda t: TextBlock(text=t))
    | st.dictionaries(st.text(max_size=4), _values, max_size=3).map(lambda v: PojoBlock(value=v)),
    min_size=1,
    max_size=3,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_blocks, max_size=6))
def test_every_message_loads_exactly_as_saved(messages: list[list[Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp, LmdbStore(Path(tmp), sync=False) as store:
        c = ConversationContext("c1", user_id="alice")
        for blocks in messages:
            c.add_message(IncomingMessage(blocks=blocks))
        saved = c.to_snapshot()
        store.create_context(saved, "alice")
        loaded = store.load("c1", "alice")
        assert loaded is not None
        assert loaded.messages == saved.messages
