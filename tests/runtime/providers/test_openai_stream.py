"""A Chat Completions stream read by parlour: for any stream the API can send, cut into
chunks anywhere, the assembled response and the text deltas are exactly those the SDK's
own typed chunks give the same assembly (the reference: the SDK over a mock transport),
and an ``error`` object mid-stream raises what the SDK raises. A whole answer read by
parlour decodes as the SDK's typed ``ChatCompletion`` does."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime.providers._openai import _StreamAssembly, decode_completion
from parlour.runtime.providers._openai_stream import ChunkReader, completion
from parlour.runtime.testing import mock_openai_sdk

_text = st.text(st.characters(), max_size=30)  # lone surrogates too: JSON escapes them
_count = st.integers(0, 99_999)


def _cut(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=3)))
    return [text[a:b] for a, b in itertools.pairwise([0, *cuts, len(text)])]


@st.composite
def _streams(draw: st.DrawFn) -> list[bytes]:
    """Chunks of a text answer and tool calls (their arguments cut anywhere), a finish
    reason, the usage chunk (with or without its details), its line ends LF or CRLF, its
    bytes cut anywhere."""
    end = draw(st.sampled_from(["\n", "\r\n"]))
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x"}
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": piece} for piece in _cut(draw, draw(_text))]
    for index in range(draw(st.integers(0, 2))):
        arguments = json.dumps(draw(st.dictionaries(_text, _text, max_size=2)))
        pieces = _cut(draw, arguments)
        head = {"index": index, "id": f"call_{index}", "type": "function"}
        first = {**head, "function": {"name": f"tool_{index}", "arguments": pieces[0]}}
        deltas.append({"tool_calls": [first]})
        deltas += [
            {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
            for piece in pieces[1:]
        ]
    finish = draw(st.sampled_from(["stop", "length", "tool_calls", "content_filter"]))
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    usage: dict[str, Any] = {"prompt_tokens": draw(_count), "completion_tokens": draw(_count)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    if draw(st.booleans()):
        usage["prompt_tokens_details"] = {"cached_tokens": draw(_count)}
        usage["completion_tokens_details"] = {"reasoning_tokens": draw(_count)}
    chunks.append({**base, "choices": [], "usage": usage})
    raw = "".join(f"data: {json.dumps(c)}{end}{end}" for c in chunks) + f"data: [DONE]{end}{end}"
    data = raw.encode()
    cuts = sorted(set(draw(st.lists(st.integers(1, len(data) - 1), max_size=10))))
    return [data[a:b] for a, b in itertools.pairwise([0, *cuts, len(data)])]


def _by_the_sdk(raw: bytes) -> object:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=raw, headers={"content-type": "text/event-stream"})

    sdk = mock_openai_sdk(answer)
    assembly, texts = _StreamAssembly("gpt-x"), []
    try:
        asked = [{"role": "user", "content": "hi"}]
        for chunk in sdk.chat.completions.create(model="gpt-x", messages=asked, stream=True):
            texts.append(assembly.feed(chunk))
    except Exception as exc:  # the SDK's APIError for an error object
        return type(exc).__name__, str(exc), getattr(exc, "body", None)
    return [t for t in texts if t], assembly.response(True)


def _by_parlour(chunks: list[bytes]) -> object:
    import openai

    request = httpx2.Request("POST", "https://api.openai.com/v1/chat/completions")
    reader = ChunkReader(lambda text, body: openai.APIError(text, request, body=body), "gpt-x")
    assembly, texts = _StreamAssembly("gpt-x"), []
    try:
        for piece in chunks:
            texts += [assembly.feed(chunk) for chunk in reader.feed(piece)]
        texts += [assembly.feed(chunk) for chunk in reader.close()]
    except Exception as exc:
        return type(exc).__name__, str(exc), getattr(exc, "body", None)
    assert reader.done
    return [t for t in texts if t], assembly.response(reader.done)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_streams())
def test_any_stream_cut_anywhere_assembles_as_the_sdks_chunks_do(chunks: list[bytes]) -> None:
    assert _by_parlour(chunks) == _by_the_sdk(b"".join(chunks))


@pytest.mark.parametrize(
    "error",
    [
        {"message": "The server is overloaded.", "type": "server_error", "code": None},
        {"type": "rate_limit_exceeded"},  # no message: the SDK's own
        "boom",
    ],
)
def test_an_error_object_mid_stream_raises_what_the_sdk_raises(error: object) -> None:
    start = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x"}
    start["choices"] = [{"index": 0, "delta": {"content": "Hal"}, "finish_reason": None}]
    raw = f"data: {json.dumps(start)}\n\ndata: {json.dumps({'error': error})}\n\n".encode()
    ours, theirs = _by_parlour([raw]), _by_the_sdk(raw)
    assert isinstance(ours, tuple) and ours[0] == "APIError"
    assert ours == theirs


@st.composite
def _completions(draw: st.DrawFn) -> dict[str, Any]:
    """A whole answer: text or none, tool calls, a refusal or none, any finish reason, the
    usage with or without its details."""
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": f"tool_{i}", "arguments": json.dumps({"q": draw(_text)})},
        }
        for i in range(draw(st.integers(0, 2)))
    ]
    message: dict[str, Any] = {"role": "assistant", "content": draw(st.none() | _text)}
    if draw(st.booleans()):  # a compatible server may leave it out
        message["refusal"] = draw(st.none() | _text)
    if calls:
        message["tool_calls"] = calls
    finish = draw(st.sampled_from(["stop", "length", "tool_calls", "content_filter"]))
    usage: dict[str, Any] = {"prompt_tokens": draw(_count), "completion_tokens": draw(_count)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    if draw(st.booleans()):
        usage["prompt_tokens_details"] = {"cached_tokens": draw(_count)}
        usage["completion_tokens_details"] = {"reasoning_tokens": draw(_count)}
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": draw(st.sampled_from(["gpt-x", "gpt-5-mini"])),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


@settings(max_examples=100, deadline=None)
@given(_completions())
def test_any_whole_answer_decodes_as_the_sdks_typed_completion(answer: dict[str, Any]) -> None:
    raw = json.dumps(answer).encode()  # a lone surrogate escaped, as a server sends it

    def reply(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=raw, headers={"content-type": "application/json"})

    typed = mock_openai_sdk(reply).chat.completions.create(model="m", messages=[])
    assert decode_completion(completion(raw)) == decode_completion(typed)


def _calls_of(deltas: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The calls a stream of these tool-call deltas (one chunk each, then a finish)
    decodes to, through the client: (id, name, arguments)."""
    from parlour.runtime import ConversationContext, Depth
    from parlour.runtime.providers import OpenAIClient
    from parlour.runtime.testing import fake_spec

    chunks = [
        {"model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]}
        for delta in deltas
    ]
    chunks.append(
        {"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    )
    raw = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            200, content=raw.encode(), headers={"content-type": "text/event-stream"}
        )

    client = OpenAIClient(fake_spec(id="gpt-t", provider="openai"), client=mock_openai_sdk(answer))
    c = ConversationContext("c1", user_id="alice")
    c.depth, c.output_declaration = Depth.IMMEDIATE, 1_000
    c.add_user_message("Look both up.")
    calls = client.respond(c, on_text=lambda text: None).tool_uses
    return [(u.id, u.name, u.input_json) for u in calls]


def _delta(index: int, call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    return {"index": index, "id": call_id, "type": "function", "function": function}


def test_calls_a_server_numbers_alike_are_told_apart_by_their_ids() -> None:
    """Ollama labels every call of a turn index 0; vLLM repeats a call's id in each of its
    chunks; OpenAI gives the id once and interleaves nothing. Each reads as its calls."""
    ollama = [
        _delta(0, "call_a", "look_up", '{"q": "a"}'),
        _delta(0, "call_b", "look_up", '{"q": "b"}'),
    ]
    assert _calls_of(ollama) == [
        ("call_a", "look_up", '{"q": "a"}'),
        ("call_b", "look_up", '{"q": "b"}'),
    ]
    vllm = [_delta(0, "call_a", "look_up", '{"q"'), _delta(0, "call_a", None, ': "a"}')]
    assert _calls_of(vllm) == [("call_a", "look_up", '{"q": "a"}')]
    openai_style = [
        _delta(0, "call_a", "look_up", '{"q"'),
        _delta(0, None, None, ': "a"}'),
        _delta(1, "call_b", "fetch", '{"u": 1'),
        _delta(1, None, None, "}"),
    ]
    assert _calls_of(openai_style) == [
        ("call_a", "look_up", '{"q": "a"}'),
        ("call_b", "fetch", '{"u": 1}'),
    ]
