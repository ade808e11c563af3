"""``parlour serve``: the app on uvicorn, on the embedded defaults (LMDB in a directory, the
scripted model unless a real one is named), with a token made on first run.

SIGTERM (or Ctrl-C) stops accepting, cancels running turns at their next boundary (after
its save), ends the event streams, waits for the turns, and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from parlour.actors._agent import Agent
from parlour.actors._serve import asgi_app
from parlour.actors._serve._host import ChatHost
from parlour.actors._serve._tokens import TokenBook
from parlour.actors._service import ConversationService
from parlour.actors._workload import get_current_time
from parlour.runtime import Depth, OutputSize, client_for
from parlour.stores import LmdbStore, MemorySessionCache

__all__ = ["run_serve", "serve_agent", "serve_forever", "tokens_for"]

OBJECTIVE = "You are a helpful assistant. Answer briefly; use tools when they help."
GRACE_S = 30.0


def serve_agent(model: str) -> Agent:
    """The agent ``parlour serve`` hosts: ``model`` with a clock tool.

    Raises:
        ValueError: ``model`` is not in the catalog.
    """
    return Agent(
        client_for(model),
        tools=[get_current_time],
        objective=OBJECTIVE,
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )


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
    model: str,
    host: str,
    port: int,
    user: str = "me",
    new_token: bool = False,
) -> int:
    """Serve until SIGTERM or Ctrl-C; returns the exit status (1 on a bad model or token file)."""
    try:
        agent = serve_agent(model)
        tokens, made = tokens_for(data_dir / "tokens.json", user, new_token)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    with LmdbStore(data_dir) as store:
        service = ConversationService(store, MemorySessionCache())
        try:
            app = asgi_app(agent, service, tokens=tokens)
            listener = _listen(host, port)
            url = f"http://{host}:{listener.getsockname()[1]}/"
            print(_banner(url, made, data_dir, agent.client.model_id), flush=True)
            serve_forever(app, listener)
        finally:
            service.stop()
    return 0


def _banner(url: str, made: str | None, data_dir: Path, model: str) -> str:
    head = f"parlour serve: {model}, conversations in {data_dir}"
    if made is not None:
        return f"{head}\nopen {url}#token={made}\n(the token is shown once; keep the URL)"
    return f"{head}\nopen {url} and sign in with your token (new one: --new-token)"


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(2048)  # connections queue from now on, before uvicorn starts
    return listener


def serve_forever(app: Any, listener: socket.socket, grace_s: float = GRACE_S) -> None:
    """Run ``app`` on uvicorn over ``listener`` until SIGTERM or SIGINT."""
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=int(grace_s),
    )
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
