"""``parlour cluster status``: the shards of a running cluster, their live conversations and
their health. Registered by ``parlour.actors.app._cli``; Ray is imported only when it runs."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from ._guard import AdminError, positive

__all__ = ["add_cluster_commands", "ray_init", "run_cluster"]


def add_cluster_commands(commands: Any) -> None:
    """Add ``cluster status`` to the ``parlour`` command's subparsers."""
    cluster = commands.add_parser("cluster", help="a Ray cluster of agent shards")
    actions = cluster.add_subparsers(dest="cluster_command", required=True)
    status = actions.add_parser("status", help="shards, live conversations, health")
    status.add_argument("--address", default="auto", help="the Ray cluster (default: auto)")
    status.add_argument("--name", required=True, help="the cluster's name")
    status.add_argument("--shards", type=positive, required=True, help="how many shards it routes")
    status.add_argument("--namespace", default="parlour")
    status.add_argument("--timeout", type=float, default=10.0, help="seconds per shard")


def run_cluster(args: argparse.Namespace) -> int:
    """Print one line per shard; exit status 1 when any shard is down or missing."""
    try:
        import ray  # noqa: F401  (installed: the cluster extra)
    except ImportError:
        print("the cluster needs Ray: pip install -e '.[cluster]'", file=sys.stderr)
        return 2
    from ..cluster._client import ShardDown, shard_statuses

    ray_init(args.address, args.namespace)
    report = shard_statuses(args.name, args.shards, args.namespace, args.timeout)
    for entry in report:
        if isinstance(entry, ShardDown):
            print(f"{entry.shard}\tDOWN\t{entry.error}")
            continue
        running = ",".join(entry.running) or "-"
        print(
            f"{entry.shard}\tup\tpid {entry.pid}\tnode {entry.node[:12]}\t{entry.live} live"
            f"\t{entry.owned} owned\t{entry.turns} turns\trunning {running}"
        )
    return 1 if any(isinstance(e, ShardDown) for e in report) else 0


def ray_init(address: str, namespace: str) -> None:
    """Connect this process to the Ray cluster at ``address`` (once).

    Raises:
        AdminError: no Ray cluster answers there.
    """
    import ray

    if ray.is_initialized():
        return
    try:
        ray.init(address=address, namespace=namespace, logging_level=logging.ERROR)
    except ConnectionError:
        raise AdminError(
            f"no Ray cluster is running at --address {address}: start one (ray start --head) "
            "or name its address."
        ) from None
