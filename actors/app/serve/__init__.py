"""``parlour serve``: the agent host over HTTP (an ASGI app on Starlette) and its inspector.

Importing this package needs nothing beyond parlour; building the app needs the ``serve``
extra (``pip install -e '.[serve]'``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ._tokens import TokenBook

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from parlour.stores import PersistentStore

    from ..._service import ConversationService
    from ...agent._agent import Agent
    from ...cluster import AgentCluster

__all__ = ["TokenBook", "asgi_app", "cluster_asgi_app"]


def asgi_app(
    agent: Agent,
    service: ConversationService,
    *,
    tokens: TokenBook | Mapping[str, str],
    max_body_bytes: int = 64 * 1024,
    max_text_chars: int = 32_000,
    page_limit: int = 100,
) -> Starlette:
    """The chat API and inspector page for ``agent``'s conversations on ``service``.

    Mount it in a Starlette or FastAPI application, or run it with uvicorn (``parlour
    serve`` does). Run its lifespan, or ``await app.state.host.aclose()`` when the
    application stops, so running turns end at their next save.

    Args:
        agent: the agent every conversation talks to.
        service: the conversation service; it must have a persistent store.
        tokens: bearer tokens mapped to user ids (or a ``TokenBook``).
        max_body_bytes: the largest request body accepted (413 beyond).
        max_text_chars: the longest message accepted (413 beyond).
        page_limit: the most conversations one list page holds.

    Raises:
        ValueError: the service has no persistent store, or a token or user id is empty.
        ImportError: the ``serve`` extra (starlette) is not installed.

    Thread-safety: the app runs on one event loop; its turns run on the agent's async path.
    """
    from ._app import build
    from ._turns import LocalTurns

    if service.store is None:
        raise ValueError("The HTTP API needs a service with a persistent store.")
    limits = (max_body_bytes, max_text_chars, page_limit)
    return build(LocalTurns(agent, service), service.store, tokens, limits)


def cluster_asgi_app(
    cluster: AgentCluster,
    store: PersistentStore,
    *,
    tokens: TokenBook | Mapping[str, str],
    max_body_bytes: int = 64 * 1024,
    max_text_chars: int = 32_000,
    page_limit: int = 100,
) -> Starlette:
    """The same chat API and inspector page, its turns run on ``cluster``'s shards.

    Each turn runs on its conversation's shard and its events stream back; offers, joins
    and cancels go to that shard too. The app reads conversations (lists, views, exports,
    versions) from ``store`` directly: open it on the cluster's database (this process
    only reads it). Close the app as ``asgi_app``'s; ``store`` and the cluster stay the
    caller's.

    Args:
        cluster: the cluster (``ray.init`` has run in this process).
        store: the cluster's shared store, for reads.
        tokens, max_body_bytes, max_text_chars, page_limit: as ``asgi_app``'s.

    Raises:
        ValueError: a token or user id is empty.
        ShardLostError: the first shard did not answer for the model's spec.
        ImportError: the ``serve`` extra (starlette) is not installed.

    Thread-safety: as ``asgi_app``'s; the cluster's calls are made off the loop or awaited.
    """
    from ._app import build
    from ._turns import ClusterTurns

    return build(ClusterTurns(cluster), store, tokens, (max_body_bytes, max_text_chars, page_limit))
