"""A real MCP server for the MCP tests, written with the SDK's own server API: run as a
script it serves stdio (``python mcp_server.py [--garbage | --hang | --exit]``); imported,
``http_app`` is the same server as a streamable-HTTP ASGI app.

Its tools: ``add`` (structured content), ``echo``, ``fail`` (an error result), ``picture``
(text and an image), ``document`` (an embedded text resource), ``weather`` (structured
content alone), ``slow`` (sleeps, writing a
``slow-started`` marker first), ``grow`` (adds a tool and tells the client its list
changed). With ``MCP_TEST_DIR`` set, the server writes its pid to ``pid`` there at start.

``--garbage`` writes lines that are no JSON-RPC to stdout and never answers; ``--hang``
never reads its stdin; ``--exit`` exits at once with status 3.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQABpfZFQAAAAABJRU5E"
    "rkJggg=="
)


def _marks() -> Path | None:
    where = os.environ.get("MCP_TEST_DIR")
    return Path(where) if where else None


def build() -> MCPServer:
    server = MCPServer("parlour-test", log_level="ERROR")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first.
            b: The second.
        """
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @server.tool()
    def fail(why: str) -> str:
        """Always fails, saying why."""
        raise ToolError(f"refused: {why}")

    @server.tool(structured_output=False)
    def picture() -> list[Any]:
        """A one-pixel picture."""
        return [
            TextContent(type="text", text="a pixel"),
            ImageContent(type="image", data=PIXEL, mime_type="image/png"),
        ]

    @server.tool(structured_output=False)
    def document() -> list[Any]:
        """An embedded document."""
        contents = TextResourceContents(uri="file:///notes.txt", text="the notes")
        return [EmbeddedResource(type="resource", resource=contents)]

    @server.tool()
    def weather(city: str) -> CallToolResult:
        """The weather, as structured content only."""
        return CallToolResult(content=[], structured_content={"city": city, "sky": "clear"})

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        marks = _marks()
        if marks is not None:
            (marks / "slow-started").write_text(str(os.getpid()))
        await asyncio.sleep(seconds)
        return "woke"

    @server.tool()
    async def grow(name: str, ctx: Context) -> str:
        """Add a tool named ``name`` that doubles a number."""

        def double(x: int) -> int:
            return 2 * x

        server.add_tool(double, name=name, description="Double x.")
        await ctx.notify_tools_changed()  # a 2026 session listens for it
        with contextlib.suppress(Exception):  # a handshake-era session gets a notification
            await ctx.request_context.session.send_tool_list_changed()
        return "grown"

    return server


def http_app(token: str | None = None) -> Any:
    """The server as a streamable-HTTP ASGI app; with ``token``, a request without the header
    ``Authorization: Bearer <token>`` is refused with 401."""
    app = build().streamable_http_app()
    if token is None:
        return app

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"no"})
                return
        await app(scope, receive, send)

    return guarded


def main(argv: list[str]) -> None:
    marks = _marks()
    if marks is not None:
        (marks / "pid").write_text(str(os.getpid()))
    if "--exit" in argv:
        sys.exit(3)
    if "--garbage" in argv:
        print("hello, this is not JSON-RPC", flush=True)
        print('{"half": ', flush=True)
        time.sleep(3600)
    if "--hang" in argv:
        time.sleep(3600)
    build().run()


if __name__ == "__main__":
    main(sys.argv[1:])
