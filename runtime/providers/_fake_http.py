"""Fakes of the Anthropic and OpenAI servers over ``httpx2.MockTransport`` (see ``testing``)."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ._fake_responses import openai_response_sse

Reply = dict[str, Any] | tuple[int, dict[str, Any]] | bytes | BaseException
# what an httpx2.MockTransport takes: a MockProvider, or any function of a request to a
# response (``httpx2.Request`` to ``httpx2.Response``; typed loosely, httpx2 is optional)
Handler = Callable[[Any], Any]


class MockProvider:
    """A recording ``httpx2.MockTransport`` handler answering from ``replies`` in order.

    Each reply is a JSON body (status 200), a ``(status, body)`` pair (an error answer),
    ``bytes`` of a server-sent event stream (see ``anthropic_sse``, ``openai_sse`` and
    ``openai_response_sse``), or an
    exception, raised as the transport would (``httpx2.ConnectError``). A message or
    completion body answering a streaming request is sent as its event stream.
    ``bodies`` holds the decoded JSON of every request received, in order.
    """

    def __init__(self, *replies: Reply) -> None:
        self._replies: deque[Reply] = deque(replies)
        self.requests: list[Any] = []
        self.bodies: list[dict[str, Any]] = []

    def add(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    def __call__(self, request: Any) -> Any:
        import httpx2

        self.requests.append(request)
        body = json.loads(request.content or b"{}")
        self.bodies.append(body)
        reply = self._replies.popleft()
        if isinstance(reply, BaseException):
            raise reply
        if body.get("stream") and isinstance(reply, dict):
            reply = _as_stream(reply)
        if isinstance(reply, bytes):
            headers = {"content-type": "text/event-stream"}
            return httpx2.Response(200, content=reply, headers=headers)
        if isinstance(reply, tuple):
            return httpx2.Response(reply[0], json=reply[1])
        return httpx2.Response(200, json=reply)

    @property
    def last_body(self) -> dict[str, Any]:
        return self.bodies[-1]


def _as_stream(reply: dict[str, Any]) -> bytes | dict[str, Any]:
    """A JSON reply in the event-stream form a streaming request expects."""
    if reply.get("type") == "message":
        return anthropic_sse(reply)
    if reply.get("object") == "chat.completion":
        return openai_sse(reply)
    if reply.get("object") == "response":
        return openai_response_sse(reply)
    return reply


def _http_client(handler: Handler) -> Any:
    import httpx2

    return httpx2.Client(transport=httpx2.MockTransport(handler))


def mock_anthropic_sdk(handler: Handler) -> Any:
    """A real ``anthropic.Anthropic`` over ``handler`` (a ``MockProvider``, or any function
    of an ``httpx2.Request`` to an ``httpx2.Response``): a dummy key, no SDK retries."""
    import anthropic

    return anthropic.Anthropic(api_key="test-key", max_retries=0, http_client=_http_client(handler))


def mock_openai_sdk(handler: Handler) -> Any:
    """A real ``openai.OpenAI`` over ``handler``: a dummy key, no SDK retries."""
    import openai

    return openai.OpenAI(api_key="test-key", max_retries=0, http_client=_http_client(handler))


def _async_http_client(handler: Handler) -> Any:
    import httpx2

    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


def mock_async_anthropic_sdk(handler: Handler) -> Any:
    """A real ``anthropic.AsyncAnthropic`` over ``handler``: a dummy key, no SDK retries."""
    import anthropic

    http = _async_http_client(handler)
    return anthropic.AsyncAnthropic(api_key="test-key", max_retries=0, http_client=http)


def mock_async_openai_sdk(handler: Handler) -> Any:
    """A real ``openai.AsyncOpenAI`` over ``handler``: a dummy key, no SDK retries."""
    import openai

    http = _async_http_client(handler)
    return openai.AsyncOpenAI(api_key="test-key", max_retries=0, http_client=http)


# -- Anthropic shapes ----------------------------------------------------------------------------


def anthropic_message(
    text: str | None = "Hello.",
    *,
    content: Iterable[dict[str, Any]] = (),
    stop_reason: str = "end_turn",
    model: str = "claude-sonnet-4-5",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_creation: int | None = None,
    cache_read: int | None = None,
    stop_details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Messages API response body; ``content`` blocks come before ``text``."""
    blocks = list(content)
    if text is not None:
        blocks.append({"type": "text", "text": text})
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "stop_details": stop_details,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": cache_creation,
            "cache_read_input_tokens": cache_read,
        },
    }


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def anthropic_sse(message: dict[str, Any], chunk: int = 4) -> bytes:
    """``message`` (from ``anthropic_message``) as the Messages streaming event sequence,
    text in deltas of ``chunk`` characters."""
    start = {**message, "content": [], "stop_reason": None}
    start["usage"] = {**message["usage"], "output_tokens": 1}
    events = [_sse("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        events += _block_events(index, block, chunk)
    delta = {
        "stop_reason": message["stop_reason"],
        "stop_sequence": None,
        "stop_details": message.get("stop_details"),
    }
    usage = {"output_tokens": message["usage"]["output_tokens"]}
    events.append(_sse("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(_sse("message_stop", {"type": "message_stop"}))
    return "".join(events).encode()


def anthropic_sse_error(
    error_type: str = "overloaded_error", text: str = "Partial", message: str = "Overloaded"
) -> bytes:
    """A Messages stream that starts, sends ``text``, then fails with an ``error`` event of
    ``error_type`` (``overloaded_error``, ``api_error``, ...), as the API does mid-stream."""
    events = anthropic_sse(anthropic_message(text)).decode().split("\n\n")
    head = "\n\n".join(events[:4]) + "\n\n"  # message_start, block start, first delta
    error = {"type": "error", "error": {"type": error_type, "message": message}}
    return (head + _sse("error", error)).encode()


def _block_events(index: int, block: dict[str, Any], chunk: int) -> list[str]:
    kind = block["type"]
    if kind == "text":
        opening: dict[str, Any] = {"type": "text", "text": ""}
        text = block["text"]
        deltas = [
            {"type": "text_delta", "text": text[i : i + chunk]} for i in range(0, len(text), chunk)
        ]
    elif kind == "tool_use":
        opening = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
    else:  # thinking
        opening = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    start = {"type": "content_block_start", "index": index, "content_block": opening}
    events = [_sse("content_block_start", start)]
    for delta in deltas:
        body = {"type": "content_block_delta", "index": index, "delta": delta}
        events.append(_sse("content_block_delta", body))
    events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


# -- OpenAI shapes -------------------------------------------------------------------------------


def openai_completion(
    text: str | None = "Hello.",
    *,
    tool_calls: Iterable[dict[str, Any]] = (),
    finish_reason: str = "stop",
    model: str = "gpt-5-mini",
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    cached_tokens: int | None = None,
    refusal: str | None = None,
) -> dict[str, Any]:
    """A Chat Completions response body. ``tool_calls`` items are ``{"id", "name",
    "arguments"}``."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": refusal}
    calls = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for c in tool_calls
    ]
    if calls:
        message["tool_calls"] = calls
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage,
    }


def openai_sse(completion: dict[str, Any], chunk: int = 4) -> bytes:
    """``completion`` (from ``openai_completion``) as a chunk stream with a usage chunk."""
    choice = completion["choices"][0]
    text = choice["message"]["content"] or ""
    base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0}
    base["model"] = completion["model"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": text[i : i + chunk]} for i in range(0, len(text), chunk)]
    for index, call in enumerate(choice["message"].get("tool_calls", [])):
        deltas.append({"tool_calls": [{"index": index, **call}]})
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    last = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
    chunks.append({**base, "choices": [last]})
    chunks.append({**base, "choices": [], "usage": completion["usage"]})
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


def openai_sse_error(
    error_type: str = "server_error", text: str = "Partial", message: str = "Server error"
) -> bytes:
    """A Chat Completions stream that sends ``text``, then an ``error`` object of
    ``error_type`` instead of the next chunk, as the API does when it fails mid-stream."""
    lines = openai_sse(openai_completion(text)).decode().split("\n\n")
    error = {"error": {"message": message, "type": error_type, "param": None, "code": None}}
    return ("\n\n".join(lines[:2]) + f"\n\ndata: {json.dumps(error)}\n\n").encode()
