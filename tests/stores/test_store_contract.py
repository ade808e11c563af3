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
    cid: str | None = "c1",
    text: str = "Are you working?",
    version: int = 0,
    user: str | None = "alice",
) -> ConversationPersistenceSnapshot:
    context = ConversationContext(cid, user_id=user)
    context.put_main_objective("task", "Be brief.")
    context.add_user_message(text)
    context.stored_version = version
    return context.to_snapshot()


def said(store: PersistentStore, cid: str = "c1", user: str = "alice") -> list[str]:
    loaded = store.load(cid, user)
    assert loaded is not None
    return [str(m.raw_content) for m in loaded.messages]


def test_a_created_conversation_loads_back_equal_at_its_version(store: PersistentStore) -> None:
    saved = snapshot()
    assert store.create_context(saved, "alice") == 1
    assert store.load("c1", "alice") == msgspec.structs.replace(saved, stored_version=1)
    assert store.exists("c1", "alice")
    assert store.version_of("c1", "alice") == 1


def test_an_update_replaces_the_snapshot_but_keeps_the_title(store: PersistentStore) -> None:
    store.create_context(snapshot(text="First question"), "alice")
    assert store.save_context(snapshot(text="Retitled question", version=1), "alice") == 2
    assert said(store) == ["Retitled question"]
    [summary] = store.list_conversations("alice")
    assert summary.title == "First question"


def test_a_second_create_of_ones_own_record_keeps_title_and_creation_time(
    store: PersistentStore,
) -> None:
    store.create_context(snapshot(text="First question"), "alice")
    [before] = store.list_conversations("alice")
    assert store.create_context(snapshot(text="Another question"), "alice") == 2
    [after] = store.list_conversations("alice")
    assert (after.title, after.created_at) == (before.title, before.created_at)
    assert said(store) == ["Another question"]


def test_an_update_of_a_missing_record_fails_and_creates_nothing(store: PersistentStore) -> None:
    with pytest.raises(ConversationNotFoundError):
        store.save_context(snapshot(), "alice")
    assert store.load("c1", "alice") is None
    assert not store.exists("c1", "alice")


def test_another_users_conversation_cannot_be_loaded_saved_or_deleted(
    store: PersistentStore,
) -> None:
    store.create_context(snapshot(), "alice")
    with pytest.raises(PermissionError, match="User mallory does not own conversation c1"):
        store.load("c1", "mallory")
    with pytest.raises(PermissionError, match="User mallory does not own conversation c1"):
        store.save_context(snapshot(text="overwritten", version=1, user="mallory"), "mallory")
    with pytest.raises(PermissionError, match="User mallory does not own conversation c1"):
        store.create_context(snapshot(text="overwritten", user="mallory"), "mallory")
    with pytest.raises(PermissionError, match="User mallory does not own conversation c1"):
        store.delete("c1", "mallory")
    with pytest.raises(PermissionError, match="User mallory does not own conversation c1"):
        store.version_of("c1", "mallory")
    assert not store.exists("c1", "mallory")
    assert store.list_conversations("mallory") == []
    assert said(store) == ["Are you working?"]
    assert store.version_of("c1", "alice") == 1


def test_a_snapshot_naming_another_user_is_refused_before_anything_is_written(
    store: PersistentStore,
) -> None:
    with pytest.raises(PermissionError, match="User alice cannot store conversation c1"):
        store.create_context(snapshot(user="bob"), "alice")
    assert store.load("c1", "alice") is None
    assert store.load("c1", "bob") is None
    store.create_context(snapshot(), "alice")
    with pytest.raises(PermissionError, match="the snapshot belongs to another user"):
        store.save_context(snapshot(text="hijacked", version=1, user="bob"), "alice")
    assert said(store) == ["Are you working?"]
    assert store.version_of("c1", "alice") == 1


def test_a_snapshot_without_a_user_is_stored_for_the_acting_user(store: PersistentStore) -> None:
    assert store.create_context(snapshot(user=None), "alice") == 1
    assert store.exists("c1", "alice")
    assert not store.exists("c1", "bob")


def test_unknown_ids_load_none_and_delete_reports_once(store: PersistentStore) -> None:
    assert store.load("nope", "alice") is None
    assert store.version_of("nope", "alice") is None
    store.create_context(snapshot(), "alice")
    assert store.delete("c1", "alice") is True
    assert store.delete("c1", "alice") is False


def test_a_snapshot_without_an_id_is_refused(store: PersistentStore) -> None:
    with pytest.raises(ValueError, match="conversation_id is None"):
        store.create_context(snapshot(cid=None), "alice")
    with pytest.raises(ValueError, match="conversation_id is None"):
        store.save_context(snapshot(cid=None), "alice")


