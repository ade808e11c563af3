"""Reading an Anthropic Messages stream: its server-sent events decoded with msgspec and
accumulated into the message, as the SDK's ``messages.stream`` helper accumulates them
(``anthropic.lib.streaming._messages.accumulate_event``), at a fraction of its cost.

The SDK still makes the request (its retries, headers, timeouts, status errors); the
client asks its ``post`` for the response unread (``HttpSdkClient._streamed``) and feeds
its bytes to a ``StreamReader``. The SDK's reading builds a pydantic object per event and a snapshot
per delta: 2.7 ms of CPU for a 25-event answer against 0.6 ms here
(``benchmarks/sdk_stream.py``), five times a whole durable turn of parlour's.

What is kept of each event is what the helper keeps: the message from ``message_start``;
each content block from its start, its text, thinking, signature, citations and tool input
(the input's JSON pieces joined and parsed when the block stops, partial JSON as the
helper parses it); the stop reason, stop sequence, stop details and the usage from
``message_delta`` (its counts are totals: each one given replaces the start's). ``ping``
and unknown events are skipped; an ``error`` event raises the SDK's ``APIStatusError``,
as the SDK's own stream does, so the client's error map classifies both alike.

Where the helper keeps what a stream left, the reader refuses it: a stream that ends
before ``message_stop`` (a connection closed early) is a ``RetryableLLMError``, never a
partial message to store, and events that do not read as the API documents them are an
``UncorrectableLLMError`` (``_sse.unreadable``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from ._sse import Events, cut_short, guarded, json_of, unreadable

_decode = msgspec.json.Decoder().decode


class Part(msgspec.Struct):
    """A content block as ``decode_message`` reads it (the SDK's fields of that name)."""

    type: str
    text: str = ""
    thinking: str = ""
    signature: str = ""
    data: str = ""
    id: str = ""
    name: str = ""
    input: Any = None


class Tokens(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class Details(msgspec.Struct):
    category: str | None = None
    explanation: str | None = None


class Message(msgspec.Struct):
    """The accumulated message, as ``decode_message`` reads the SDK's ``Message``."""

    model: str = ""
    content: list[Part] = msgspec.field(default_factory=list)
    usage: Tokens = msgspec.field(default_factory=Tokens)
    stop_reason: str | None = None
    stop_details: Details | None = None


class StreamReader:
    """Fed the stream's bytes (``feed``), yields each text delta as it arrives; ``message``
    is the whole message once the stream has ended.

    Args:
        failed: makes the exception an ``error`` event raises, from its message and its
            decoded body (the SDK's ``APIStatusError`` on the response).
        model_id: the model asked, for the errors' messages.
    """

    __slots__ = ("_ended", "_events", "_failed", "_inputs", "_message", "_model_id")

    def __init__(self, failed: Callable[[str, object], Exception], model_id: str) -> None:
        self._failed, self._model_id = failed, model_id
        self._events = Events()
        self._message: dict[str, Any] | None = None
        self._inputs: dict[int, list[str]] = {}  # each tool block's JSON pieces
        self._ended = False  # message_stop arrived

    def feed(self, chunk: bytes) -> Iterator[str]:
        """The text deltas the events completed by ``chunk`` carry, in order.

        Raises:
            Exception: ``failed``'s, for an ``error`` event.
            UncorrectableLLMError: an event that is not the API's (not JSON, a field missing,
                before ``message_start``), a tool's input that is not JSON.
        """
        return guarded("Anthropic", self._model_id, self._texts(self._events.feed(chunk)))

    def _texts(self, events: Iterator[tuple[str | None, bytes]]) -> Iterator[str]:
        for event, data in events:
            if event is not None and event != "ping":
                text = self._apply(event, data)
                if text:
                    yield text

    def message(self) -> Message:
        """The message the stream carried, once it has ended.

        Raises:
            RetryableLLMError: the stream ended before ``message_stop``.
            UncorrectableLLMError: as ``feed``.
        """
        with unreadable("Anthropic", self._model_id):
            for _ in self._texts(self._events.close()):
                pass
            message = self._message
            if message is None or not self._ended:
                raise cut_short("Anthropic", self._model_id, "its message")
            for index in list(self._inputs):  # a block the stream left unstopped
                self._stopped(message["content"][index], index)
            return msgspec.convert(message, Message)

    def _apply(self, event: str, data: bytes) -> str | None:
        if event == "error":
            try:
                body: object = _decode(data)
                text = f"{body}"
            except msgspec.DecodeError:
                body = text = data.decode(errors="replace")
            raise self._failed(text, body)
        if not data:
            return None
        payload: Any = json_of(data)
        if event == "message_start":
            self._message = payload["message"]
            return None
        if event == "message_stop":
            self._ended = self._message is not None
            return None
        message = self._message
        if message is None:
            raise ValueError(f'Unexpected event order, got {event} before "message_start"')
        if event == "content_block_delta":
            return self._delta(message["content"][payload["index"]], payload)
        if event == "content_block_start":
            message["content"].append(payload["content_block"])
        elif event == "content_block_stop":
            self._stopped(message["content"][payload["index"]], payload["index"])
        elif event == "message_delta":
            _moved_on(message, payload)
        return None

    def _delta(self, block: dict[str, Any], payload: dict[str, Any]) -> str | None:
        delta = payload["delta"]
        kind, of = delta["type"], block["type"]
        if kind == "text_delta" and of == "text":
            block["text"] += delta["text"]
            return str(delta["text"])
        if kind == "input_json_delta" and "input" in block:
            self._inputs.setdefault(payload["index"], []).append(delta["partial_json"])
        elif kind == "thinking_delta" and of == "thinking":
            block["thinking"] += delta["thinking"]
        elif kind == "signature_delta" and of == "thinking":
            block["signature"] = delta["signature"]
        elif kind == "citations_delta" and of == "text":
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]
        return None

    def _stopped(self, block: dict[str, Any], index: int) -> None:
        pieces = self._inputs.pop(index, None)
        if not pieces or not "".join(pieces):
            return
        from jiter import from_json  # the SDK's own parser (its dependency), partial JSON too

        text = "".join(pieces)
        try:
            block["input"] = from_json(text.encode(), partial_mode=True)
        except ValueError as exc:
            raise ValueError(
                "Unable to parse tool parameter JSON from model. Please retry your request "
                f"or adjust your prompt. Error: {exc}. JSON: {text}"
            ) from exc


def _moved_on(message: dict[str, Any], payload: dict[str, Any]) -> None:
    """``message_delta``: the stop, and the usage (totals: each count given replaces)."""
    delta = payload["delta"]
    message["stop_reason"] = delta.get("stop_reason")
    message["stop_sequence"] = delta.get("stop_sequence")
    message["stop_details"] = delta.get("stop_details")
    usage, given = message["usage"], payload.get("usage") or {}
    usage["output_tokens"] = given.get("output_tokens", usage.get("output_tokens", 0))
    for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        if given.get(name) is not None:
            usage[name] = given[name]
