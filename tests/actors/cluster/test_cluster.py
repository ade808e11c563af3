"""Agent turns on a real local Ray cluster over the real PostgreSQL: turns across shards, a
shard killed mid-turn, a zombie refused by the fence, joiners in another process, a foreign
user refused on every call, and ``parlour cluster status``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from parlour.actors import OfferAccepted, Reply, TextDelta, TurnCancelledError, TurnDone
from parlour.actors.cluster import (
    AgentCluster,
    ClusterChat,
    ShardLostError,
    ShardStatus,
    shard_for,
    shard_names,
)
from parlour.runtime.blocks import ToolResultBlock, ToolUseBlock
from parlour.runtime.errors import StaleVersionError
from parlour.stores import PostgresStore

from ..agent_helpers import send_in_thread
from ..agent_helpers import user_texts as texts_of

pytestmark = pytest.mark.cluster

AGENT = "cluster_agents:scripted"


@pytest.fixture
def make_cluster(ray_cluster: Any, postgres_conninfo: str, request: Any) -> Iterator[Any]:
    """Clusters named after the test, over this test's schema; all shut down at the end."""
    made: list[AgentCluster] = []
    name = request.node.name.replace("_", "-")[:40]

    def make(shards: int, **kwargs: Any) -> AgentCluster:
        cluster = AgentCluster(name, shards=shards, agent=AGENT, store=postgres_conninfo, **kwargs)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.shutdown()


def user_texts(conninfo: str, cid: str, user: str) -> list[str]:
    with PostgresStore(conninfo) as store:
        snapshot = store.load(cid, user)
    assert snapshot is not None
    return texts_of(snapshot)


def test_turns_on_many_conversations_run_across_shards_and_every_one_is_stored(
    make_cluster: Any, postgres_conninfo: str
) -> None:
    cluster = make_cluster(2)
    chats: list[ClusterChat] = []  # ten or more, until both shards have some (ids are random)
    while len(chats) < 10 or {chat.shard for chat in chats} != set(cluster.shards):
        chats.append(cluster.chat(user_id=f"u{len(chats) % 3}"))
    for chat in chats:
        assert "one" in chat.send("one").text
        events = list(chat.stream("two"))
        assert isinstance(events[-1], TurnDone) and "two" in events[-1].reply.text
        assert any(isinstance(e, TextDelta) for e in events)

    async def async_turns() -> list[Reply]:
        replies = [await chat.asend("three") for chat in chats[:3]]
        async for event in chats[3].astream("three"):
            last = event
        assert isinstance(last, TurnDone)
        return replies

    assert all("three" in r.text for r in asyncio.run(async_turns()))
    for n, chat in enumerate(chats):
        expected = ["one", "two", "three"] if n < 4 else ["one", "two"]
        assert user_texts(postgres_conninfo, chat.conversation_id, chat.user_id) == expected
    served = {s.shard: s.turns for s in cluster.status() if isinstance(s, ShardStatus)}
    assert sum(served.values()) == 2 * len(chats) + 4 and all(served.values())


def test_a_shard_killed_mid_turn_fails_it_retryably_and_loses_nothing_acknowledged(
    make_cluster: Any, postgres_conninfo: str, gate: Any
) -> None:
    import ray

    cluster = make_cluster(1)
    chat = cluster.chat(user_id="alice")
    chat.send("first")
    chat.send("second")
    before = cluster.status()[0]
    assert isinstance(before, ShardStatus)
    assert before.collector == (50_000, 10, 10)  # a shard's process hosts chats
    turn, failures = send_in_thread(chat, "please hold")
    assert ray.get(gate.arrived.remote(), timeout=60) == 1  # the turn is inside its tool
    ray.kill(cluster.handle(chat.shard), no_restart=False)
    turn.join(timeout=60)
    assert len(failures) == 1 and isinstance(failures[0], ShardLostError)
    assert failures[0].retryable and chat.conversation_id in str(failures[0])
    # every acknowledged turn is stored; the cut-off turn kept its first boundary save
    texts = user_texts(postgres_conninfo, chat.conversation_id, "alice")
    assert texts == ["first", "second", "please hold"]
    assert "after" in chat.send("after the restart").text
    after = cluster.status()[0]
    assert isinstance(after, ShardStatus) and after.pid != before.pid
    texts = user_texts(postgres_conninfo, chat.conversation_id, "alice")
    assert texts == ["first", "second", "please hold", "after the restart"]