@pytest.mark.parametrize(
    ("cid", "refusal"),
    [
        ("", "cannot be empty"),
        ("a\x00b", "cannot contain NUL"),
        ("x" * 503, "at most 502 bytes"),
        ("é" * 252, "at most 502 bytes"),  # 252 characters, 504 bytes
        ("bad\ud800", "lone surrogates"),
    ],
)
def test_an_invalid_conversation_id_is_refused_by_every_call_and_nothing_is_written(
    store: PersistentStore, cid: str, refusal: str
) -> None:
    with pytest.raises(ValueError, match=refusal):
        store.create_context(snapshot(cid), "alice")
    with pytest.raises(ValueError, match=refusal):
        store.save_context(snapshot(cid, version=1), "alice")
    for call in (store.load, store.exists, store.version_of, store.delete):
        with pytest.raises(ValueError, match=refusal):
            call(cid, "alice")
    assert store.list_conversations("alice") == []


def test_an_id_at_the_limit_is_stored_and_loads(store: PersistentStore) -> None:
    cid = "x" * 500 + "é"  # 502 bytes: its message keys are 511, LMDB's limit
    assert store.create_context(snapshot(cid), "alice") == 1
    assert said(store, cid) == ["Are you working?"]
    assert [s.conversation_id for s in store.list_conversations("alice")] == [cid]


@pytest.mark.parametrize("user", ["", "a\x00b", "u" * 512])
def test_an_invalid_user_id_is_refused(store: PersistentStore, user: str) -> None:
    with pytest.raises(ValueError, match="user id"):
        store.create_context(snapshot(user=None), user)
    with pytest.raises(ValueError, match="user id"):
        store.load("c1", user)
    with pytest.raises(ValueError, match="user id"):
        store.list_conversations(user)


def test_a_listing_shows_only_the_users_own_conversations_newest_first(
    store: PersistentStore,
) -> None:
    for cid in ("a1", "a2", "a3"):
        store.create_context(snapshot(cid), "alice")
    store.create_context(snapshot("b1", user="bob"), "bob")
    store.save_context(snapshot("a1", "again", version=1), "alice")
    listed = store.list_conversations("alice")
    assert [s.conversation_id for s in listed] == ["a1", "a3", "a2"]
    assert [s.updated_at for s in listed] == sorted((s.updated_at for s in listed), reverse=True)
    assert [s.conversation_id for s in store.list_conversations("bob")] == ["b1"]
    assert all(isinstance(s.updated_at, dt.datetime) for s in listed)


def test_a_deleted_conversation_leaves_the_listing(store: PersistentStore) -> None:
    store.create_context(snapshot("a1"), "alice")
    store.create_context(snapshot("a2"), "alice")
    store.delete("a1", "alice")
    assert [s.conversation_id for s in store.list_conversations("alice")] == ["a2"]


def test_pages_walk_the_listing_in_order_without_repeats_or_gaps(store: PersistentStore) -> None:
    for i in range(7):
        store.create_context(snapshot(f"a{i}"), "alice")
    whole = store.list_conversations("alice")
    pages, after = [], None
    while page := store.list_conversations("alice", limit=3, after=after):
        assert len(page) <= 3
        pages.extend(page)
        after = page[-1]
    assert pages == whole
    assert store.list_conversations("alice", limit=0) == []
    with pytest.raises(ValueError, match="cannot be negative"):
        store.list_conversations("alice", limit=-1)


def test_a_save_from_a_stale_version_is_refused_and_writes_nothing(store: PersistentStore) -> None:
    store.create_context(snapshot(), "alice")
    store.save_context(snapshot(text="second", version=1), "alice")
    with pytest.raises(StaleVersionError) as refused:
        store.save_context(snapshot(text="stale", version=1), "alice")
    assert (refused.value.expected, refused.value.found) == (1, 2)
    with pytest.raises(StaleVersionError):
        store.save_context(snapshot(text="from the future", version=3), "alice")
    assert said(store) == ["second"]
    assert store.version_of("c1", "alice") == 2


def test_versions_continue_across_delete_and_recreate(store: PersistentStore) -> None:
    store.create_context(snapshot(), "alice")
    store.save_context(snapshot(text="second", version=1), "alice")
    store.delete("c1", "alice")
    assert store.version_of("c1", "alice") is None
    assert store.create_context(snapshot(text="reborn"), "alice") == 3
    with pytest.raises(StaleVersionError):  # a copy loaded before the delete
        store.save_context(snapshot(text="stale", version=2), "alice")
    assert said(store) == ["reborn"]
    assert store.save_context(snapshot(text="on", version=3), "alice") == 4


def test_a_deleted_id_can_be_taken_by_another_user_at_a_fresh_version(
    store: PersistentStore,
) -> None:
    store.create_context(snapshot(), "alice")
    store.delete("c1", "alice")
    assert store.create_context(snapshot(user="bob"), "bob") == 2
    assert not store.exists("c1", "alice")
    assert store.list_conversations("alice") == []


def test_a_delete_is_heard_by_every_delete_listener(store: PersistentStore) -> None:
    heard: list[str] = []
    store.add_delete_listener(heard.append)
    store.create_context(snapshot(), "alice")
    store.delete("c1", "alice")
    store.delete("c1", "alice")
    assert heard == ["c1"]
