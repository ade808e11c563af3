"""The PersistentStore contract, run over every implementation (MemoryStore, LmdbStore)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from parlour.runtime import ConversationContext
from parlour.runtime.errors import ConversationNotFoundError, StaleVersionError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import LmdbStore, MemoryStore, PersistentStore


@pytest.fixture(params=["memory", "lmdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PersistentStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    lmdb_store = LmdbStore(tmp_path / "db")
    yield lmdb_store
    lmdb_store.close()


def snapshot(
    cid: str | None = "c1", text: str = "Are you working?", version: int = 0
) -> ConversationPersistenceSnapshot:
    context = ConversationContext(cid, user_id="alice")
    context.put_main_objective("task", "Be brief.")
    context.add_user_message(text)
    context.stored_version = version
    return context.to_snapshot()


def test_a_created_conversation_loads_back_equal_at_its_version(store: PersistentStore) -> None:
    saved = snapshot()
    assert store.create_context(saved, "alice") == 1
    assert store.load("c1", "alice") == msgspec.structs.replace(saved, stored_version=1)
    assert store.exists("c1", "alice")
    assert store.version_of("c1", "alice") == 1


def test_an_update_replaces_the_snapshot_but_keeps_the_title(store: PersistentStore) -> None:
    # B199
    store.create_context(snapshot(text="First question"), "alice")
    assert store.save_context(snapshot(text="Retitled question", version=1), "alice") == 2
    loaded = store.load("c1", "alice")
    assert loaded is not None and loaded.messages[0].raw_content == "Retitled question"
    [summary] = store.list_conversations("alice")
    assert summary.title == "First question"


def test_an_update_of_a_missing_record_fails_and_creates_nothing(store: PersistentStore) -> None:
    # B198
    with pytest.raises(ConversationNotFoundError):
        store.save_context(snapshot(), "alice")
    assert store.load("c1", "alice") is None
    assert not store.exists("c1", "alice")


def test_another_users_conversation_cannot_be_loaded_saved_or_deleted(
    store: PersistentStore,
) -> None:
    # B196, D14
    store.create_context(snapshot(), "alice")
    with pytest.raises(PermissionError, match="User mallory does not own conversation c1"):
        store.load("c1", "mallory")
    with pytest.raises(PermissionError):
        store.save_context(snapshot(text="overwritten"), "mallory")
    with pytest.raises(PermissionError):
        store.create_context(snapshot(text="overwritten"), "mallory")
    with pytest.raises(PermissionError):
        store.delete("c1", "mallory")
    assert not store.exists("c1", "mallory")
    loaded = store.load("c1", "alice")
    assert loaded is not None and loaded.messages[0].raw_content == "Are you working?"


def test_unknown_ids_load_none_and_delete_reports_once(store: PersistentStore) -> None:
    # B197
    assert store.load("nope", "alice") is None
    store.create_context(snapshot(), "alice")
    assert store.delete("c1", "alice") is True
    assert store.delete("c1", "alice") is False


def test_a_snapshot_without_an_id_is_refused(store: PersistentStore) -> None:
    # B197
    with pytest.raises(ValueError, match="conversation_id is None"):
        store.create_context(snapshot(cid=None), "alice")
    with pytest.raises(ValueError):
        store.save_context(snapshot(cid=None), "alice")


def test_a_user_lists_only_their_own_conversations(store: PersistentStore) -> None:
    store.create_context(snapshot("a1"), "alice")
    store.create_context(snapshot("a2"), "alice")
    store.create_context(snapshot("b1"), "bob")
    assert sorted(s.conversation_id for s in store.list_conversations("alice")) == ["a1", "a2"]
    assert [s.conversation_id for s in store.list_conversations("bob")] == ["b1"]
    assert all(isinstance(s.updated_at, dt.datetime) for s in store.list_conversations("bob"))


def test_a_save_from_a_stale_version_is_refused_and_writes_nothing(store: PersistentStore) -> None:
    store.create_context(snapshot(), "alice")
    store.save_context(snapshot(text="second", version=1), "alice")
    with pytest.raises(StaleVersionError) as refused:
        store.save_context(snapshot(text="stale", version=1), "alice")
    assert (refused.value.expected, refused.value.found) == (1, 2)
    loaded = store.load("c1", "alice")
    assert loaded is not None and loaded.messages[0].raw_content == "second"
    assert loaded.stored_version == 2


def test_a_delete_is_heard_by_every_delete_listener(store: PersistentStore) -> None:
    heard: list[str] = []
    store.add_delete_listener(heard.append)
    store.create_context(snapshot(), "alice")
    store.delete("c1", "alice")
    store.delete("c1", "alice")
    assert heard == ["c1"]
