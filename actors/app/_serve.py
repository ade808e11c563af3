"""``parlour serve``: the app on uvicorn, on the embedded defaults (LMDB in a directory, the
scripted model unless a real one is named), with a token made on first run.

``--agent module:function`` serves the application's agent (the function returns an
``Agent``) instead of the chat agent on ``--model``.

``parlour serve --cluster NAME`` runs the same app over a Ray cluster of agent shards (the
``cluster`` extra): turns run on the shards, the inspector reads the shared PostgreSQL store.

SIGTERM (or Ctrl-C) stops accepting, cancels running turns at their next boundary (after
its save), ends the event streams, waits for the turns, and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import starlette.applications  # noqa: F401  (the serve extra: refused before anything is made)
import uvicorn
from loguru import logger

from parlour.runtime import Depth, OutputSize
from parlour.runtime.errors import ParlourError
from parlour.stores import LmdbStore, MemorySessionCache

from .._service import ConversationService
from ..agent._agent import Agent
from ..tuning import host_collector
from ._chat import ModelChoice, model_client
from ._cluster import ray_init
from ._guard import AdminError, say
from ._workload import get_current_time
from .serve import asgi_app, cluster_asgi_app
from .serve._host import ChatHost
from .serve._tokens import TokenBook

__all__ = [
    "ClusterConfig",
    "load_agent",
    "run_serve",
    "run_serve_cluster",
    "serve_agent",
    "serve_forever",
    "tokens_for",
]

OBJECTIVE = "You are a helpful assistant. Answer briefly; use tools when they help."
GRACE_S = 30.0


def serve_agent(model: ModelChoice) -> Agent:
    """The agent ``parlour serve`` hosts: ``model`` with a clock tool.

    Raises:
        AdminError: ``model`` is not in the catalog, or lacks its key or SDK.
    """
    return Agent(
        model_client(model),
        tools=[get_current_time],
        objective=OBJECTIVE,
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )


def load_agent(factory: str) -> Agent:
    """The agent ``factory`` (``"package.module:function"``, importable from here) returns.

    Raises:
        AdminError: it is not of that form, cannot be imported, fails, or returns no Agent.
    """
    from ..cluster._shard import load_factory  # imports no Ray

    try:
        agent = load_factory(factory)()
    except ImportError as exc:
        raise AdminError(f"--agent {factory}: cannot import it ({exc}).") from None
    except ValueError as exc:
        raise AdminError(f"--agent {factory}: {exc}") from None
    except Exception as exc:
        why = ": ".join([type(exc).__name__, *str(exc).strip().splitlines()[:1]])
        raise AdminError(f"--agent {factory} failed: {why}") from None
    if not isinstance(agent, Agent):
        raise AdminError(f"--agent {factory} returned {type(agent).__name__}, not an Agent.")
    return agent


def tokens_for(token_file: Path, user: str, new_token: bool) -> tuple[TokenBook, str | None]:
    """The file's tokens beside ``PARLOUR_TOKENS``'s, and a token made now (for ``user``,
    saved to the file) when there were none or ``new_token`` asks for one.

    Raises:
        ValueError: the file or the variable is malformed.
    """
    stored = TokenBook.load(token_file)
    from_env = TokenBook.from_env()
    made = None
    if new_token or not (len(stored) or len(from_env)):
        made = stored.issue(user)
        stored.save(token_file)
    return stored.merged(from_env), made


def run_serve(
    data_dir: Path,
    model: ModelChoice,
    host: str,
    port: int,
    user: str = "me",
    new_token: bool = False,
    factory: str | None = None,
) -> int:
    """Serve the agent ``factory`` makes (else the chat agent on ``model``) until SIGTERM or
    Ctrl-C; returns the exit status.

    Raises:
        AdminError: a bad model, agent factory, address or token file; nothing is created
            in ``data_dir`` before the address is bound.
    """
    agent = serve_agent(model) if factory is None else load_agent(factory)
    listener = _listen(host, port)
    try:
        tokens, made = tokens_for(data_dir / "tokens.json", user, new_token)
    except ValueError as exc:
        listener.close()
        raise AdminError(str(exc)) from None
    with (
        listener,
        LmdbStore(data_dir) as store,
        ConversationService(store, MemorySessionCache()) as service,
    ):
        app = asgi_app(agent, service, tokens=tokens)
        url = f"http://{host}:{listener.getsockname()[1]}/"
        print(_banner(url, made, data_dir, agent.client.model_id), flush=True)
        _log_info()
        serve_forever(app, listener)
    return 0


@dataclass(frozen=True)
class ClusterConfig:
    """``parlour serve --cluster``'s cluster: its name, shard count, agent factory
    (``module:function``), the shared store's PostgreSQL connection string, the Ray
    address and namespace."""

    name: str
    shards: int
    agent: str
    store: str
    address: str = "auto"
    namespace: str = "parlour"


def run_serve_cluster(
    config: ClusterConfig,
    data_dir: Path,
    host: str,
    port: int,
    user: str = "me",
    new_token: bool = False,
) -> int:
    """Serve ``config``'s cluster until SIGTERM or Ctrl-C (its shards are made or found by
    name; they outlive this process). Tokens are kept in ``data_dir``. Returns the exit
    status, after one line on stderr when it is not 0: 1 on a bad token file, shard count
    or agent factory, or shards that did not start, 2 without Ray installed.

    Raises:
        AdminError: no Ray cluster runs at the address, or the address cannot be bound.
    """
    try:
        import ray  # noqa: F401  (installed: the cluster extra)

        from parlour.stores import PostgresStore

        from ..cluster import AgentCluster
    except ImportError:
        say("serve", "serving a cluster needs Ray: pip install -e '.[cluster]'")
        return 2
    try:
        ray_init(config.address, config.namespace)  # before anything is written
        tokens, made = tokens_for(data_dir / "tokens.json", user, new_token)
        cluster = AgentCluster(
            config.name,
            shards=config.shards,
            agent=config.agent,
            store=config.store,
            namespace=config.namespace,
        )
        store = PostgresStore(config.store)
    except (ValueError, ImportError) as exc:
        say("serve", str(exc))
        return 1
    with store:
        try:
            app = cluster_asgi_app(cluster, store, tokens=tokens)
        except ParlourError as exc:  # the shards could not start
            say("serve", f"The cluster's shards did not start: {_why(exc)}")
            return 1
        listener = _listen(host, port)
        url = f"http://{host}:{listener.getsockname()[1]}/"
        where = f"cluster {config.name} ({config.shards} shards)"
        print(_banner(url, made, where, app.state.ctx.turns.spec.id), flush=True)
        _log_info()
        serve_forever(app, listener)
    return 0


def _log_info() -> None:
    """parlour's records from INFO up on stderr, once serving: a server's log (before, a
    refusal is its one line alone)."""
    logger.remove()
    logger.add(sys.stderr, level="INFO")


def _why(exc: BaseException) -> str:
    """The last line of what the shard raised (Ray's report of a failed shard constructor
    ends with it), or ``exc`` itself."""
    lines = str(exc.__cause__ or exc).strip().splitlines()
    return lines[-1].strip() if lines else type(exc).__name__


def _banner(url: str, made: str | None, where: Path | str, model: str) -> str:
    head = f"parlour serve: {model}, conversations in {where}"
    if made is not None:
        return f"{head}\nopen {url}#token={made}\n(the token is shown once; keep the URL)"
    return f"{head}\nopen {url} and sign in with your token (new one: --new-token)"


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port``.

    Raises:
        AdminError: the address cannot be bound (in use, not this machine's, a privileged
            port).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(2048)  # connections queue from now on, before uvicorn starts
    except OSError as exc:
        listener.close()
        why = exc.strerror or str(exc)
        raise AdminError(
            f"cannot listen on {host}:{port}: {why} (choose another --port or --host)."
        ) from None
    return listener


def serve_forever(app: Any, listener: socket.socket, grace_s: float = GRACE_S) -> None:
    """Run ``app`` on uvicorn over ``listener`` until SIGTERM or SIGINT, under
    ``tuning.host_collector`` (the thresholds are logged)."""
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=int(grace_s),
    )
    with host_collector() as thresholds:
        logger.info("The garbage collector's thresholds: {} (host_collector)", thresholds)
        _Server(config, app.state.host).run(sockets=[listener])


class _Server(uvicorn.Server):
    """uvicorn's server, telling the host first when a signal asks it to stop."""

    def __init__(self, config: Any, host: ChatHost) -> None:
        super().__init__(config)
        self._host = host
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's, except that a signal it has handled gracefully is not raised again
        on the way out: a graceful stop exits with status 0."""
        with super().capture_signals():
            yield
            captured = getattr(self, "_captured_signals", None)
            if isinstance(captured, list):
                captured.clear()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._host.begin_shutdown)
        super().handle_exit(sig, frame)
