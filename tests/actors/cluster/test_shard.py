"""The shard host without Ray: its service and agent over the real PostgreSQL, the fence
refusing a stale copy, and bad factories refused at the boundary."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from parlour.actors import TurnDone
from parlour.actors.cluster import ShardHost, load_factory
from parlour.stores import MemoryStore, PostgresStore

from ..agent_helpers import user_texts as texts_of


@pytest.fixture
def host(postgres_conninfo: str) -> Iterator[ShardHost]:
    shard = ShardHost("s-0", "cluster_agents:scripted", postgres_conninfo)
    yield shard
    shard.stop()


def user_texts(store: PostgresStore, cid: str, user: str) -> list[str]:
    snapshot = store.load(cid, user)
    assert snapshot is not None
    return texts_of(snapshot)


def test_a_new_conversation_is_created_then_resumed_and_stored_in_order(
    host: ShardHost, postgres_conninfo: str
) -> None:
    first = asyncio.run(host.send("alice", "c-1", "Hello", True))
    second = asyncio.run(host.send("alice", "c-1", "Again", False))
    assert "Hello" in first.text and "Again" in second.text
    with PostgresStore(postgres_conninfo) as store:
        assert user_texts(store, "c-1", "alice") == ["Hello", "Again"]
    assert host.status().turns == 2 and host.status().running == []


def test_a_retried_first_turn_adopts_the_record_its_first_attempt_saved(
    host: ShardHost, postgres_conninfo: str
) -> None:
    asyncio.run(host.send("alice", "c-2", "Hello", True))
    host.service.evict_conversation("c-2")
    asyncio.run(host.send("alice", "c-2", "Hello again", True))  # new=True once more
    with PostgresStore(postgres_conninfo) as store:
        assert user_texts(store, "c-2", "alice") == ["Hello", "Hello again"]


def test_a_warm_copy_older_than_another_shards_save_is_reloaded_and_never_overwrites_it(
    host: ShardHost, postgres_conninfo: str
) -> None:
    asyncio.run(host.send("alice", "c-3", "Hello", True))  # warm here at its version
    with ShardHost("s-1", "cluster_agents:scripted", postgres_conninfo) as other:
        asyncio.run(other.send("alice", "c-3", "Newer", False))
    # the shared store's version is checked before the warm copy is granted: it reloads
    asyncio.run(host.send("alice", "c-3", "After", False))
    with PostgresStore(postgres_conninfo) as store:
        assert user_texts(store, "c-3", "alice") == ["Hello", "Newer", "After"]


def test_streamed_events_end_with_the_reply(host: ShardHost) -> None:
    async def collect() -> list[object]:
        return [e async for e in host.stream("alice", "c-4", "Hello", True)]

    events = asyncio.run(collect())
    assert isinstance(events[-1], TurnDone) and "Hello" in events[-1].reply.text


def test_another_users_conversation_is_refused_and_learns_nothing(host: ShardHost) -> None:
    asyncio.run(host.send("alice", "c-5", "Secret", True))
    with pytest.raises(PermissionError):
        asyncio.run(host.send("mallory", "c-5", "Let me in", False))
    with pytest.raises(PermissionError):
        asyncio.run(host.send("mallory", "c-5", "Let me in", True))
    assert host.offer("c-5", "mallory", "psst") is False


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "is named 'package.module:function'"),
        ("cluster_agents:missing", "names nothing callable"),
        ("cluster_agents:not_an_agent", "returned object"),
    ],
)
def test_a_bad_agent_factory_is_refused_naming_it(
    spec: str, message: str, postgres_conninfo: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ShardHost("s-9", spec, postgres_conninfo)


def test_load_factory_finds_a_dotted_attribute() -> None:
    assert load_factory("cluster_agents:Gate.reset").__name__ == "reset"


def test_a_store_factory_is_refused_unless_it_returns_a_whole_persistent_store() -> None:
    with pytest.raises(ValueError, match="returned MemorySessionCache, not a PersistentStore"):
        ShardHost("s-9", "cluster_agents:scripted", "parlour.stores:MemorySessionCache")
    with ShardHost("s-9", "cluster_agents:scripted", "parlour.stores:MemoryStore") as host:
        assert isinstance(host.store, MemoryStore)  # and stop() closes it
