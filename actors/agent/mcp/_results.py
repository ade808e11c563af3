"""An MCP server's tool as an agent's tool (``MCPTool``), and a tool's result as the text of
a tool result (``result_text``).

A tool result holds text (``ToolResultBlock.content``), so each part of an MCP result
becomes text, in order: text as it is; structured content as its JSON when the result has no
other part (the spec asks a server to send it as text too, and the SDK's servers do); an
embedded text resource as
its URI and its text; an image, audio or binary resource, which no provider takes inside a
tool result, as a line naming its kind, type and size; a resource link as its URI and name.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import msgspec
from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
)

from parlour.runtime import FunctionTool, ToolContext
from parlour.runtime.blocks import ToolDefinitionBlock

__all__ = ["Caller", "MCPTool", "result_text", "tool_name"]

_NOT_A_NAME = re.compile(r"[^a-zA-Z0-9_-]")


class Caller(Protocol):
    """What calls a tool on its server (``MCPServer``)."""

    async def call(
        self, name: str, arguments: dict[str, Any], context: ToolContext[Any] | None
    ) -> str: ...


class _NoFields(msgspec.Struct):
    """The input type a ``FunctionTool`` needs; an MCP tool's schema is the server's own."""


def tool_name(prefix: str, name: str) -> str:
    """The name the model sees: ``prefix`` and the server's name, cut to what every provider
    takes (letters, digits, ``_`` and ``-``, at most 64)."""
    return _NOT_A_NAME.sub("_", prefix + name)[:64]


class MCPTool(FunctionTool):
    """One tool of an MCP server, declared with the server's description and input schema,
    and called on the server with the call's ``ToolContext`` (its cancellation ends the
    call). ``rerun_on_recovery`` follows the server's ``idempotentHint``."""

    def __init__(self, caller: Caller, tool: Tool, prefix: str = "") -> None:
        name = tool_name(prefix, tool.name)
        description = tool.description or tool.title or tool.name
        idempotent = tool.annotations is not None and bool(tool.annotations.idempotent_hint)
        super().__init__(
            self.acall,
            name,
            description,
            _NoFields,
            context_param="context",
            rerun_on_recovery=idempotent,
        )
        self.remote_name = tool.name
        self._caller = caller
        self._definition = ToolDefinitionBlock(
            name=name,
            description=description,
            schema_json=msgspec.json.encode(tool.input_schema).decode(),
        )

    def call(self, input_json: str | bytes, context: ToolContext[Any] | None = None) -> Any:
        """The call's coroutine (the host awaits it, or runs it to completion).

        Raises:
            msgspec.DecodeError: the arguments are not JSON.
            msgspec.ValidationError: the arguments are not a JSON object.
        """
        arguments = msgspec.json.decode(input_json, type=dict[str, Any])
        return self.acall(arguments, context)

    async def acall(self, arguments: dict[str, Any], context: ToolContext[Any] | None) -> str:
        return await self._caller.call(self.remote_name, arguments, context)


def result_text(result: CallToolResult) -> str:
    """The text of an MCP tool's result (see the module docstring)."""
    if not result.content and result.structured_content is not None:
        return msgspec.json.encode(result.structured_content).decode()
    return "\n".join(_part_text(part) for part in result.content)


def _part_text(part: Any) -> str:
    match part:
        case TextContent(text=text):
            return text
        case ImageContent(mime_type=mime, data=data) | AudioContent(mime_type=mime, data=data):
            return f"[{part.type} {mime}, {_size(data)}: not shown]"
        case EmbeddedResource(resource=TextResourceContents(uri=uri, text=text)):
            return f"[resource {uri}]\n{text}"
        case EmbeddedResource(resource=BlobResourceContents(uri=uri, blob=blob) as blob_part):
            mime = blob_part.mime_type or "application/octet-stream"
            return f"[resource {uri} {mime}, {_size(blob)}: not shown]"
        case ResourceLink(uri=uri, name=name):
            return f"[resource link {uri}: {name}]"
    return f"[{type(part).__name__}: not shown]"


def _size(base64: str) -> str:
    return f"{len(base64) * 3 // 4} bytes"
