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

import itertools
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
from ..models._spec import ThinkingMode
from ._call_ids import wire_turns
from ._openai import EFFORT, OpenAIClient, user_part
from ._response import LLMResponse, StopReason, Usage
from ._shared import block_text, is_blank, system_texts, tool_schema
from ._sse import Events, cut_short, guarded, json_of, unreadable
from ._template import TextCallback, WireRequest
from ._user_media import user_media

ENCRYPTED_REASONING = "reasoning.encrypted_content"
_SKIPPED = (ToolDefinitionBlock, ThinkingBlock, RedactedThinkingBlock)  # not OpenAI's to read
_INCOMPLETE = {
    "max_output_tokens": StopReason.MAX_TOKENS,
    "content_filter": StopReason.CONTENT_FILTERED,
}


# -- encoding ------------------------------------------------------------------------------------


def _user_part(block: ContentBlock, conversation_id: str | None) -> dict[str, Any]:
    """The Chat Completions part of ``block`` in this endpoint's names."""
    part = user_part(block, conversation_id, any_file=True)
    match part["type"]:
        case "image_url":
            return {"type": "input_image", "image_url": part["image_url"]["url"], "detail": "auto"}
        case "file":
            return {"type": "input_file", **part["file"]}
        case _:
            return {"type": "input_text", "text": part["text"]}


def _user_items(turn: Turn, conversation_id: str | None) -> list[dict[str, Any]]:
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
            parts.append(_user_part(block, conversation_id))
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
    for turn in wire_turns(user_media(prepared.turns)):
        if turn.role is TurnRole.USER:
            items.extend(_user_items(turn, request.conversation_id))
        else:
            items.extend(_assistant_items(turn))
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
    if not isinstance(usage, dict):
        return Usage()
    details = usage.get("input_tokens_details") or {}
    output = usage.get("output_tokens_details") or {}
    return Usage.subset(
        usage["input_tokens"],
        details.get("cache_write_tokens"),
        details.get("cached_tokens"),
        usage["output_tokens"],
        output.get("reasoning_tokens"),
    )


def _str(value: Any) -> str:
    """A field the API sends as a string (anything else would be stored and fail to load).

    Raises:
        TypeError: it is not one (``_sse.unreadable`` makes it the provider's error).
    """
    if not isinstance(value, str):
        raise TypeError(f"a string was expected, not {value!r}")
    return value


def _parts(item: dict[str, Any], field: str) -> list[dict[str, Any]]:
    return [part for part in item.get(field) or () if isinstance(part, dict)]


def _item_blocks(item: dict[str, Any], after: Any, refusals: list[str]) -> list[ContentBlock]:
    """The blocks of one output item; ``after`` is the item that follows it, or None."""
    match item.get("type"):
        case "reasoning":
            summary = "".join(_str(part.get("text") or "") for part in _parts(item, "summary"))
            followed_by = after.get("id") if isinstance(after, dict) else None
            if followed_by is not None:
                _str(followed_by)
            return [  # the fields the server sent, as it sent them
                ReasoningBlock(item_json=json.dumps(item), summary=summary, followed_by=followed_by)
            ]
        case "function_call":
            call_id, name, arguments = (_str(item[f]) for f in ("call_id", "name", "arguments"))
            return [ToolUseBlock(id=call_id, name=name, input_json=arguments)]
        case "message":
            texts: list[ContentBlock] = []
            for part in _parts(item, "content"):
                if part.get("type") == "output_text":
                    texts.append(TextBlock(text=_str(part["text"])))
                elif part.get("type") == "refusal":
                    refusals.append(_str(part.get("refusal") or ""))
            return texts
    return []  # a built-in tool's item: parlour declares none


def decode_response(response: dict[str, Any]) -> LLMResponse:
    """A Responses API answer (completed or incomplete), its JSON as sent, as parlour's
    response."""
    blocks: list[ContentBlock] = []
    refusals: list[str] = []
    output = [item for item in response.get("output") or () if isinstance(item, dict)]
    for item, after in itertools.pairwise([*output, None]):  # an empty output has none
        assert item is not None
        blocks.extend(_item_blocks(item, after, refusals))
    status = response.get("status")
    if refusals:
        stop = StopReason.CONTENT_FILTERED
    elif status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        stop = _INCOMPLETE.get(reason or "", StopReason.UNKNOWN)
    elif any(isinstance(b, ToolUseBlock) for b in blocks):
        stop = StopReason.TOOL_USE
    else:
        stop = StopReason.END_TURN if status == "completed" else StopReason.UNKNOWN
    return LLMResponse(
        model_id=_str(response["model"]),
        blocks=blocks,
        stop_reason=stop,
        usage=_usage(response.get("usage")),
        refusal_explanation="\n".join(refusals) or None,
    )


