"""A compacted conversation survives the snapshot and the LMDB store, and measures the same."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from parlour.runtime import (
    CompactionLevel,
    ContextWindowManager,
    ConversationContext,
    OfflineCompactor,
    Transcript,
)
from parlour.runtime.snapshots import ConversationPersistenceSnapshot, MessageSnapshot
from parlour.runtime.testing import fake_spec
from parlour.stores import LmdbStore

from .conftest import long_chat

SPEC = fake_spec()


def _messages(c: ConversationContext) -> list[MessageSnapshot]:
    return [MessageSnapshot.of(m) for m in c.messages]


@pytest.mark.parametrize("level", list(CompactionLevel))
def test_a_compacted_conversation_round_trips_through_its_snapshot_and_measures_the_same(
    level: CompactionLevel,
) -> None:
    c = long_chat(6)
    OfflineCompactor().compact(c, level)
    data = msgspec.json.encode(c.to_snapshot())
    restored = msgspec.json.decode(data, type=ConversationPersistenceSnapshot).to_conversation()
    assert _messages(restored) == _messages(c)
    assert restored.get_total_tokens(SPEC) == c.get_total_tokens(SPEC)
    assert Transcript.render(restored) == Transcript.render(c)


def test_the_store_writes_the_replaced_messages_and_a_reload_measures_the_same(
    lmdb_store: LmdbStore,
) -> None:
    c = long_chat(8, cid="stored")
    lmdb_store.create_context(c.to_snapshot(), "alice")
    c.stored_version = lmdb_store.version_of("stored", "alice") or 0
    manager = ContextWindowManager(SPEC, comfort_override=800, compactor=OfflineCompactor())
    report = manager.fit(c)
    assert report.compacted and len(report.levels) > 1 and len(c.messages) < 33
    lmdb_store.save_context(c.to_snapshot(), "alice")
    loaded = lmdb_store.load("stored", "alice")
    assert loaded is not None
    restored = loaded.to_conversation()
    assert _messages(restored) == _messages(c)
    assert manager.measure(restored) == manager.measure(c) == report.tokens_after
    assert not manager.needs_compaction(restored)


def test_a_reopened_store_serves_the_compacted_conversation(tmp_path: Path) -> None:
    path = f"{tmp_path}/lmdb"
    c = long_chat(5, cid="reopen")
    with LmdbStore(path) as store:
        store.create_context(c.to_snapshot(), "alice")
        c.stored_version = store.version_of("reopen", "alice") or 0
        OfflineCompactor().compact(c, CompactionLevel.AGGRESSIVE)
        store.save_context(c.to_snapshot(), "alice")
    with LmdbStore(path) as store:
        loaded = store.load("reopen", "alice")
    assert loaded is not None
    assert _messages(loaded.to_conversation()) == _messages(c)
