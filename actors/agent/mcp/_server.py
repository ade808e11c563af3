"""MCP servers as an agent's toolsets: ``MCPServerStdio`` (a command run as a subprocess,
spoken to over its stdin and stdout) and ``MCPServerHTTP`` (a streamable-HTTP endpoint).

Each holds one MCP session at a time, opened on its own ``LoopThread`` by an owner task that
enters the SDK's ``Client`` and leaves it when told (an anyio context must be left by the
task that entered it). The session opens when the first turn lists the tools, and again
after it was lost: a call that finds the connection closed (the server died) gives the
model an error result, logs one line, and marks the list changed, so the next turn starts
the server again and lists its tools anew. The server's list-changed notice (a
notification on a handshake-era session, a ``subscriptions/listen`` event on a 2026 one)
marks the list changed too. ``close`` ends the session (a stdio server's process exits);
one left open is closed when the interpreter exits.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import shlex
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx2
from loguru import logger
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, ToolListChangedNotification
from pydantic import ValidationError

from parlour.runtime import FunctionTool, ToolContext
from parlour.runtime.errors import ParlourError

from .._tools import ToolFailed
from ._loop import LoopThread
from ._results import MCPTool, result_text

__all__ = ["MCPServer", "MCPServerError", "MCPServerHTTP", "MCPServerStdio"]

_MAX_PAGES = 100  # a server whose listing never ends cannot hang a turn
_OPEN: weakref.WeakSet[MCPServer] = weakref.WeakSet()


class MCPServerError(ParlourError):
    """An MCP server that could not be started, reached, or asked for its tools."""


class _Session:
    """One open session: its client, and the owner task that leaves it when ``stop`` is set."""

    def __init__(self, client: Client, owner: asyncio.Task[None], stop: asyncio.Event) -> None:
        self.client, self.owner, self.stop = client, owner, stop
        self.lost = False

    async def end(self) -> None:
        self.stop.set()
        await asyncio.wait([self.owner])


class MCPServer:
    """What both kinds share (see the module docstring); build one of the two."""

    def __init__(self, label: str, prefix: str, start_timeout_s: float) -> None:
        if start_timeout_s <= 0:
            raise ValueError(f"start_timeout_s must be positive, not {start_timeout_s}.")
        self.label, self.prefix, self.start_timeout_s = label, prefix, start_timeout_s
        self._changed = True
        self._loop = LoopThread("parlour-mcp")
        self._session: _Session | None = None  # read and written on the loop only
        self._opening: asyncio.Lock | None = None
        self._garbage: str | None = None  # the last thing the server sent that was no message
        _OPEN.add(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label!r})"

    @property
    def changed(self) -> bool:
        """True until the tools were listed, and again once the server said its list
        changed or its connection was lost."""
        return self._changed

    def tools(self) -> list[FunctionTool]:
        """The server's tools, its session opened first if none is; blocks this thread.

        Raises:
            MCPServerError: the server could not be started or reached, did not answer
                within ``start_timeout_s``, or failed to list its tools.
        """
        return self._loop.submit(self._list()).result()

    async def atools(self) -> list[FunctionTool]:
        """``tools`` on the running loop, never blocking it."""
        return await asyncio.wrap_future(self._loop.submit(self._list()))

    def close(self) -> None:
        """End the session (a stdio server's process exits) and the loop; idempotent. A
        later turn opens a new session."""
        self._changed = True
        if not self._loop.running:
            return
        with contextlib.suppress(RuntimeError):  # its loop was closed already
            self._loop.submit(self._end()).result()
        self._loop.stop()

    async def aclose(self) -> None:
        """``close`` on the running loop, never blocking it."""
        await asyncio.to_thread(self.close)

    async def call(
        self, name: str, arguments: dict[str, Any], context: ToolContext[Any] | None
    ) -> str:
        """Call the server's tool ``name`` (on the server's loop), until it answers or the
        call's context is cancelled (the call is then cancelled on the server).

        Raises:
            ToolFailed: the tool's error result, a protocol error, or the server's death.
        """
        running = asyncio.wrap_future(self._loop.submit(self._call(name, arguments)))
        if context is None:
            return await running
        watch: asyncio.Future[Any] = asyncio.ensure_future(context.cancelled.wait_async())
        try:
            await asyncio.wait([running, watch], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            running.cancel()
            raise
        finally:
            watch.cancel()
        if not running.done():
            running.cancel()
            raise ToolFailed(f"The call to {name} was given up: {context.cancelled.reason}.")
        return running.result()

    # -- on the server's loop -------------------------------------------------------------------

    def _client(self) -> Client:
        raise NotImplementedError

    async def _list(self) -> list[FunctionTool]:
        self._changed = False  # a notice from now on is for a later listing
        try:
            client = (await self._open()).client
            found, cursor = [], None
            for _ in range(_MAX_PAGES):
                page = await asyncio.wait_for(
                    client.list_tools(cursor=cursor), self.start_timeout_s
                )
                found += page.tools
                if (cursor := page.next_cursor) is None:
                    break
        except BaseException as exc:
            self._changed = True
            if isinstance(exc, MCPServerError | asyncio.CancelledError):
                raise
            why = (
                f" within {self.start_timeout_s:g}s"
                if isinstance(exc, TimeoutError)
                else f": {exc}"
            )
            raise MCPServerError(f"MCP server {self.label} did not list its tools{why}") from exc
        return [MCPTool(self, tool, self.prefix) for tool in found]

    async def _call(self, name: str, arguments: dict[str, Any]) -> str:
        session = await self._open()
        try:
            result = await session.client.call_tool(name, arguments)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise ToolFailed(f"{name} failed on MCP server {self.label}: {exc}") from exc
            self._lost(session)
            logger.error("MCP server {} ended during a call to {}: {}", self.label, name, exc)
            raise ToolFailed(
                f"MCP server {self.label} stopped during this call to {name}; the call may or "
                "may not have taken effect."
            ) from exc
        text = result_text(result)
        if result.is_error:
            raise ToolFailed(text or f"{name} failed on MCP server {self.label}.")
        return text

    async def _open(self) -> _Session:
        """The open session, or a new one when there is none or it was lost."""
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            session = self._session
            if session is not None and not session.lost:
                return session
            if session is not None:
                await session.end()
            self._session = session = await self._start()
            return session

    async def _start(self) -> _Session:
        """Open a session: the owner task enters the client, which starts the server (stdio)
        or reaches it (HTTP) and shakes hands, within ``start_timeout_s``."""
        self._garbage = None
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        owner = asyncio.create_task(self._own(ready, stop))
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), self.start_timeout_s)
        except TimeoutError:
            owner.cancel()
            await asyncio.wait([owner])
            raise MCPServerError(
                f"MCP server {self.label} did not answer within {self.start_timeout_s:g}s of "
                f"its start{self._what_it_sent()}."
            ) from None
        except Exception as exc:
            await asyncio.wait([owner])
            raise self._start_error(_leaf(exc)) from exc
        return _Session(client, owner, stop)

    async def _own(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Enter the client, hand it over, and leave it once ``stop`` is set."""
        try:
            async with self._client() as client:
                listener = asyncio.create_task(self._listen(client))
                ready.set_result(client)
                try:
                    await stop.wait()
                finally:
                    listener.cancel()
                    await asyncio.wait([listener])
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:  # the session ended badly after it worked: its calls have said so already
                logger.debug("MCP server {}'s session ended: {!r}", self.label, exc)

    async def _listen(self, client: Client) -> None:
        """On a 2026 session, mark the list changed at every list-changed event (an older
        session gets them as notifications: ``_on_message``)."""
        try:
            async with client.listen(tools_list_changed=True) as events:
                async for _ in events:
                    self._changed = True
        except ListenNotSupportedError:
            return
        except Exception as exc:  # the server does not serve it, or the session ended
            logger.debug("MCP server {} stopped telling list changes: {!r}", self.label, exc)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            self._changed = True
        elif isinstance(message, Exception):
            self._garbage = _garbage(message)
            logger.warning(
                "MCP server {} wrote what is no MCP message: {}", self.label, self._garbage
            )

    def _lost(self, session: _Session) -> None:
        session.lost = True
        self._changed = True

    async def _end(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.end()

    def _what_it_sent(self) -> str:
        return f" (it wrote what is no MCP message: {self._garbage})" if self._garbage else ""

    def _start_error(self, exc: BaseException) -> MCPServerError:
        if isinstance(exc, OSError) and not isinstance(exc, ConnectionError):
            return MCPServerError(f"MCP server {self.label} could not be started: {exc}")
        if isinstance(exc, httpx2.HTTPError):
            return MCPServerError(f"MCP server {self.label} could not be reached: {exc}")
        if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
            return MCPServerError(
                f"MCP server {self.label} ended before it answered{self._what_it_sent()}."
            )
        return MCPServerError(
            f"MCP server {self.label} could not be started: {type(exc).__name__}: {exc}"
            f"{self._what_it_sent()}"
        )


def _garbage(exc: Exception) -> str:
    """What the server wrote, when the SDK's parse error carries it (pydantic's does)."""
    if isinstance(exc, ValidationError) and exc.errors():
        found = exc.errors()[0].get("input")
        if isinstance(found, str):
            return repr(found)[:200]
    return str(exc).split("\n")[0][:200]


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups: what anyio's task groups wrap."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class MCPServerStdio(MCPServer):
    """An MCP server run as a subprocess, spoken to over its stdin and stdout.

    Args:
        command: the executable (a path, or a name found on ``PATH``).
        args: its arguments.
        env: variables set for it, over the SDK's few inherited ones (``HOME``, ``PATH``...).
        cwd: its working directory.
        prefix: put before each tool's name (to keep two servers' tools apart).
        start_timeout_s: the most its start, handshake and each listing may take.

    Raises:
        ValueError: ``command`` is empty or ``start_timeout_s`` is not positive.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        prefix: str = "",
        start_timeout_s: float = 10.0,
    ) -> None:
        if not command:
            raise ValueError("An MCP stdio server needs a command.")
        super().__init__(shlex.join([command, *args]), prefix, start_timeout_s)
        self.parameters = StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env else None, cwd=cwd
        )

    def _client(self) -> Client:
        return Client(self.parameters, cache=None, message_handler=self._on_message)


class MCPServerHTTP(MCPServer):
    """An MCP server at a streamable-HTTP endpoint.

    Args:
        url: the endpoint (``http://`` or ``https://``), e.g. ``http://127.0.0.1:8000/mcp``.
        headers: sent with every request (an ``Authorization`` header, say); never logged.
        prefix, start_timeout_s: as ``MCPServerStdio``'s.

    Raises:
        ValueError: ``url`` is no http(s) URL with a host, or ``start_timeout_s`` is not
            positive.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        prefix: str = "",
        start_timeout_s: float = 10.0,
    ) -> None:
        try:
            parsed = httpx2.URL(url)
        except Exception as exc:
            raise ValueError(f"{url!r} is no URL an MCP server can be reached at: {exc}") from exc
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"{url!r} is no http(s) URL an MCP server can be reached at.")
        super().__init__(url, prefix, start_timeout_s)
        self.url, self._headers = url, dict(headers or {})

    def _client(self) -> Client:
        return Client(self._transport(), cache=None, message_handler=self._on_message)

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's: a response may stream long
        async with (
            httpx2.AsyncClient(headers=self._headers, timeout=timeout) as http,
            streamable_http_client(self.url, http_client=http) as streams,
        ):
            yield streams


@atexit.register
def _close_open() -> None:
    """Close the servers left open, so no stdio server outlives the interpreter."""
    for server in list(_OPEN):
        with contextlib.suppress(Exception):
            server.close()
