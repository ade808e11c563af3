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

import threading
from typing import Any

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


def check_request(endpoint: str, body: dict[str, Any]) -> None:
    """Check ``body``, as sent to ``endpoint``, against its SDK request type.

    Raises:
        RequestTypeError: the endpoint is unknown or the body does not fit, with the path.
    """
    check(body, request_type(endpoint, body))


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
