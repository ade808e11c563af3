"""The Anthropic Messages dialect: system parameter, native tools, cache breakpoints, thinking.

``build_anthropic_params`` is the request builder (no credentials, no SDK needed); the
client sends its output through the official SDK, streaming or not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from parlour.runtime._context import ConversationContext
from parlour.runtime._counting import render_copy
from parlour.runtime._llm import WireRequest
from parlour.runtime._prepared import PreparedConversation, Turn
from parlour.runtime._response import LLMResponse, StopReason, Usage
from parlour.runtime._roles import Depth
from parlour.runtime.blocks import (
    ContentBlock,
    FileBlock,
    ImageBlock,
    RedactedThinkingBlock,
    SkillBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from parlour.runtime.providers._errors import map_http_errors
from parlour.runtime.providers._http import HttpSdkClient
from parlour.runtime.providers._shared import (
    block_text,
    tool_schema,
)

MAX_CACHE_BREAKPOINTS = 4
EPHEMERAL = {"type": "ephemeral"}

_STOP = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "refusal": StopReason.CONTENT_FILTERED,
}


# -- encoding ------------------------------------------------------------------------------------


def encode_block(block: ContentBlock) -> dict[str, Any] | None:
    """One block as an Anthropic content param; None for a tool definition (native tools
    travel in ``tools``, so the inline form is suppressed)."""
    match block:
        case ToolDefinitionBlock():
            return None
        case ToolUseBlock(id=call_id, name=name, input_json=arguments):
            return {"type": "tool_use", "id": call_id, "name": name, "input": json.loads(arguments)}
        case ThinkingBlock(text=text, signature=signature):
            return {"type": "thinking", "thinking": text, "signature": signature or ""}
        case RedactedThinkingBlock(data=data):
            return {"type": "redacted_thinking", "data": data}
        case _:
            return _encode_content(block)


def _encode_content(block: ContentBlock) -> dict[str, Any]:
    match block:
        case ImageBlock(data=data, mime_type=mime):
            return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}
        case FileBlock(data=data, mime_type=mime):
            source = {"type": "base64", "media_type": mime, "data": data}
            return {"type": "document", "source": source}
        case ToolResultBlock(tool_use_id=call_id, content=content, is_error=is_error):
            return {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": content,
                "is_error": is_error,
            }
        case _:
            return {"type": "text", "text": block_text(block)}


def _encode_turn(turn: Turn, anchor: bool) -> tuple[dict[str, Any], bool]:
    """The turn as a message param; with ``anchor``, its first text or skill block carries
    the cache marker. Returns the param and whether a breakpoint was spent."""
    content: list[dict[str, Any]] = []
    spent = False
    for block in turn.blocks:
        param = encode_block(block)
        if param is None:
            continue
        if anchor and not spent and isinstance(block, TextBlock | SkillBlock):
            param["cache_control"] = dict(EPHEMERAL)
            spent = True
        content.append(param)
    return {"role": turn.role.value, "content": content}, spent


def build_anthropic_params(request: WireRequest) -> dict[str, Any]:
    """The ``messages.create`` keyword arguments for ``request`` (B15, B33, B36, B80-B89).

    Breakpoints: at most 4. The system prefix takes the first, counted before the turns, on
    the last system block, when there is system text, the model caches and the conversation
    asks (``cache_system``). Then the first text or skill block of each turn flagged for
    caching takes one, while any remain; image, tool and thinking blocks never anchor.
    """
    prepared = request.prepared
    caching = request.spec.supports_prompt_caching
    system = _system_blocks(prepared)
    cache_system = bool(system) and caching and prepared.cache_system
    used = 1 if cache_system else 0
    messages: list[dict[str, Any]] = []
    for turn in prepared.turns:
        anchor = caching and turn.cache and used < MAX_CACHE_BREAKPOINTS
        param, spent = _encode_turn(turn, anchor)
        used += spent
        if param["content"]:
            messages.append(param)
    if cache_system:
        system[-1]["cache_control"] = dict(EPHEMERAL)
    params: dict[str, Any] = {
        "model": request.spec.id,
        "max_tokens": request.max_tokens,
        "messages": messages,
    }
    if system:
        params["system"] = system
    tools = [_encode_tool(t) for t in prepared.all_tool_definitions()]
    if tools:
        params["tools"] = tools
    if request.thinking_active and request.thinking_budget > 0:
        # Anthropic requires the thinking budget below max_tokens, which the reserve clamps.
        budget = min(request.thinking_budget, request.max_tokens - 1)
        params["thinking"] = {"type": "enabled", "budget_tokens": budget}
    return params


def _system_blocks(prepared: PreparedConversation) -> list[dict[str, Any]]:
    """Admitted skills first, then the objective (B89)."""
    blocks = [{"type": "text", "text": block_text(skill)} for skill in prepared.skills]
    if prepared.has_system_text():
        blocks.append({"type": "text", "text": prepared.system_text})
    return blocks


def _encode_tool(tool: ToolDefinitionBlock) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool_schema(tool)}


# -- decoding ------------------------------------------------------------------------------------


def decode_message(message: Any) -> LLMResponse:
    """An SDK ``Message`` as parlour's response."""
    blocks: list[ContentBlock] = []
    for part in message.content:
        if part.type == "text":
            blocks.append(TextBlock(text=part.text))
        elif part.type == "thinking":
            blocks.append(ThinkingBlock(text=part.thinking, signature=part.signature))
        elif part.type == "redacted_thinking":
            blocks.append(RedactedThinkingBlock(data=part.data))
        elif part.type == "tool_use":
            arguments = json.dumps(part.input)
            blocks.append(ToolUseBlock(id=part.id, name=part.name, input_json=arguments))
    usage = message.usage
    details = getattr(message, "stop_details", None)
    return LLMResponse(
        model_id=message.model,
        blocks=blocks,
        stop_reason=_STOP.get(message.stop_reason or "", StopReason.UNKNOWN),
        usage=Usage.additive(
            usage.input_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
            usage.output_tokens,
        ),
        refusal_category=getattr(details, "category", None),
        refusal_explanation=getattr(details, "explanation", None),
    )


