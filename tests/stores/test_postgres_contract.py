"""The store conformance suite over PostgresStore, and what only it offers: paging after a
conversation id, and its own id refusals (PostgreSQL text holds no NUL; no length limit)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from parlour.stores import PersistentStore, PostgresStore
from parlour.stores.testing import StoreContract, Ticks, snapshot


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store(self, clock: Ticks, postgres_conninfo: str) -> Iterator[PostgresStore]:
        with PostgresStore(postgres_conninfo, now=clock) as made:
            yield made

    @pytest.fixture(autouse=True)
    def _conninfo(self, postgres_conninfo: str) -> None:
        self.conninfo = postgres_conninfo

    def damage(self, store: PersistentStore, conversation_id: str) -> None:
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(
                "UPDATE parlour_versions SET body = %s WHERE conversation_id = %s",
                (b"{", conversation_id),
            )


@pytest.fixture
def store(postgres_conninfo: str) -> Iterator[PostgresStore]:
    with PostgresStore(postgres_conninfo, now=Ticks()) as made:
        yield made


@pytest.mark.parametrize("bad", ["", "c\x001"])
def test_an_empty_id_or_one_holding_nul_is_refused_naming_the_rule(
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
        with pytest.raises(ValueError, match="A conversation id cannot"):
            attempt()
    assert store.list_conversations("alice") == []


def test_a_user_id_holding_nul_is_refused_naming_the_rule(store: PostgresStore) -> None:
    with pytest.raises(ValueError, match="A user id cannot contain NUL"):
        store.list_conversations("al\x00ice")


def test_pages_may_start_after_a_conversation_id(store: PostgresStore) -> None:
    for n in range(7):
        store.create_context(snapshot(f"a{n}"), "alice")
    store.save_context(snapshot("a2", text="again", version=1), "alice")
    pages: list[list[str]] = []
    page = store.list_conversations("alice", limit=3)
    while True:
        pages.append([s.conversation_id for s in page])
        if not page:
            break
        page = store.list_conversations("alice", limit=3, after=page[-1].conversation_id)
    assert pages == [["a2", "a6", "a5"], ["a4", "a3", "a1"], ["a0"], []]


def test_paging_after_a_conversation_the_user_does_not_own_is_refused(
    store: PostgresStore,
) -> None:
    store.create_context(snapshot("b1", user="bob"), "bob")
    for after in ("b1", "never"):
        with pytest.raises(ValueError, match=f"User alice has no conversation {after} to list"):
            store.list_conversations("alice", after=after)
