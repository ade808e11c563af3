"""Reading a Chat Completions stream: its server-sent events decoded with msgspec into
chunks that read as the SDK's ``ChatCompletionChunk`` does for ``_StreamAssembly`` (the
fields it reads, every other one skipped), at a fraction of the SDK's cost (a pydantic
object per chunk; ``_anthropic_stream`` has the measurement).

The SDK makes the request (``HttpSdkClient._streamed``: its retries, headers, timeout and
status errors). As its own stream does, the reader stops at ``[DONE]`` and raises the
SDK's ``APIError`` for a chunk that is an ``error`` object. Each field read has the type
the API documents (the SDK's construction took any): a chunk that is not JSON, not an
object, or whose field has another type is an ``UncorrectableLLMError``
(``_sse.unreadable``), never a value that would be stored and fail to load. The reader
notes ``[DONE]`` (``done``), by which the client tells a whole answer from a stream cut
short.

A whole (non-streamed) answer is read the same way (``completion``): the fields of the
SDK's ``ChatCompletion`` that ``decode_completion`` reads, without building its object.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import msgspec

from ._sse import Events, guarded, json_of


class Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class Call(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: Function | None = None


class Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[Call] | None = None


class Choice(msgspec.Struct):
    delta: Delta = msgspec.field(default_factory=Delta)
    finish_reason: str | None = None


class Cached(msgspec.Struct):
    cached_tokens: int | None = None


class Reasoning(msgspec.Struct):
    reasoning_tokens: int | None = None


class Tokens(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: Cached | None = None
    completion_tokens_details: Reasoning | None = None


class Chunk(msgspec.Struct):
    model: str | None = ""
    choices: list[Choice] | None = None
    usage: Tokens | None = None


class Message(msgspec.Struct):
    content: str | None = None
    tool_calls: list[Call] | None = None
    refusal: str | None = None


class Answer(msgspec.Struct):
    message: Message = msgspec.field(default_factory=Message)
    finish_reason: str | None = None


class Completion(msgspec.Struct):
    """A non-streamed answer: the fields of the SDK's ``ChatCompletion`` that
    ``decode_completion`` reads."""

    model: str
    choices: list[Answer] = msgspec.field(default_factory=list)
    usage: Tokens | None = None


_CHUNK = msgspec.json.Decoder(Chunk)
_COMPLETION = msgspec.json.Decoder(Completion)


def completion(data: bytes) -> Completion:
    """A non-streamed answer's JSON, read as the SDK's ``ChatCompletion`` reads it for
    ``decode_completion`` (a pydantic object a call otherwise)."""
    return json_of(data, _COMPLETION)


class ChunkReader:
    """Fed a response's bytes (``feed``), the chunks they complete; ``close`` the last.

    Args:
        failed: makes the exception an ``error`` chunk raises, from its message and the
            error object (the SDK's ``APIError`` on the request).
        model_id: the model asked, for the errors' messages.
    """

    __slots__ = ("_events", "_failed", "_model_id", "done")

    def __init__(self, failed: Callable[[str, object], Exception], model_id: str) -> None:
        self._events = Events()
        self._failed, self._model_id = failed, model_id
        self.done = False  # [DONE] arrived: the stream ended as the API ends it

    def feed(self, chunk: bytes) -> Iterator[Chunk]:
        """The chunks the events ``chunk`` completes carry, until ``[DONE]``.

        Raises:
            Exception: ``failed``'s, for an ``error`` chunk.
            UncorrectableLLMError: a chunk that is not a JSON object.
        """
        return guarded("OpenAI", self._model_id, self._chunks(self._events.feed(chunk)))

    def close(self) -> Iterator[Chunk]:
        """The chunks of the stream's last bytes; raises as ``feed``."""
        return guarded("OpenAI", self._model_id, self._chunks(self._events.close()))

    def _chunks(self, events: Iterator[tuple[str | None, bytes]]) -> Iterator[Chunk]:
        for _, data in events:
            if self.done:
                return
            if data.startswith(b"[DONE]"):
                self.done = True
                return
            if b'"error"' in data:  # rare: decoded whole to look
                whole = json.loads(data)
                error = whole.get("error") if isinstance(whole, dict) else None
                if error:
                    message = error.get("message") if isinstance(error, dict) else None
                    if not isinstance(message, str) or not message:
                        message = "An error occurred during streaming"
                    raise self._failed(message, error)
            yield json_of(data, _CHUNK)
