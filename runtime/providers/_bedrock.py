"""The Bedrock Converse dialect through boto3: system blocks, tools as text where they sit,
tool calls parsed from the answer's envelope under runtime-minted ids, ``maxTokens``.

``build_converse_request`` is the request builder (no credentials, no SDK needed).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

from parlour.runtime._catalog import ModelCatalog, ModelSpec
from parlour.runtime._context import render_tool_text
from parlour.runtime._handlers import GenericContentFormatter
from parlour.runtime._llm import LLMClient, WireRequest
from parlour.runtime._prepared import Turn
from parlour.runtime._response import LLMResponse, StopReason, Usage
from parlour.runtime._roles import Depth
from parlour.runtime.blocks import (
    ContentBlock,
    FileBlock,
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from parlour.runtime.providers._errors import map_boto_errors, require_sdk
from parlour.runtime.providers._shared import OutputDeclaration, block_text, spec_of

_STOP = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "guardrail_intervened": StopReason.CONTENT_FILTERED,
    "content_filtered": StopReason.CONTENT_FILTERED,
}
_ARGUMENT_KEYS = ("arguments", "input", "parameters")


# -- encoding ------------------------------------------------------------------------------------


def _format_of(mime: str) -> str:
    return mime.rsplit("/", 1)[-1].lower().replace("jpg", "jpeg")


def encode_block(block: ContentBlock) -> dict[str, Any] | None:
    """One block as a Converse content block; None for what the text dialect leaves out.

    Without a native tool config, Converse refuses toolUse/toolResult blocks, so tool
    traffic travels as text: a definition by its ``render_tool_text`` (the default encoder),
    a result as a labelled text. A call is already in the assistant's answer text (the
    envelope it was parsed from), so its block is not sent twice.
    """
    match block:
        case ToolDefinitionBlock():
            return {"text": render_tool_text(block)}
        case ToolUseBlock() | ThinkingBlock() | RedactedThinkingBlock():
            return None
        case ToolResultBlock(tool_use_id=call_id, content=content, is_error=is_error):
            label = "Tool error" if is_error else "Tool result"
            return {"text": f"{label} for {call_id}: {content}"}
        case ImageBlock(data=data, mime_type=mime):
            return {
                "image": {"format": _format_of(mime), "source": {"bytes": base64.b64decode(data)}}
            }
        case FileBlock(data=data, mime_type=mime, filename=filename):
            document = {
                "format": _format_of(mime),
                "name": filename or "document",
                "source": {"bytes": base64.b64decode(data)},
            }
            return {"document": document}
        case _:
            return {"text": block_text(block)}


def _encode_turn(turn: Turn) -> dict[str, Any] | None:
    content = [c for c in (encode_block(b) for b in turn.blocks) if c is not None]
    if not content:
        return None
    return {"role": turn.role.value, "content": content}


def build_converse_request(request: WireRequest) -> dict[str, Any]:
    """The ``converse`` keyword arguments for ``request`` (B17, B35, B36, B162).

    The objective, tool palette included, is the system blocks; turns are never merged.
    """
    prepared = request.prepared
    messages = [m for m in (_encode_turn(t) for t in prepared.turns) if m is not None]
    params: dict[str, Any] = {
        "modelId": request.spec.id,
        "messages": messages,
        "inferenceConfig": {"maxTokens": request.max_tokens},
    }
    system = [{"text": block_text(skill)} for skill in prepared.skills]
    if prepared.has_system_text():
        system.append({"text": prepared.system_text})
    if system:
        params["system"] = system
    return params


# -- tool calls out of the answer text (B18) ---------------------------------------------------


def _envelopes(text: str) -> Iterator[dict[str, Any]]:
    decoder = json.JSONDecoder()
    at = text.find("{")
    while at != -1:
        try:
            value, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at = text.find("{", at + 1)
            continue
        if isinstance(value, dict):
            yield value
        at = text.find("{", end)


def parse_tool_calls(text: str) -> list[ToolUseBlock]:
    """The calls in the first JSON envelope of ``text`` holding a ``tool_calls`` list.

    A call without an id gets ``name#position`` (1-based, its place in the turn); a call
    that has an id keeps it. Entries without a name are skipped.
    """
    for envelope in _envelopes(text):
        calls = envelope.get("tool_calls")
        if isinstance(calls, list):
            return _to_blocks(calls)
    return []


def _to_blocks(calls: list[Any]) -> list[ToolUseBlock]:
    blocks: list[ToolUseBlock] = []
    for position, call in enumerate(calls, start=1):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            continue
        arguments: Any = next((call[k] for k in _ARGUMENT_KEYS if k in call), {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        call_id = call.get("id") or f"{call['name']}#{position}"
        blocks.append(ToolUseBlock(id=str(call_id), name=call["name"], input_json=arguments))
    return blocks


# -- decoding ------------------------------------------------------------------------------------


def _usage(usage: dict[str, Any] | None) -> Usage:
    if not usage:
        return Usage()
    return Usage.additive(
        usage.get("inputTokens", 0),
        usage.get("cacheWriteInputTokens"),
        usage.get("cacheReadInputTokens"),
        usage.get("outputTokens", 0),
    )


def _answer(model_id: str, text: str, stop: str | None, usage: Any) -> LLMResponse:
    blocks: list[ContentBlock] = [TextBlock(text=text)] if text else []
    calls = parse_tool_calls(text)
    blocks.extend(calls)
    stop_reason = _STOP.get(stop or "", StopReason.UNKNOWN)
    if calls and stop_reason is StopReason.END_TURN:
        stop_reason = StopReason.TOOL_USE
    return LLMResponse(
        model_id=model_id, blocks=blocks, stop_reason=stop_reason, usage=_usage(usage)
    )


def decode_converse(model_id: str, response: dict[str, Any]) -> LLMResponse:
    """A ``converse`` response as parlour's response, tool calls parsed from its text."""
    content = response.get("output", {}).get("message", {}).get("content", [])
    text = "".join(part.get("text", "") for part in content)
    return _answer(model_id, text, response.get("stopReason"), response.get("usage"))


