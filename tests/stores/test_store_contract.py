"""The store conformance suite over MemoryStore and LmdbStore, and what only they share:
LMDB's id limits."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from parlour.stores import LmdbStore, MemoryStore, PersistentStore
from parlour.stores.testing import StoreContract, Ticks, snapshot


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store(self, clock: Ticks) -> MemoryStore:
        return MemoryStore(now=clock)

    def damage(self, store: PersistentStore, conversation_id: str) -> None:
        assert isinstance(store, MemoryStore)
        store._records[conversation_id].data = b"{not json"


class TestLmdbStore(StoreContract):
    @pytest.fixture
    def store(self, clock: Ticks, tmp_path: Path) -> Iterator[LmdbStore]:
        with LmdbStore(tmp_path / "db", now=clock) as made:
            yield made

    def damage(self, store: PersistentStore, conversation_id: str) -> None:
        assert isinstance(store, LmdbStore)
        with store._directory.env.begin(write=True) as txn:
            txn.put(conversation_id.encode(), b"{not json", db=store._dbs.bodies)


@pytest.fixture(params=["memory", "lmdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PersistentStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    with LmdbStore(tmp_path / "db") as made:
        yield made


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
    loaded = store.load(cid, "alice")
    assert loaded is not None and loaded.messages[0].raw_content == "Are you working?"
    assert [s.conversation_id for s in store.list_conversations("alice")] == [cid]
    assert [v.version for v in store.get_version_history(cid, "alice")] == [1]


@pytest.mark.parametrize("user", ["", "a\x00b", "u" * 512])
def test_an_invalid_user_id_is_refused(store: PersistentStore, user: str) -> None:
    with pytest.raises(ValueError, match="user id"):
        store.create_context(snapshot(user=None), user)
    with pytest.raises(ValueError, match="user id"):
        store.load("c1", user)
    with pytest.raises(ValueError, match="user id"):
        store.list_conversations(user)


def test_listeners_added_and_removed_from_many_threads_at_once_are_none_of_them_lost(
    store: PersistentStore,
) -> None:
    """Services start and stop on one store from any thread: adds and removes racing one
    another lose none, and a delete reaches exactly the listeners left."""
    heard: list[int] = []
    start = threading.Barrier(8)

    def hearing(n: int) -> Callable[[str], None]:
        return lambda cid: heard.append(n)

    def churn(worker: int) -> None:
        mine = [hearing(worker * 1000 + i) for i in range(100)]
        start.wait()
        for listener in mine:
            store.add_delete_listener(listener)
        for listener in mine[::2]:  # every other one goes again
            store.remove_delete_listener(listener)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        threads = [threading.Thread(target=churn, args=(w,)) for w in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    store.create_context(snapshot("c1"), "alice")
    assert store.delete("c1", "alice")
    assert sorted(heard) == [w * 1000 + i for w in range(8) for i in range(1, 100, 2)]