def test_a_zombie_shard_with_a_stale_route_never_overwrites_a_newer_save(
    make_cluster: Any, postgres_conninfo: str
) -> None:
    old = make_cluster(1)  # every conversation on shard 0
    grown = shard_names(old.name, 2)
    chat = next(
        c
        for c in (old.chat(user_id="alice") for _ in range(100))
        if shard_for(c.conversation_id, grown) == grown[1]
    )
    chat.send("hello")  # warm on shard 0 at its version
    new = make_cluster(2)  # the same name: shard 0 found, shard 1 added; the route moves
    moved = new.chat(user_id="alice", conversation_id=chat.conversation_id)
    assert moved.shard != chat.shard
    moved.send("newer")
    # the old route: shard 0 still holds the old version warm, but a shared store's version
    # is checked before a warm copy is granted, so it reloads and appends; it never overwrites
    chat.send("from the zombie")
    assert user_texts(postgres_conninfo, chat.conversation_id, "alice") == [
        "hello",
        "newer",
        "from the zombie",
    ]
    moved.send("still fine")  # and the same holds the other way round
    assert user_texts(postgres_conninfo, chat.conversation_id, "alice") == [
        "hello",
        "newer",
        "from the zombie",
        "still fine",
    ]


def test_a_zombie_shard_mid_turn_is_refused_by_the_fence_when_the_route_moved_under_it(
    make_cluster: Any, postgres_conninfo: str, gate: Any
) -> None:
    import ray

    old = make_cluster(1)  # every conversation on shard 0
    grown = shard_names(old.name, 2)
    chat = next(
        c
        for c in (old.chat(user_id="alice") for _ in range(100))
        if shard_for(c.conversation_id, grown) == grown[1]
    )
    chat.send("hello")
    # granted and saved on shard 0, then held in its tool
    turn, failures = send_in_thread(chat, "please hold")
    assert ray.get(gate.arrived.remote(), timeout=60) == 1
    new = make_cluster(2)  # the route moves to shard 1 while shard 0 still runs the turn
    moved = new.chat(user_id="alice", conversation_id=chat.conversation_id)
    assert moved.shard != chat.shard
    moved.send("newer")
    ray.get(gate.open.remote())
    turn.join(timeout=60)
    assert len(failures) == 1 and isinstance(failures[0], StaleVersionError)
    # the zombie's later saves were refused: the newer turn is intact and nothing follows it
    assert user_texts(postgres_conninfo, chat.conversation_id, "alice") == [
        "hello",
        "please hold",
        "newer",
    ]


def test_a_joiner_in_another_process_follows_the_turn_and_its_offer_is_answered(
    make_cluster: Any, postgres_conninfo: str, gate: Any
) -> None:
    import ray
    from cluster_agents import send_from_here  # type: ignore[import-not-found]

    cluster = make_cluster(2)
    chat = cluster.chat(user_id="alice")
    chat.send("hello")
    config = {"name": cluster.name, "shards": 2, "agent": AGENT, "store": postgres_conninfo}
    turn = ray.remote(send_from_here).options(num_cpus=0)
    reply_ref = turn.remote(config, "alice", chat.conversation_id, "please hold")
    ray.get(gate.arrived.remote(), timeout=60)

    async def follow() -> tuple[list[Any], list[Any]]:
        joined = cluster.join(chat.conversation_id, "alice")
        events = [await anext(joined)]  # the turn's text so far
        replayed = cluster.join(chat.conversation_id, "alice", after=0)
        whole = [await anext(replayed)]  # the turn from its first event
        assert cluster.offer(chat.conversation_id, "alice", "and one more")
        await gate.open.remote()
        events += [event async for event in joined]
        whole += [event async for event in replayed]
        return events, whole

    events, whole = asyncio.run(follow())
    assert isinstance(events[-1], TurnDone)
    assert [e.seq for e in whole] == list(range(1, len(whole) + 1))
    assert whole[-1].seq == events[-1].seq and whole[-len(events) + 1 :] == events[1:]
    assert any(isinstance(e, OfferAccepted) and e.text == "and one more" for e in events)
    reply = ray.get(reply_ref, timeout=60)
    assert reply.text == events[-1].reply.text
    assert cluster.offer(chat.conversation_id, "alice", "too late") is False
    texts = user_texts(postgres_conninfo, chat.conversation_id, "alice")
    assert texts == ["hello", "please hold", "and one more"]


