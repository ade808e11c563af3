"""The PersistentStore contract, with version history and paging, over PostgresStore.

Written against the protocol (and the history and paging surface), parametrized by store
kind, so that other stores can join the parametrization.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

import msgspec
import pytest

from parlour.runtime import ConversationContext
from parlour.runtime.errors import ConversationNotFoundError, StaleVersionError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import PostgresStore


class Ticks:
    """A wall clock that moves one second per reading, so save times are distinct."""

    def __init__(self) -> None:
        self.at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        self.at += dt.timedelta(seconds=1)
        return self.at


@pytest.fixture(params=["postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[PostgresStore]:
    conninfo = request.getfixturevalue("postgres_conninfo")
    made = PostgresStore(conninfo, now=Ticks())
    yield made
    made.close()


def snapshot(
    cid: str | None = "c1", text: str = "Are you working?", version: int = 0, user: str = "alice"
) -> ConversationPersistenceSnapshot:
    context = ConversationContext(cid, user_id=user)
    context.put_main_objective("task", "Be brief.")
    context.add_user_message(text)
    context.stored_version = version
    return context.to_snapshot()


def stamped(
    saved: ConversationPersistenceSnapshot, version: int
) -> ConversationPersistenceSnapshot:
    return msgspec.structs.replace(saved, stored_version=version)


def test_a_created_conversation_loads_back_equal_at_its_version(store: PostgresStore) -> None:
    saved = snapshot()
    assert store.create_context(saved, "alice") == 1
    assert store.load("c1", "alice") == stamped(saved, 1)
    assert store.exists("c1", "alice")
    assert store.version_of("c1", "alice") == 1


def test_an_update_replaces_the_snapshot_but_keeps_the_title(store: PostgresStore) -> None:
    store.create_context(snapshot(text="First question"), "alice")
    assert store.save_context(snapshot(text="Retitled question", version=1), "alice") == 2
    loaded = store.load("c1", "alice")
    assert loaded is not None and loaded.messages[0].raw_content == "Retitled question"
    [summary] = store.list_conversations("alice")
    assert summary.title == "First question"


def test_an_update_of_a_missing_record_fails_and_creates_nothing(store: PostgresStore) -> None:
    with pytest.raises(ConversationNotFoundError, match="Conversation c1 has no stored record"):
        store.save_context(snapshot(), "alice")
    assert store.load("c1", "alice") is None
    assert not store.exists("c1", "alice")
    assert store.list_conversations("alice") == []


def test_another_user_is_refused_alike_by_every_operation_and_changes_nothing(
    store: PostgresStore,
) -> None:
    saved = snapshot()
    store.create_context(saved, "alice")
    refused = "User mallory does not own conversation c1"
    attempts: list[Callable[[], object]] = [
        lambda: store.load("c1", "mallory"),
        lambda: store.save_context(snapshot(text="overwritten", version=1), "mallory"),
        lambda: store.save_context(snapshot(text="overwritten", user="mallory"), "mallory"),
        lambda: store.create_context(snapshot(text="overwritten", user="mallory"), "mallory"),
        lambda: store.create_context(snapshot(text="overwritten"), "mallory"),
        lambda: store.delete("c1", "mallory"),
        lambda: store.version_of("c1", "mallory"),
        lambda: store.get_version_history("c1", "mallory"),
        lambda: store.load_version("c1", 1, "mallory"),
        lambda: store.load_version("c1", dt.datetime.now(dt.UTC), "mallory"),
    ]
    for attempt in attempts:
        with pytest.raises(PermissionError) as caught:
            attempt()
        assert str(caught.value) == refused
    assert not store.exists("c1", "mallory")
    assert store.list_conversations("mallory") == []
    assert store.load("c1", "alice") == stamped(saved, 1)
    assert [v.version for v in store.get_version_history("c1", "alice")] == [1]


def test_unknown_ids_load_none_and_delete_reports_once(store: PostgresStore) -> None:
    assert store.load("nope", "alice") is None
    assert store.version_of("nope", "alice") is None
    assert store.get_version_history("nope", "alice") == []
    assert store.load_version("nope", 1, "alice") is None
    store.create_context(snapshot(), "alice")
    assert store.delete("c1", "alice") is True
    assert store.delete("c1", "alice") is False


def test_a_snapshot_without_an_id_is_refused(store: PostgresStore) -> None:
    with pytest.raises(ValueError, match="conversation_id is None"):
        store.create_context(snapshot(cid=None), "alice")
    with pytest.raises(ValueError):
        store.save_context(snapshot(cid=None), "alice")


@pytest.mark.parametrize("bad", ["", "c\x001"])
def test_an_empty_id_or_one_holding_nul_is_refused_by_every_operation(
    store: PostgresStore, bad: str
) -> None:
    attempts: list[Callable[[], object]] = [
        lambda: store.create_context(snapshot(cid=bad), "alice"),
        lambda: store.save_context(snapshot(cid=bad, version=1), "alice"),
        lambda: store.load(bad, "alice"),
        lambda: store.delete(bad, "alice"),
        lambda: store.exists(bad, "alice"),
        lambda: store.version_of(bad, "alice"),
        lambda: store.get_version_history(bad, "alice"),
        lambda: store.load_version(bad, 1, "alice"),
    ]
    for attempt in attempts:
        with pytest.raises(ValueError, match="non-empty and hold no NUL"):
            attempt()
    assert store.list_conversations("alice") == []


def test_a_user_id_holding_nul_is_refused_by_every_operation(store: PostgresStore) -> None:
    store.create_context(snapshot(), "alice")
    bad = "al\x00ice"
    attempts: list[Callable[[], object]] = [
        lambda: store.create_context(snapshot(user=bad), bad),
        lambda: store.save_context(snapshot(version=1, user=bad), bad),
        lambda: store.load("c1", bad),
        lambda: store.delete("c1", bad),
        lambda: store.exists("c1", bad),
        lambda: store.version_of("c1", bad),
        lambda: store.get_version_history("c1", bad),
        lambda: store.load_version("c1", 1, bad),
        lambda: store.list_conversations(bad),
    ]
    for attempt in attempts:
        with pytest.raises(ValueError, match="A user id cannot hold NUL"):
            attempt()
    assert store.version_of("c1", "alice") == 1


def test_a_snapshot_naming_another_user_than_the_saver_is_refused_and_writes_nothing(
    store: PostgresStore,
) -> None:
    with pytest.raises(ValueError, match="snapshot of conversation c1 names user bob"):
        store.create_context(snapshot(user="bob"), "alice")
    assert not store.exists("c1", "alice") and not store.exists("c1", "bob")
    store.create_context(snapshot(), "alice")
    with pytest.raises(ValueError, match="names user bob, but user alice is saving it"):
        store.save_context(snapshot(text="bob's", version=1, user="bob"), "alice")
    assert store.version_of("c1", "alice") == 1


def test_a_user_lists_only_their_own_conversations(store: PostgresStore) -> None:
    store.create_context(snapshot("a1"), "alice")
    store.create_context(snapshot("a2"), "alice")
    store.create_context(snapshot("b1", user="bob"), "bob")
    assert sorted(s.conversation_id for s in store.list_conversations("alice")) == ["a1", "a2"]
    assert [s.conversation_id for s in store.list_conversations("bob")] == ["b1"]
    assert all(isinstance(s.updated_at, dt.datetime) for s in store.list_conversations("bob"))


def test_a_listing_is_newest_first_and_pages_cover_it_exactly_once(store: PostgresStore) -> None:
    for n in range(7):
        store.create_context(snapshot(f"a{n}"), "alice")
    store.save_context(snapshot("a2", text="again", version=1), "alice")  # a2 is now newest
    store.create_context(snapshot("b0", user="bob"), "bob")
    listed = [s.conversation_id for s in store.list_conversations("alice")]
    assert listed == ["a2", "a6", "a5", "a4", "a3", "a1", "a0"]
    by_summary, by_id = _pages(store, use_id=False), _pages(store, use_id=True)
    assert by_summary == by_id == [["a2", "a6", "a5"], ["a4", "a3", "a1"], ["a0"], []]
    assert store.list_conversations("alice", limit=0) == []


def _pages(store: PostgresStore, *, use_id: bool) -> list[list[str]]:
    pages: list[list[str]] = []
    page = store.list_conversations("alice", limit=3)
    while True:
        pages.append([s.conversation_id for s in page])
        if not page:
            return pages
        last = page[-1].conversation_id if use_id else page[-1]
        page = store.list_conversations("alice", limit=3, after=last)


def test_paging_after_a_conversation_the_user_does_not_own_is_refused(
    store: PostgresStore,
) -> None:
    store.create_context(snapshot("b1", user="bob"), "bob")
    for after in ("b1", "never"):
        with pytest.raises(ValueError, match=f"User alice has no conversation {after} to list"):
            store.list_conversations("alice", after=after)


def test_a_save_from_a_stale_version_is_refused_and_writes_nothing(store: PostgresStore) -> None:
    store.create_context(snapshot(), "alice")
    store.save_context(snapshot(text="second", version=1), "alice")
    with pytest.raises(StaleVersionError) as refused:
        store.save_context(snapshot(text="stale", version=1), "alice")
    assert (refused.value.expected, refused.value.found) == (1, 2)
    loaded = store.load("c1", "alice")
    assert loaded is not None and loaded.messages[0].raw_content == "second"
    assert loaded.stored_version == 2
    assert [v.version for v in store.get_version_history("c1", "alice")] == [2, 1]


def test_versions_never_restart_after_a_delete(store: PostgresStore) -> None:
    store.create_context(snapshot(), "alice")
    store.save_context(snapshot(text="second", version=1), "alice")
    store.delete("c1", "alice")
    assert store.create_context(snapshot(text="reborn"), "alice") == 3
    with pytest.raises(StaleVersionError):
        store.save_context(snapshot(text="from before the delete", version=2), "alice")
    assert store.save_context(snapshot(text="after", version=3), "alice") == 4


def test_a_deleted_id_may_be_created_by_another_user_and_keeps_counting(
    store: PostgresStore,
) -> None:
    store.create_context(snapshot(), "alice")
    store.delete("c1", "alice")
    assert store.create_context(snapshot(user="bob"), "bob") == 2
    with pytest.raises(PermissionError):
        store.load("c1", "alice")


def test_a_delete_is_heard_by_every_delete_listener(store: PostgresStore) -> None:
    heard: list[str] = []
    store.add_delete_listener(heard.append)
    store.create_context(snapshot(), "alice")
    store.delete("c1", "alice")
    store.delete("c1", "alice")
    assert heard == ["c1"]


def test_every_save_is_a_version_that_loads_back_exactly_by_number_or_time(
    store: PostgresStore,
) -> None:
    context = ConversationContext("c1", user_id="alice")
    context.add_user_message("First question")
    saved = [context.to_snapshot()]
    context.stored_version = store.create_context(saved[0], "alice")
    for text in ("Second", "Third"):
        context.add_user_message(text)
        saved.append(context.to_snapshot())
        context.stored_version = store.save_context(saved[-1], "alice")
    history = store.get_version_history("c1", "alice")
    assert [v.version for v in history] == [3, 2, 1]
    assert history[0].saved_at > history[1].saved_at > history[2].saved_at
    for entry in history:
        expected = stamped(saved[entry.version - 1], entry.version)
        assert store.load_version("c1", entry.version, "alice") == expected
        assert store.load_version("c1", entry.saved_at, "alice") == expected
    assert store.load_version("c1", 4, "alice") is None
    assert store.load_version("c1", history[-1].saved_at - dt.timedelta(1), "alice") is None


def test_a_delete_removes_the_history_with_the_conversation(store: PostgresStore) -> None:
    store.create_context(snapshot(), "alice")
    store.save_context(snapshot(text="second", version=1), "alice")
    store.delete("c1", "alice")
    assert store.get_version_history("c1", "alice") == []
    store.create_context(snapshot(text="reborn"), "alice")
    assert [v.version for v in store.get_version_history("c1", "alice")] == [3]
    assert store.load_version("c1", 2, "alice") is None
