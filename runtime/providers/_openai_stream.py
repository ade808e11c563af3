"""Reading a Chat Completions stream: its server-sent events decoded with msgspec into
chunks that read as the SDK's ``ChatCompletionChunk`` does for ``_StreamAssembly`` (the
fields it reads, every other one skipped), at a fraction of the SDK's cost (a pydantic
object per chunk; ``_anthropic_stream`` has the measurement).

The SDK makes the request (``HttpSdkClient._streamed``: its retries, headers, timeout and
status errors). As its own stream does, the reader stops at ``[DONE]`` and raises the
SDK's ``APIError`` for a chunk that is an ``error`` object. The chunk's fields take any
type, as the SDK's construction does: a compatible server's odd value reaches the
assembly as it came.

A whole (non-streamed) answer is read the same way (``completion``): the fields of the
SDK's ``ChatCompletion`` that ``decode_completion`` reads, without building its object.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from ._sse import Events, json_of


class Function(msgspec.Struct):
    name: Any = None
    arguments: Any = None


class Call(msgspec.Struct):
    index: Any = 0
    id: Any = None
    function: Function | None = None


class Delta(msgspec.Struct):
    content: Any = None
    tool_calls: list[Call] | None = None


class Choice(msgspec.Struct):
    delta: Delta = msgspec.field(default_factory=Delta)
    finish_reason: Any = None


class Cached(msgspec.Struct):
    cached_tokens: Any = None


class Reasoning(msgspec.Struct):
    reasoning_tokens: Any = None


class Tokens(msgspec.Struct):
    prompt_tokens: Any = 0
    completion_tokens: Any = 0
    prompt_tokens_details: Cached | None = None
    completion_tokens_details: Reasoning | None = None


class Chunk(msgspec.Struct):
    model: Any = ""
    choices: list[Choice] | None = None
    usage: Tokens | None = None


class Message(msgspec.Struct):
    content: Any = None
    tool_calls: list[Call] | None = None
    refusal: Any = None


class Answer(msgspec.Struct):
    message: Message = msgspec.field(default_factory=Message)
    finish_reason: Any = None


class Completion(msgspec.Struct):
    """A non-streamed answer: the fields of the SDK's ``ChatCompletion`` that
    ``decode_completion`` reads."""

    model: Any = ""
    choices: list[Answer] = msgspec.field(default_factory=list)
    usage: Tokens | None = None


_CHUNK = msgspec.json.Decoder(Chunk)
_COMPLETION = msgspec.json.Decoder(Completion)


def completion(data: bytes) -> Completion:
    """A non-streamed answer's JSON, read as the SDK's ``ChatCompletion`` reads it for
    ``decode_completion`` (a pydantic object a call otherwise)."""
    return json_of(data, _COMPLETION)


def chunks(
    stream: Iterator[tuple[str | None, bytes]], failed: Callable[[str, object], Exception]
) -> Iterator[Chunk]:
    """The chunks of ``stream``'s events until ``[DONE]``.

    Args:
        failed: makes the exception an ``error`` chunk raises, from its message and the
            error object (the SDK's ``APIError`` on the request).
    """
    for _, data in stream:
        if data.startswith(b"[DONE]"):
            return
        if b'"error"' in data:  # rare: decoded whole to look
            whole = json.loads(data)
            error = whole.get("error") if isinstance(whole, dict) else None
            if error:
                message = error.get("message") if isinstance(error, dict) else None
                if not isinstance(message, str) or not message:
                    message = "An error occurred during streaming"
                raise failed(message, error)
        yield json_of(data, _CHUNK)


class ChunkReader:
    """Fed a response's bytes (``feed``), yields its chunks; ``close`` yields the last."""

    __slots__ = ("_events", "_failed")

    def __init__(self, failed: Callable[[str, object], Exception]) -> None:
        self._events = Events()
        self._failed = failed

    def feed(self, chunk: bytes) -> Iterator[Chunk]:
        return chunks(self._events.feed(chunk), self._failed)

    def close(self) -> Iterator[Chunk]:
        return chunks(self._events.close(), self._failed)
