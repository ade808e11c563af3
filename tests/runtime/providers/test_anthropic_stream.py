"""Anthropic's stream read by parlour: for any stream the API can send, cut into chunks
anywhere, the response and the text deltas are exactly those the SDK's own stream helper
makes of the same bytes (the reference: the SDK over a mock transport)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime.errors import RetryableLLMError, UncorrectableLLMError
from parlour.runtime.providers._anthropic import decode_message
from parlour.runtime.providers._anthropic_stream import StreamReader
from parlour.runtime.testing import mock_anthropic_sdk

_text = st.text(st.characters(), max_size=40)  # lone surrogates too: JSON escapes them
_said = st.text(st.characters(codec="utf-8"), max_size=20)  # a tool input: valid Unicode
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _said,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_said, inner, max_size=3),
    max_leaves=8,
)
_blocks = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, _text),
        st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, _text, _text),
        st.builds(lambda d: {"type": "redacted_thinking", "data": d}, _text),
        st.builds(
            lambda i, n, args: {"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": args},
            st.integers(0, 99),
            st.sampled_from(["lookup", "get_weather"]),
            st.dictionaries(_said, _json, max_size=4),
        ),
    ),
    max_size=4,
)


def _pieces(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` cut at drawn places (at least one piece)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)] or [""]


@st.composite
def _streams(draw: st.DrawFn) -> tuple[list[bytes], str]:
    """A Messages stream of drawn blocks (deltas cut anywhere, pings between events, the
    usage's optional counts given or not), its events' line ends ``\\n`` or ``\\r\\n``,
    its bytes cut into drawn chunks; and the stop reason."""
    blocks = draw(_blocks)
    stop = draw(st.sampled_from(["end_turn", "tool_use", "max_tokens", "refusal"]))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    usage: dict[str, Any] = {"input_tokens": draw(st.integers(0, 9999)), "output_tokens": 1}
    usage |= {"cache_creation_input_tokens": None, "cache_read_input_tokens": None}
    start: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant"}
    start["model"] = "claude-x"
    start |= {"content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": start})]
    for index, block in enumerate(blocks):
        kind = block["type"]
        opening = {"text": {"type": "text", "text": ""}}.get(kind) or dict(block)
        if kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
        elif kind == "tool_use":
            opening = {**block, "input": {}}
        events.append(("content_block_start", {"index": index, "content_block": opening}))
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(draw, block["text"])]
        elif kind == "thinking":
            deltas = [
                {"type": "thinking_delta", "thinking": p} for p in _pieces(draw, block["thinking"])
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "tool_use":
            text = json.dumps(block["input"], ensure_ascii=False)  # as the API streams it
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(draw, text)]
        for delta in deltas:
            events.append(("content_block_delta", {"index": index, "delta": delta}))
            if draw(st.booleans()):
                events.append(("ping", {}))
        events.append(("content_block_stop", {"index": index}))
    given = {"output_tokens": draw(st.integers(0, 9999))}
    for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        if draw(st.booleans()):
            given[name] = draw(st.integers(0, 9999))
    delta = {"stop_reason": stop, "stop_sequence": None}
    events.append(("message_delta", {"delta": delta, "usage": given}))
    events.append(("message_stop", {}))
    raw = "".join(
        f"event: {name}{end}data: {json.dumps({'type': name, **data})}{end}{end}"
        for name, data in events
    ).encode()
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(raw) - 1)), max_size=12))))
    bounds = [0, *cuts, len(raw)]
    return [raw[a:b] for a, b in itertools.pairwise(bounds) if a < b], stop


def _by_the_sdk(raw: bytes) -> object:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=raw, headers={"content-type": "text/event-stream"})

    sdk = mock_anthropic_sdk(answer)
    asked = [{"role": "user", "content": "hi"}]
    params = {"model": "claude-x", "max_tokens": 10, "messages": asked}
    try:
        with sdk.messages.stream(**params) as stream:
            texts = [text for text in stream.text_stream if text]
            return texts, decode_message(stream.get_final_message())
    except ValueError as exc:  # a tool input that is not JSON (a lone surrogate's escape)
        return type(exc), str(exc)


def _by_parlour(chunks: list[bytes]) -> object:
    reader = StreamReader(lambda text, body: RuntimeError(text), "claude-x")
    try:
        texts = [text for chunk in chunks for text in reader.feed(chunk)]
        return texts, decode_message(reader.message())
    except UncorrectableLLMError as exc:  # the helper's ValueError, as its cause
        return type(exc.__cause__), str(exc.__cause__)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_streams())
def test_any_stream_cut_anywhere_reads_as_the_sdks_helper_reads_it(
    drawn: tuple[list[bytes], str],
) -> None:
    """The same text deltas and the same response (a failure on either side shows as the
    error's type and message, so a difference names it)."""
    chunks, _ = drawn
    assert _by_parlour(chunks) == _by_the_sdk(b"".join(chunks))


def test_an_error_event_raises_what_the_reader_was_given_with_its_body() -> None:
    reader = StreamReader(lambda text, body: RuntimeError(text, body), "m")
    start = {"type": "message_start", "message": {"model": "m", "content": [], "usage": {}}}
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    raw = f"event: message_start\ndata: {json.dumps(start)}\n\n"
    raw += f"event: error\ndata: {json.dumps(error)}\n\n"
    with pytest.raises(RuntimeError) as caught:
        list(reader.feed(raw.encode()))
    assert caught.value.args[1] == error


def test_a_stream_that_ends_before_its_message_starts_is_a_dropped_link() -> None:
    reader = StreamReader(lambda text, body: RuntimeError(text), "m")
    assert list(reader.feed(b"event: ping\ndata: {}\n\n")) == []
    with pytest.raises(RetryableLLMError, match="for model m ended before its message did"):
        reader.message()


def test_a_tool_input_cut_inside_an_escape_reads_whole_and_one_not_json_is_refused() -> None:
    """The input's pieces are joined before they are parsed, so a cut inside a surrogate
    pair's escape is no error (the SDK's helper parses each prefix); JSON that does not
    parse is refused with the helper's message."""
    start = {"type": "message_start", "message": {"model": "m", "content": [], "usage": {}}}
    block = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}

    def stream(*pieces: str) -> bytes:
        events: list[dict[str, Any]] = [start]
        events.append({"type": "content_block_start", "index": 0, "content_block": block})
        for piece in pieces:
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append({"type": "content_block_delta", "index": 0, "delta": delta})
        events.append({"type": "content_block_stop", "index": 0})
        events.append({"type": "message_stop"})
        return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)

    reader = StreamReader(lambda text, body: RuntimeError(text), "m")
    list(reader.feed(stream('{"q": "\\ud83d', '\\ude00"}')))
    assert reader.message().content[0].input == {"q": "\U0001f600"}
    reader = StreamReader(lambda text, body: RuntimeError(text), "m")
    with pytest.raises(UncorrectableLLMError, match="Unable to parse tool parameter JSON"):
        list(reader.feed(stream('{"q": ', "nope}")))
