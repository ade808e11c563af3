"""Fakes of OpenAI's Responses endpoint: response bodies and their event streams (see
``testing``); ``MockProvider`` serves them like the other shapes."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def openai_reasoning(
    item_id: str = "rs_1", summary: str = "", encrypted_content: str = "gAAAAB-opaque=="
) -> dict[str, Any]:
    """A reasoning output item as a reasoning model returns it under ``store=false``."""
    parts = [{"type": "summary_text", "text": summary}] if summary else []
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": parts,
        "encrypted_content": encrypted_content,
    }


def openai_response(
    text: str | None = "Hello.",
    *,
    reasoning: Iterable[dict[str, Any]] = (),
    tool_calls: Iterable[dict[str, Any]] = (),
    status: str = "completed",
    incomplete_reason: str | None = None,
    model: str = "gpt-5-mini",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
    refusal: str | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Responses API body: the ``reasoning`` items (see ``openai_reasoning``) first, then
    the message, then the calls (``{"id", "name", "arguments"}``, ``id`` the call id)."""
    output = list(reasoning)
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "output_text", "text": text, "annotations": []})
    if refusal is not None:
        content.append({"type": "refusal", "refusal": refusal})
    if content:
        message = {"id": "msg_1", "type": "message", "role": "assistant", "content": content}
        output.append({**message, "status": "completed"})
    output += [
        {
            "id": f"fc_{index}",
            "type": "function_call",
            "call_id": call["id"],
            "name": call["name"],
            "arguments": call["arguments"],
            "status": "completed",
        }
        for index, call in enumerate(tool_calls)
    ]
    incomplete = {"reason": incomplete_reason} if incomplete_reason else None
    return {
        "id": "resp_test",
        "object": "response",
        "created_at": 0,
        "model": model,
        "status": status,
        "output": output,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": None,
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": input_tokens + output_tokens,
        },
    }


class _Events:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, kind: str, **data: Any) -> None:
        body = {"type": kind, "sequence_number": len(self.lines), **data}
        self.lines.append(f"event: {kind}\ndata: {json.dumps(body)}\n\n")

    def encoded(self) -> bytes:
        return "".join(self.lines).encode()


def _item_events(events: _Events, index: int, item: dict[str, Any], chunk: int) -> None:
    opening = {**item, "status": "in_progress"}
    if item["type"] == "message":
        opening["content"] = []
    events.add("response.output_item.added", output_index=index, item=opening)
    if item["type"] == "message":
        for part_index, part in enumerate(item["content"]):
            _part_events(events, index, item["id"], part_index, part, chunk)
    elif item["type"] == "function_call":
        where = {"output_index": index, "item_id": item["id"]}
        events.add("response.function_call_arguments.delta", **where, delta=item["arguments"])
        events.add("response.function_call_arguments.done", **where, arguments=item["arguments"])
    events.add("response.output_item.done", output_index=index, item=item)


def _part_events(
    events: _Events, index: int, item_id: str, part_index: int, part: dict[str, Any], chunk: int
) -> None:
    where = {"output_index": index, "item_id": item_id, "content_index": part_index}
    empty = {**part, "text": ""} if part["type"] == "output_text" else {**part, "refusal": ""}
    events.add("response.content_part.added", **where, part=empty)
    if part["type"] == "output_text":
        text = part["text"]
        for i in range(0, len(text), chunk):
            delta = text[i : i + chunk]
            events.add("response.output_text.delta", **where, delta=delta, logprobs=[])
        events.add("response.output_text.done", **where, text=text, logprobs=[])
    events.add("response.content_part.done", **where, part=part)


def openai_response_sse(response: dict[str, Any], chunk: int = 4) -> bytes:
    """``response`` (from ``openai_response``) as the Responses streaming event sequence:
    created, each item's events (text in deltas of ``chunk`` characters), then completed,
    incomplete or failed as its status says."""
    events = _Events()
    start = {**response, "status": "in_progress", "output": [], "usage": None}
    events.add("response.created", response=start)
    for index, item in enumerate(response["output"]):
        _item_events(events, index, item, chunk)
    status = response["status"]
    events.add(f"response.{status}", response=response)
    return events.encoded()


def openai_response_sse_error(
    code: str = "server_error",
    text: str = "Partial",
    message: str = "Server error",
    *,
    failed: bool = False,
) -> bytes:
    """A Responses stream that sends ``text``, then fails with ``code``: by an ``error``
    event, or with ``failed`` by a ``response.failed`` event, as the API does mid-stream."""
    lines = openai_response_sse(openai_response(text)).decode().split("\n\n")
    head = "\n\n".join(lines[:5]) + "\n\n"  # created, item added, part added, two deltas
    events = _Events()
    events.lines = [head]
    if failed:
        error = {"code": code, "message": message}
        body = openai_response(text, status="failed", error=error)
        events.add("response.failed", response=body)
    else:
        events.add("error", code=code, message=message, param=None)
    return events.encoded()