def test_a_foreign_user_is_refused_on_every_cluster_call(
    make_cluster: Any, postgres_conninfo: str
) -> None:
    cluster = make_cluster(2)
    chat = cluster.chat(user_id="alice")
    chat.send("secret")
    intruder = cluster.chat(user_id="mallory", conversation_id=chat.conversation_id)
    with pytest.raises(PermissionError):
        intruder.send("let me in")
    with pytest.raises(PermissionError):
        list(intruder.stream("let me in"))
    with pytest.raises(PermissionError):
        asyncio.run(intruder.asend("let me in"))

    async def astream() -> None:
        async for _ in intruder.astream("let me in"):
            pass

    with pytest.raises(PermissionError):
        asyncio.run(astream())

    async def join() -> list[Any]:
        return [e async for e in cluster.join(chat.conversation_id, "mallory")]

    assert asyncio.run(join()) == []
    assert cluster.offer(chat.conversation_id, "mallory", "psst") is False
    with pytest.raises(PermissionError):
        cluster.force_release(chat.conversation_id, "mallory")
    assert user_texts(postgres_conninfo, chat.conversation_id, "alice") == ["secret"]


def test_cluster_status_shows_each_shard_its_turns_and_a_missing_one_as_down(
    make_cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from parlour.actors.app._cli import main

    cluster = make_cluster(2)
    chats = [cluster.chat(user_id="alice") for _ in range(6)]
    for chat in chats:
        chat.send("hello")
    assert main(["cluster", "status", "--name", cluster.name, "--shards", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[:2] for line in lines] == [[s, "up"] for s in cluster.shards]
    turns = sum(int(line.split("\t")[6].split()[0]) for line in lines)
    assert turns == 6
    assert main(["cluster", "status", "--name", cluster.name, "--shards", "3"]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == f"{cluster.name}-shard-2\tDOWN\tno such shard"


def test_closing_a_stream_early_cancels_the_turn_on_its_shard_saved_and_released(
    make_cluster: Any, postgres_conninfo: str, gate: Any
) -> None:
    import ray

    cluster = make_cluster(1)
    chat = cluster.chat(user_id="alice")
    chat.send("hello")
    events = chat.stream("please hold")
    next(events)  # the turn runs on the shard
    ray.get(gate.arrived.remote(), timeout=60)  # inside its tool, holding the lease
    events.close()
    assert "next" in chat.send("next").text  # the lease was released
    with PostgresStore(postgres_conninfo) as store:
        snapshot = store.load(chat.conversation_id, "alice")
    assert snapshot is not None
    blocks = [b for m in snapshot.messages for b in m.blocks]
    calls = {b.id for b in blocks if isinstance(b, ToolUseBlock)}
    results = [b for b in blocks if isinstance(b, ToolResultBlock)]
    assert calls and calls == {r.tool_use_id for r in results}  # answerable
    assert all(r.is_error for r in results)


def test_force_release_through_the_cluster_cancels_the_running_turn_with_its_error(
    make_cluster: Any, postgres_conninfo: str, gate: Any
) -> None:
    import ray

    cluster = make_cluster(2)
    chat = cluster.chat(user_id="alice")
    chat.send("hello")
    turn, failures = send_in_thread(chat, "please hold")
    ray.get(gate.arrived.remote(), timeout=60)
    assert cluster.force_release(chat.conversation_id, "alice") is not None
    turn.join(timeout=60)
    assert len(failures) == 1 and isinstance(failures[0], TurnCancelledError)
    assert user_texts(postgres_conninfo, chat.conversation_id, "alice") == ["hello", "please hold"]


def test_growing_the_cluster_moves_only_conversations_to_the_new_shard_and_all_go_on(
    make_cluster: Any, postgres_conninfo: str
) -> None:
    small = make_cluster(2)
    three = shard_names(small.name, 3)
    pool = [small.chat(user_id="alice") for _ in range(80)]
    movers = [c for c in pool if shard_for(c.conversation_id, three) == three[2]][:4]
    stayers = [c for c in pool if shard_for(c.conversation_id, three) != three[2]][:8]
    chats = movers + stayers
    for chat in chats:
        chat.send("one")
    grown = make_cluster(3)  # the same name: shards 0 and 1 found, shard 2 added
    moved = [c for c in chats if grown.shard_of(c.conversation_id) != c.shard]
    assert moved == movers and len(moved) == 4  # and only to the new shard
    for chat in chats:
        grown.chat(user_id="alice", conversation_id=chat.conversation_id).send("two")
    for chat in chats:
        assert user_texts(postgres_conninfo, chat.conversation_id, "alice") == ["one", "two"]
    newest = grown.status()[2]
    assert isinstance(newest, ShardStatus) and newest.turns == len(moved)