# -- the client ----------------------------------------------------------------------------------


class AnthropicClient(HttpSdkClient):
    """Anthropic's Messages API through the official ``anthropic`` SDK.

    Args:
        model: a catalog id or a ``ModelSpec``.
        api_key: else ``ANTHROPIC_API_KEY``.
        sdk_client: a ready ``anthropic.Anthropic`` (tests pass one over a mock transport);
            when given, ``api_key`` and ``max_retries`` are not used.
        max_retries: the SDK's own retry with backoff for rate limits, overload, timeouts.

    Raises:
        ImportError: the SDK is missing (``pip install 'parlour[anthropic]'``).
        UncorrectableLLMError: no API key is configured.
    """

    module = "anthropic"
    provider = "Anthropic"
    env_var = "ANTHROPIC_API_KEY"
    default_model = "claude-sonnet-4-5"

    def _send(self, request: WireRequest) -> LLMResponse:
        # Always over the stream: the SDK refuses a non-streamed call whose max_tokens could
        # run past ten minutes (about 21k tokens), which any large rung or escalation reaches.
        params = build_anthropic_params(request)
        with (
            map_http_errors(self._sdk, "Anthropic", request.spec.id),
            self.sdk_client.messages.stream(**params) as stream,
        ):
            return decode_message(stream.get_final_message())

    def _stream(self, request: WireRequest) -> Iterator[str | LLMResponse]:
        params = build_anthropic_params(request)
        with (
            map_http_errors(self._sdk, "Anthropic", request.spec.id),
            self.sdk_client.messages.stream(**params) as stream,
        ):
            yield from stream.text_stream
            final = stream.get_final_message()
        yield decode_message(final)

    def count_tokens(self, conversation: ConversationContext) -> int:
        """The exact input tokens of ``conversation`` from Anthropic's count_tokens endpoint
        (the ``TokenCounter`` interface). The conversation itself is not frozen or bound.

        Raises:
            RetryableLLMError, UncorrectableLLMError: as ``respond``.
        """
        spec = conversation.get_model() if conversation.is_model_resolved() else self.spec
        request = WireRequest(
            prepared=render_copy(conversation, self.formatter),
            spec=spec,
            depth=Depth.IMMEDIATE,
            output_budget=1,
            max_tokens=1,
            thinking_active=False,
        )
        params = build_anthropic_params(request)
        del params["max_tokens"]
        with map_http_errors(self._sdk, "Anthropic", spec.id):
            return int(self.sdk_client.messages.count_tokens(**params).input_tokens)
