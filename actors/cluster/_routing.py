"""Rendezvous (highest random weight) hashing: which shard a conversation lives on.

Each (shard, conversation) pair gets a score from a keyed hash; the conversation goes to
the shard with the highest score. Adding a shard moves exactly the conversations the new
shard now wins (about ``1/N`` of them), removing one moves only the conversations it held,
and every process computes the same answer from the same shard names, with no shared state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["shard_for", "shard_names"]


def _score(shard: str, conversation_id: str) -> int:
    digest = hashlib.blake2b(
        conversation_id.encode(), digest_size=8, key=shard.encode()[:64], person=b"parlour-shard"
    )
    return int.from_bytes(digest.digest(), "big")


def shard_for(conversation_id: str, shards: Sequence[str]) -> str:
    """The shard, among ``shards``, that owns ``conversation_id``.

    Stable across processes and runs: it depends only on the names.

    Raises:
        ValueError: ``shards`` is empty.
    """
    if not shards:
        raise ValueError(f"Conversation {conversation_id} cannot be routed: there are no shards.")
    return max(shards, key=lambda shard: (_score(shard, conversation_id), shard))


def shard_names(cluster: str, count: int) -> list[str]:
    """The names of a cluster's ``count`` shards: ``{cluster}-shard-{i}``.

    Raises:
        ValueError: ``count`` is below 1.
    """
    if count < 1:
        raise ValueError(f"Cluster {cluster} needs at least one shard, not {count}.")
    return [f"{cluster}-shard-{i}" for i in range(count)]
