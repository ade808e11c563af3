"""parlour.actors.cluster: agent turns sharded over a Ray cluster (the ``parlour[cluster]``
extra), with the shared store's fencing version as the last line against a stale shard.

    cluster = AgentCluster("chat", shards=4, agent="myapp.agents:build", store=DSN)
    chat = cluster.chat(user_id="alice")
    reply = chat.send("Hello")             # runs on the conversation's shard

Importing it does not import Ray; making an ``AgentCluster`` needs ``ray.init`` first.
"""

from ._client import (
    AgentCluster,
    ClusterChat,
    ShardDown,
    ShardLostError,
    shard_statuses,
)
from ._routing import shard_for, shard_names
from ._shard import ClusterThinker, ShardHost, ShardStatus, load_factory

__all__ = [
    "AgentCluster",
    "ClusterChat",
    "ClusterThinker",
    "ShardDown",
    "ShardHost",
    "ShardLostError",
    "ShardStatus",
    "load_factory",
    "shard_for",
    "shard_names",
    "shard_statuses",
]
