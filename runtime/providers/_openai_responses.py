"""The OpenAI Responses dialect: the objective as ``instructions``, the conversation as input
items, native function tools, and reasoning items carried across turns.

parlour owns the conversation, so every call sends it whole: ``store`` is false, no
``previous_response_id`` is sent, and a reasoning model is asked for its reasoning items'
encrypted content (``include``), which comes back as a ``ReasoningBlock`` and is sent back
unchanged on the next call, in its place among the turn's items.

``build_responses_body`` is the request builder (no credentials, no SDK needed); the error
map is Chat Completions' (``ERROR_MAP``): a stream's ``error`` event and a
``response.failed`` event are raised as the SDK's ``APIError`` and judged by their code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .._prepared import Turn
from .._roles import TurnRole
from ..blocks import (
    ContentBlock,
    ReasoningBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ..errors import RetryableLLMError
from ..models._spec import ThinkingMode
from ._openai import EFFORT, OpenAIClient, user_part
from ._response import LLMResponse, StopReason, Usage
from ._shared import block_text, is_blank, system_texts, tool_schema
from ._template import TextCallback, WireRequest

ENCRYPTED_REASONING = "reasoning.encrypted_content"
_SKIPPED = (ToolDefinitionBlock, ThinkingBlock, RedactedThinkingBlock)  # not OpenAI's to read
_INCOMPLETE = {
    "max_output_tokens": StopReason.MAX_TOKENS,
    "content_filter": StopReason.CONTENT_FILTERED,
}


# -- encoding ------------------------------------------------------------------------------------


def _user_part(block: ContentBlock) -> dict[str, Any]:
    """The Chat Completions part of ``block`` in this endpoint's names."""
    part = user_part(block)
    match part["type"]:
        case "image_url":
            return {"type": "input_image", "image_url": part["image_url"]["url"], "detail": "auto"}
        case "file":
            return {"type": "input_file", **part["file"]}
        case _:
            return {"type": "input_text", "text": part["text"]}


def _user_items(turn: Turn) -> list[dict[str, Any]]:
    """Tool results first, each a ``function_call_output``; the rest as one user message."""
    items: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in turn.blocks:
        if isinstance(block, ToolResultBlock):
            output = f"Error: {block.content}" if block.is_error else block.content
            items.append(
                {"type": "function_call_output", "call_id": block.tool_use_id, "output": output}
            )
        elif not isinstance(block, (*_SKIPPED, ReasoningBlock)):
            parts.append(_user_part(block))
    if parts:
        items.append({"role": "user", "content": parts})
    return items


def _assistant_items(turn: Turn) -> list[dict[str, Any]]:
    """The turn's blocks as output items in their order: a reasoning item as it came, the
    text between two other items as one assistant message, each call a ``function_call``.
    The item right after a reasoning item carries the id it had then: the API pairs the two
    by it."""
    items: list[dict[str, Any]] = []
    text: list[str] = []
    paired: str | None = None  # the id owed to the next item, after a reasoning item

    def said() -> None:
        nonlocal paired
        joined = "".join(text)
        if is_blank(joined):
            paired = None if text else paired  # the item it was owed to is not sent
            text.clear()
            return
        text.clear()
        items.append(_message(joined, paired))
        paired = None

    for block in turn.blocks:
        if isinstance(block, ReasoningBlock):
            said()
            items.append(json.loads(block.item_json))
            paired = block.followed_by
        elif isinstance(block, ToolUseBlock):
            said()
            items.append(_function_call(block, paired))
            paired = None
        elif not isinstance(block, (*_SKIPPED, ToolResultBlock)):
            text.append(block_text(block))
    said()
    while items and items[-1].get("type") == "reasoning":
        items.pop()  # a reasoning item the answer ended on: the API refuses one followed by none
    return items


def _message(text: str, item_id: str | None) -> dict[str, Any]:
    """Assistant text; with ``item_id``, as the output message it was (the API's form)."""
    if item_id is None:
        return {"role": "assistant", "content": text}
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": content,
    }


