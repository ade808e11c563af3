"""The SDK request type each endpoint's body must fit, and a recorder of the bodies sent.

Anthropic: ``/v1/messages`` takes ``MessageCreateParamsStreaming`` when the body says
``"stream": true`` and ``MessageCreateParamsNonStreaming`` otherwise;
``/v1/messages/count_tokens`` takes ``MessageCountTokensParams``. OpenAI:
``/chat/completions`` takes ``CompletionCreateParamsStreaming`` or ``...NonStreaming`` the
same way, and ``/responses`` ``ResponseCreateParamsStreaming`` or ``...NonStreaming``.
Any other endpoint is refused: a body nobody checks is not a body that passed.
Thread-safety: one ``SentBodies`` per test; ``record`` may be called from the event loop's
thread of an async client, ``check_all`` runs after the test.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from parlour.runtime.providers._image_size import image_size_b64
from tests.runtime.providers._request_types import RequestTypeError, check


def request_type(endpoint: str, body: dict[str, Any]) -> Any:
    """The SDK's TypedDict for a body sent to ``endpoint`` (a URL path).

    Raises:
        RequestTypeError: no request type is known for ``endpoint``.
    """
    from anthropic.types import message_count_tokens_params, message_create_params
    from openai.types.chat import completion_create_params
    from openai.types.responses import response_create_params

    streaming = body.get("stream") is True
    if endpoint.endswith("/v1/messages"):
        module: Any = message_create_params
        return (
            module.MessageCreateParamsStreaming
            if streaming
            else module.MessageCreateParamsNonStreaming
        )
    if endpoint.endswith("/v1/messages/count_tokens"):
        return message_count_tokens_params.MessageCountTokensParams
    if endpoint.endswith("/chat/completions"):
        module = completion_create_params
        return (
            module.CompletionCreateParamsStreaming
            if streaming
            else module.CompletionCreateParamsNonStreaming
        )
    if endpoint.endswith("/responses"):
        module = response_create_params
        return (
            module.ResponseCreateParamsStreaming
            if streaming
            else module.ResponseCreateParamsNonStreaming
        )
    raise RequestTypeError(endpoint, "no SDK request type is known for this endpoint")


# the tool call ids Anthropic takes (and none twice in a request), and OpenAI's longest
ANTHROPIC_ID = re.compile(r"[A-Za-z0-9_-]+")
OPENAI_ID_LIMIT = 40


def check_request(endpoint: str, body: dict[str, Any]) -> None:
    """Check ``body``, as sent to ``endpoint``, against its SDK request type and the rules
    the provider documents for the tool calls it holds, which no type says.

    Raises:
        RequestTypeError: the endpoint is unknown or the body does not fit, with the path.
    """
    check(body, request_type(endpoint, body))
    check_calls(endpoint, body)


def check_calls(endpoint: str, body: dict[str, Any]) -> None:
    """Anthropic: each ``tool_use`` id of ``[A-Za-z0-9_-]`` and no two alike, a name of 1
    to 200 characters, an object for its input; at most 100 images, and none over 2,000
    pixels on a side past 20. OpenAI: call ids of at most 40 characters. Both: images and
    files in user messages only.

    Raises:
        RequestTypeError: a call that breaks one, with its path.
    """
    messages = body.get("messages") or body.get("input") or []
    for at, message in enumerate(messages):
        parts = message.get("content") if message.get("role") == "assistant" else None
        media = {"image", "document", "image_url", "file", "input_image", "input_file"}
        if isinstance(parts, list) and any(p.get("type") in media for p in parts):
            raise RequestTypeError(f"messages[{at}]", "an image or a file from the assistant")
    if endpoint.endswith("/v1/messages"):
        seen: set[str] = set()
        for at, message in enumerate(messages):
            content = message["content"] if isinstance(message["content"], list) else []
            for index, part in enumerate(content):
                if part.get("type") != "tool_use":
                    continue
                path = f"messages.{at}.content.{index}"
                if not ANTHROPIC_ID.fullmatch(part["id"]) or part["id"] in seen:
                    raise RequestTypeError(path, f"id {part['id']!r} not allowed or twice")
                if not 1 <= len(part["name"]) <= 200 or not isinstance(part["input"], dict):
                    raise RequestTypeError(path, "a name of 1-200 characters, an object input")
                seen.add(part["id"])
        images = [
            p["source"]["data"]
            for m in messages
            if isinstance(m["content"], list)
            for p in m["content"]
            if p.get("type") == "image"
        ]
        sizes = [image_size_b64(data) or (0, 0) for data in images]
        if len(images) > 100 or (len(images) > 20 and max(max(s) for s in sizes) > 2000):
            raise RequestTypeError("messages", f"{len(images)} images, one over 2,000 pixels")
    elif endpoint.endswith(("/chat/completions", "/responses")):
        for at, item in enumerate(messages):
            ids = [c["id"] for c in item.get("tool_calls", ())] + [item.get("call_id") or ""]
            if any(len(i) > OPENAI_ID_LIMIT for i in ids):
                raise RequestTypeError(f"messages[{at}]", f"a call id over 40 characters: {ids}")


class SentBodies:
    """The (endpoint, body) pairs a test sent, checked together by ``check_all``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def record(self, request: Any, body: dict[str, Any]) -> None:
        with self._lock:
            self.sent.append((str(request.url.path), body))

    def check_all(self) -> None:
        """Raises ``RequestTypeError`` for the first sent body that does not fit."""
        for index, (endpoint, body) in enumerate(self.sent):
            try:
                check_request(endpoint, body)
            except RequestTypeError as failure:
                raise RequestTypeError(
                    f"request {index} to {endpoint}: {failure.path}", failure.problem
                ) from None
