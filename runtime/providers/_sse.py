"""Server-sent events from a response's bytes, for the answers parlour reads itself
(``_anthropic_stream``, ``_openai_stream``, ``_openai_responses``): fed chunks cut
anywhere, ``Events`` yields each event's name and data once its blank line arrives;
``json_of`` decodes an event's data (or a whole answer); ``unreadable`` (and ``guarded``,
for a reading that yields) turns what does not read as the API documents it into a
provider error, and ``cut_short`` names a stream that ended before its last event.

Lines end in LF, CRLF or CR; a line is taken once it ends in LF (a CR at a chunk's end may
be a CRLF cut in two, and ``close`` takes what is left). ``event:`` names the event,
``data:`` lines are joined with LF, comments (``:``) and other fields are skipped.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any, TypeVar

import msgspec

from ..errors import RetryableLLMError, UncorrectableLLMError

T = TypeVar("T")
_ANY: msgspec.json.Decoder[Any] = msgspec.json.Decoder()
_END: Any = object()


def json_of(data: bytes, decoder: msgspec.json.Decoder[T] = _ANY) -> T:
    """``data`` as ``decoder`` reads it (by default: plain JSON values). JSON that msgspec
    refuses but the standard library takes (a lone surrogate's escape, which UTF-8 cannot
    hold) is read by the latter and converted to the decoder's type.

    Raises:
        msgspec.ValidationError: the JSON does not fit the decoder's type.
        ValueError: ``data`` is not JSON.
    """
    try:
        return decoder.decode(data)
    except msgspec.DecodeError:
        return msgspec.convert(json.loads(data), decoder.type)  # type: ignore[no-any-return]


# what a reading raises when an answer is not the API's (a ``KeyError``, an ``IndexError``,
# not JSON, msgspec's ``ValidationError``, a value of another type)
_UNREADABLE = (LookupError, TypeError, ValueError, AttributeError)


@contextlib.contextmanager
def unreadable(provider: str, model_id: str) -> Iterator[None]:
    """Reading an answer inside: an answer that does not read as the API documents it (not
    JSON, a field missing or of another type, events out of order) is the provider's
    fault, raised as ``UncorrectableLLMError`` (the reading's error its cause), never as a
    bare ``KeyError`` or ``ValueError`` past the client's error map. Only the reading goes
    inside: an exception of a caller's ``on_text`` is its own.

    Raises:
        UncorrectableLLMError: the answer could not be read.
    """
    try:
        yield
    except _UNREADABLE as exc:
        raise _not_read(provider, model_id, exc) from exc


def guarded(provider: str, model_id: str, items: Iterator[T]) -> Iterator[T]:
    """``items`` (a reading of an answer), each taken as inside ``unreadable``: what the
    caller does with one (an ``on_text``) is outside it, and one read before an error
    still arrives before it, in the stream's order."""
    while True:
        try:
            item = next(items, _END)
        except _UNREADABLE as exc:
            raise _not_read(provider, model_id, exc) from exc
        if item is _END:
            return
        yield item


def _not_read(provider: str, model_id: str, exc: Exception) -> UncorrectableLLMError:
    text = f"{provider}'s answer for model {model_id} could not be read: {exc}"
    return UncorrectableLLMError(text)


def cut_short(provider: str, model_id: str, what: str) -> RetryableLLMError:
    """The error of a stream that ended before its last event (``what``): a connection a
    proxy or the server closed early, never an answer to keep, which would be partial."""
    return RetryableLLMError(f"{provider}'s stream for model {model_id} ended before {what} did.")


class Events:
    """The events of one stream, in order."""

    __slots__ = ("_data", "_event", "_held")

    def __init__(self) -> None:
        self._held = b""  # a line not ended yet
        self._event: str | None = None
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> Iterator[tuple[str | None, bytes]]:
        """(name, data) of each event ``chunk`` completes; the name None when it had none."""
        lines = (self._held + chunk).splitlines(keepends=True)
        self._held = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
        for line in lines:
            line = line.rstrip(b"\r\n")
            if line:
                field, _, value = line.partition(b":")
                value = value.removeprefix(b" ")
                if field == b"event":
                    self._event = value.decode(errors="replace")
                elif field == b"data":
                    self._data.append(value)
                continue
            if self._event is not None or self._data:
                event, self._event = self._event, None
                data, self._data = b"\n".join(self._data), []
                yield event, data

    def close(self) -> Iterator[tuple[str | None, bytes]]:
        """The events the stream's last bytes complete (a last line ended by CR alone)."""
        return self.feed(b"\n\n") if self._held else iter(())