def _function_call(block: ToolUseBlock, item_id: str | None) -> dict[str, Any]:
    call = {
        "type": "function_call",
        "call_id": block.id,
        "name": block.name,
        "arguments": block.input_json,  # verbatim
    }
    return call if item_id is None else {**call, "id": item_id}


def build_responses_body(request: WireRequest) -> dict[str, Any]:
    """The ``responses.create`` body for ``request``.

    The objective (after the admitted skills) is ``instructions`` and nowhere else; the
    turns are ``input``; nothing is stored at OpenAI and no earlier response is referred to.
    """
    prepared = request.prepared
    items: list[dict[str, Any]] = []
    for turn in prepared.turns:
        items.extend(_user_items(turn) if turn.role is TurnRole.USER else _assistant_items(turn))
    body: dict[str, Any] = {
        "model": request.spec.id,
        "input": items,
        "max_output_tokens": request.max_tokens,
        "store": False,
    }
    if system := system_texts(prepared):
        body["instructions"] = "\n\n".join(system)
    tools = [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": tool_schema(t),
            "strict": False,  # parlour's schemas are not written for strict mode
        }
        for t in prepared.all_tool_definitions()
    ]
    if tools:
        body["tools"] = tools
    if request.spec.thinking_mode is ThinkingMode.REASONING_EFFORT:
        body["reasoning"] = {"effort": EFFORT[request.depth]}
        body["include"] = [ENCRYPTED_REASONING]
    return body


# -- decoding ------------------------------------------------------------------------------------


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    details = getattr(usage, "input_tokens_details", None)
    output = getattr(usage, "output_tokens_details", None)
    return Usage.subset(
        usage.input_tokens,
        getattr(details, "cache_write_tokens", None),
        getattr(details, "cached_tokens", None),
        usage.output_tokens,
        getattr(output, "reasoning_tokens", None),
    )


def _item_blocks(item: Any, after: Any, refusals: list[str]) -> list[ContentBlock]:
    """The blocks of one output item; ``after`` is the item that follows it, or None."""
    match item.type:
        case "reasoning":
            raw = item.to_dict(mode="json")  # the fields the server sent, as it sent them
            summary = "".join(part.text for part in item.summary or ())
            followed_by = getattr(after, "id", None) if after is not None else None
            return [
                ReasoningBlock(item_json=json.dumps(raw), summary=summary, followed_by=followed_by)
            ]
        case "function_call":
            return [ToolUseBlock(id=item.call_id, name=item.name, input_json=item.arguments)]
        case "message":
            refusals += [p.refusal for p in item.content if p.type == "refusal"]
            return [TextBlock(text=p.text) for p in item.content if p.type == "output_text"]
    return []  # a built-in tool's item: parlour declares none


def decode_response(response: Any) -> LLMResponse:
    """An SDK ``Response`` (completed or incomplete) as parlour's response."""
    blocks: list[ContentBlock] = []
    refusals: list[str] = []
    output = list(response.output)
    for item, after in zip(output, [*output[1:], None], strict=True):
        blocks.extend(_item_blocks(item, after, refusals))
    if refusals:
        stop = StopReason.CONTENT_FILTERED
    elif response.status == "incomplete":
        reason = getattr(response.incomplete_details, "reason", None)
        stop = _INCOMPLETE.get(reason or "", StopReason.UNKNOWN)
    elif any(isinstance(b, ToolUseBlock) for b in blocks):
        stop = StopReason.TOOL_USE
    else:
        stop = StopReason.END_TURN if response.status == "completed" else StopReason.UNKNOWN
    return LLMResponse(
        model_id=response.model,
        blocks=blocks,
        stop_reason=stop,
        usage=_usage(response.usage),
        refusal_explanation="\n".join(refusals) or None,
    )