def _decoded(data: bytes) -> dict[str, Any]:
    """One event's or answer's JSON object (an empty one for anything else)."""
    value: object = json_of(data)
    return value if isinstance(value, dict) else {}


class _Events:
    """Reads a stream's events (``_sse.Events`` of the response's bytes, each decoded with
    msgspec): text deltas out, the final response kept, a failure raised as the SDK's
    ``APIError`` (on the stream's own request) for the error map to judge. The SDK's typed
    events built a pydantic object per event (``benchmarks/sdk_stream.py``)."""

    def __init__(self, sdk: Any, request: Any, model_id: str) -> None:
        self._sdk, self._request, self._model_id = sdk, request, model_id
        self._split = Events()
        self.final: LLMResponse | None = None

    def feed(self, chunk: bytes) -> Iterator[str]:
        """The text deltas of the events ``chunk`` completes.

        Raises:
            openai.APIError: a ``response.failed`` or ``error`` event.
            UncorrectableLLMError: an event that is not the API's (not JSON, a field of
                another type).
        """
        return guarded("OpenAI", self._model_id, self._read(self._split.feed(chunk)))

    def close(self) -> Iterator[str]:
        """The text deltas of the events the stream's last bytes complete; raises as
        ``feed``."""
        return guarded("OpenAI", self._model_id, self._read(self._split.close()))

    def _read(self, events: Iterator[tuple[str | None, bytes]]) -> Iterator[str]:
        for _, data in events:
            event = _decoded(data)
            kind = event.get("type")
            if kind == "response.output_text.delta":
                delta = event.get("delta")
                if delta:
                    yield str(delta)
            elif kind in ("response.completed", "response.incomplete"):
                self.final = decode_response(event.get("response") or {})
            elif kind == "response.failed":
                self.fail((event.get("response") or {}).get("error"))
            elif kind == "error":
                self.fail(event)

    def fail(self, error: Any) -> None:
        """Raise ``error`` (a response's ``error`` or an ``error`` event) as an ``APIError``."""
        error = error if isinstance(error, dict) else {}
        text = error.get("message") or "The response failed"
        body = {"code": error.get("code"), "message": text}
        raise self._sdk.APIError(text, self._request, body=body)

    def response(self) -> LLMResponse:
        """The final response.

        Raises:
            RetryableLLMError: the stream ended before its terminal event (a dropped link).
        """
        if self.final is None:
            raise cut_short("OpenAI", self._model_id, "the response")
        return self.final


# -- the client ----------------------------------------------------------------------------------


_STREAM = {"stream": True}


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

    endpoint = "/responses"

    def encode(self, request: WireRequest) -> dict[str, Any]:
        return build_responses_body(request)

    def _call(self, body: dict[str, Any]) -> LLMResponse:
        return self._checked(self._whole(body), body)

    def _checked(self, response: Any, body: dict[str, Any]) -> LLMResponse:
        """A non-streamed answer (its HTTP response, read whole); a ``failed`` one is raised
        as its stream's would be.

        Raises:
            UncorrectableLLMError: it is not the API's answer (not a JSON object, no model).
        """
        with unreadable(self.provider, body["model"]):
            answer = _decoded(response.content)
            if answer.get("status") == "failed":
                events = _Events(self._sdk, response.request, str(answer.get("model")))
                events.fail(answer.get("error"))
            return decode_response(answer)

    async def _acall(self, body: dict[str, Any], on_text: TextCallback | None) -> LLMResponse:
        if on_text is None:
            return self._checked(await self._awhole(body), body)
        async with self._astreamed(body | _STREAM) as response:
            events = _Events(self._sdk, response.request, body["model"])
            async for chunk in self._aread(response):
                for delta in events.feed(chunk):
                    on_text(delta)
            for delta in events.close():
                on_text(delta)
        return events.response()

    def _call_streaming(self, body: dict[str, Any]) -> Iterator[str | LLMResponse]:
        with self._streamed(body | _STREAM) as response:
            events = _Events(self._sdk, response.request, body["model"])
            for chunk in self._read(response):
                yield from events.feed(chunk)
            yield from events.close()
        yield events.response()
