"""Agent turns on a local Ray cluster of 1, 2 and 4 shards, against the single-node service
in the same run, and the latency the Ray hop adds to a turn.

Every configuration runs ``--conversations`` conversations of ``--turns`` turns each on the
scripted model (no tools), all conversations at once from one asyncio loop, over one
PostgreSQL database. Baseline: one ``ConversationService`` and ``Agent`` in this process,
driven by ``chat.asend``. Cluster: ``AgentCluster(shards=N)`` driven by ``ClusterChat.asend``.
Then ``--hops`` sequential turns on one conversation, single-node and on a one-shard
cluster: the difference of the medians is the hop (two messages and the pickling of the
reply). On a two-core machine the shards share the two cores with the driver, PostgreSQL
and Ray itself, so CPU caps the gain; the ratio says how much.

The server: ``--dsn``, else ``PARLOUR_TEST_POSTGRES``, else one started for the run with
``.ci/postgres``. Ray runs on the loopback interface only, without usage statistics.

    python benchmarks/cluster.py [--conversations 40] [--turns 5] [--hops 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only

from parlour.actors import Agent, ConversationService
from parlour.runtime import Depth, OutputSize, ScriptedClient
from parlour.stores import PostgresStore

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from stores import _schema, _server  # noqa: E402


def scripted_agent() -> Agent:
    """The agent every shard and the baseline build (``cluster:scripted_agent``)."""
    return Agent(
        ScriptedClient(),
        objective="Answer briefly.",
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
    )


async def _drive(chats: list[Any], turns: int) -> float:
    async def one(chat: Any) -> None:
        for n in range(turns):
            await chat.asend(f"turn {n}")

    started = time.perf_counter()
    await asyncio.gather(*(one(chat) for chat in chats))
    return len(chats) * turns / (time.perf_counter() - started)


async def _latencies(chat: Any, count: int) -> float:
    await chat.asend("warm up")
    taken = []
    for n in range(count):
        started = time.perf_counter()
        await chat.asend(f"hop {n}")
        taken.append(time.perf_counter() - started)
    return statistics.median(taken)


def single_node(conninfo: str, conversations: int, turns: int, hops: int) -> tuple[float, float]:
    with PostgresStore(conninfo) as store:
        service = ConversationService(store)
        agent = scripted_agent()
        try:
            chats = [agent.chat(service, user_id=f"u{i}") for i in range(conversations)]
            rate = asyncio.run(_drive(chats, turns))
            latency = asyncio.run(_latencies(agent.chat(service, user_id="hop"), hops))
        finally:
            service.stop()
    return rate, latency


def on_cluster(
    conninfo: str, shards: int, conversations: int, turns: int, hops: int
) -> tuple[float, float | None]:
    from parlour.actors.cluster import AgentCluster

    cluster = AgentCluster(
        f"bench-{shards}", shards=shards, agent="cluster:scripted_agent", store=conninfo
    )
    try:
        chats = [cluster.chat(user_id=f"u{i}") for i in range(conversations)]
        asyncio.run(chats[0].asend("start the shards"))
        cluster.status()  # every shard up (it waits for each) before the clock starts
        rate = asyncio.run(_drive(chats, turns))
        latency = (
            asyncio.run(_latencies(cluster.chat(user_id="hop"), hops)) if shards == 1 else None
        )
    finally:
        cluster.shutdown()
    return rate, latency


def _start_ray() -> Any:
    import ray
    from ray.cluster_utils import Cluster

    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p
    )
    node = {"num_cpus": 2, "object_store_memory": 100 * 1024 * 1024, "node_ip_address": "127.0.0.1"}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    ray.init(
        address=cluster.address,
        namespace="parlour-bench",
        _node_ip_address="127.0.0.1",
        logging_level="ERROR",
    )
    return cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--hops", type=int, default=200)
    parser.add_argument("--dsn", default=os.environ.get("PARLOUR_TEST_POSTGRES"))
    args = parser.parse_args()
    import ray

    with _server(args.dsn) as dsn, _schema(dsn) as conninfo:
        base, base_latency = single_node(conninfo, args.conversations, args.turns, args.hops)
        ray_cluster = _start_ray()
        try:
            results = {
                n: on_cluster(conninfo, n, args.conversations, args.turns, args.hops)
                for n in (1, 2, 4)
            }
        finally:
            ray.shutdown()
            ray_cluster.shutdown()
    print(f"{args.conversations} conversations x {args.turns} turns, scripted model, PostgreSQL")
    print(f"{'configuration':<22}{'turns/s':>10}{'ratio':>8}")
    print(f"{'single-node service':<22}{base:>10.1f}{1.0:>8.2f}")
    for shards, (rate, _) in results.items():
        print(f"{f'cluster, {shards} shard(s)':<22}{rate:>10.1f}{rate / base:>8.2f}")
    hop = results[1][1]
    assert hop is not None
    print(
        f"median turn: {base_latency * 1e3:.2f} ms single-node, {hop * 1e3:.2f} ms through Ray "
        f"(the hop adds {(hop - base_latency) * 1e3:.2f} ms)"
    )


if __name__ == "__main__":
    main()