class _Events:
    """Reads a stream's events: text deltas out, the final response kept, a failure raised
    as the SDK's ``APIError`` (on the stream's own request) for the error map to judge."""

    def __init__(self, sdk: Any, request: Any, model_id: str) -> None:
        self._sdk, self._request, self._model_id = sdk, request, model_id
        self.final: LLMResponse | None = None

    def feed(self, event: Any) -> str | None:
        kind = event.type
        if kind == "response.output_text.delta":
            return str(event.delta) or None
        if kind in ("response.completed", "response.incomplete"):
            self.final = decode_response(event.response)
        elif kind == "response.failed":
            self.fail(event.response.error)
        elif kind == "error":
            self.fail(event)
        return None

    def fail(self, error: Any) -> None:
        """Raise ``error`` (a response's ``error`` or an ``error`` event) as an ``APIError``."""
        text = getattr(error, "message", None) or "The response failed"
        body = {"code": getattr(error, "code", None), "message": text}
        raise self._sdk.APIError(text, self._request, body=body)

    def response(self) -> LLMResponse:
        """The final response.

        Raises:
            RetryableLLMError: the stream ended before its terminal event (a dropped link).
        """
        if self.final is None:
            raise RetryableLLMError(
                f"OpenAI's stream for model {self._model_id} ended before the response did."
            )
        return self.final


# -- the client ----------------------------------------------------------------------------------


_STREAM = {"stream": True}


def _answer() -> Any:
    """The SDK's type of an answer (the SDK is imported by then)."""
    from openai.types.responses import Response

    return Response


def _events(sdk: Any) -> Any:
    """The SDK's stream of typed events for ``sdk`` (blocking or async), as the SDK's own
    ``responses.create(stream=True)`` reads it."""
    import openai
    from openai.types.responses import ResponseStreamEvent

    stream = openai.AsyncStream if isinstance(sdk, openai.AsyncOpenAI) else openai.Stream
    return stream[ResponseStreamEvent]


class OpenAIResponsesClient(OpenAIClient):
    """OpenAI's Responses API through the official ``openai`` SDK.

    Constructed as ``OpenAIClient`` (the same key, SDK client and retries); only the wire
    differs. Every call sends the whole conversation with ``store`` false, so OpenAI keeps
    nothing between calls and a conversation moves freely between this dialect, Chat
    Completions and the other providers.

    Raises:
        ImportError: the SDK is missing (``pip install -e '.[openai]'``).
        UncorrectableLLMError: no API key is configured.
    """

    def encode(self, request: WireRequest) -> dict[str, Any]:
        return build_responses_body(request)

    endpoint = "/responses"

    def _call(self, body: dict[str, Any]) -> LLMResponse:
        sdk = self.sdk_client
        posted = self._posted(sdk, body, "true")
        return self._checked(sdk.post(self.endpoint, cast_to=_answer(), **posted))

    def _checked(self, raw: Any) -> LLMResponse:
        """A non-streamed answer; a ``failed`` one is raised as its stream's would be."""
        response = raw.parse()
        events = _Events(self._sdk, raw.http_request, response.model)
        if response.status == "failed":
            events.fail(response.error)
        return decode_response(response)

    async def _acall(self, body: dict[str, Any], on_text: TextCallback | None) -> LLMResponse:
        sdk = self.async_sdk_client
        if on_text is None:
            posted = self._posted(sdk, body, "true")
            return self._checked(await sdk.post(self.endpoint, cast_to=_answer(), **posted))
        posted = self._posted(sdk, body | _STREAM)
        stream = await sdk.post(
            self.endpoint, cast_to=_answer(), stream=True, stream_cls=_events(sdk), **posted
        )
        events = _Events(self._sdk, stream.response.request, body["model"])
        async for event in stream:
            delta = events.feed(event)
            if delta:
                on_text(delta)
        return events.response()

    def _call_streaming(self, body: dict[str, Any]) -> Iterator[str | LLMResponse]:
        sdk = self.sdk_client
        posted = self._posted(sdk, body | _STREAM)
        stream = sdk.post(
            self.endpoint, cast_to=_answer(), stream=True, stream_cls=_events(sdk), **posted
        )
        events = _Events(self._sdk, stream.response.request, body["model"])
        for event in stream:
            delta = events.feed(event)
            if delta:
                yield delta
        yield events.response()