# -- the client ----------------------------------------------------------------------------------


class BedrockClient(LLMClient):
    """Bedrock's Converse API through boto3, in the text tool dialect.

    Args:
        model: a catalog id or a ``ModelSpec``.
        boto_client: a ready ``bedrock-runtime`` client (tests pass a stubbed one); else one
            is made from the environment's AWS credentials and ``region_name``, with
            botocore's standard retry mode (backoff) for throttling and overload.

    Raises:
        ImportError: boto3 is missing (``pip install 'parlour[bedrock]'``).
    """

    formatter = GenericContentFormatter()

    def __init__(
        self,
        model: str | ModelSpec = "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        *,
        boto_client: Any = None,
        region_name: str | None = None,
        max_attempts: int = 3,
        catalog: ModelCatalog | None = None,
        depth: Depth | None = None,
        output_declaration: OutputDeclaration | None = None,
    ) -> None:
        super().__init__(
            spec_of(model, catalog), depth=depth, output_declaration=output_declaration
        )
        if boto_client is None:
            boto3 = require_sdk("boto3", "bedrock")
            config = require_sdk("botocore.config", "bedrock").Config(
                retries={"mode": "standard", "max_attempts": max_attempts}
            )
            boto_client = boto3.client("bedrock-runtime", region_name=region_name, config=config)
        self.boto_client = boto_client

    def _send(self, request: WireRequest) -> LLMResponse:
        params = build_converse_request(request)
        with map_boto_errors(request.spec.id):
            return decode_converse(request.spec.id, self.boto_client.converse(**params))

    def _stream(self, request: WireRequest) -> Iterator[str | LLMResponse]:
        params = build_converse_request(request)
        text: list[str] = []
        stop: str | None = None
        usage: Any = None
        with map_boto_errors(request.spec.id):
            for event in self.boto_client.converse_stream(**params)["stream"]:
                delta = event.get("contentBlockDelta", {}).get("delta", {}).get("text")
                if delta:
                    text.append(delta)
                    yield delta
                stop = event.get("messageStop", {}).get("stopReason", stop)
                usage = event.get("metadata", {}).get("usage", usage)
        yield _answer(request.spec.id, "".join(text), stop, usage)
