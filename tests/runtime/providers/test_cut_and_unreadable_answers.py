"""What a server or a proxy sends that is not a whole answer never becomes one. A stream
closed early, at any event before the dialect's last (Anthropic's ``message_stop``, Chat
Completions' ``finish_reason`` or ``[DONE]``, the Responses API's terminal event, Converse's
``messageStop``), is a ``RetryableLLMError``, never a partial answer to store; a body that
does not read as the API documents it is an ``UncorrectableLLMError`` naming the model, on
every way of calling. Any bytes at all give an answer or a parlour error, never a bare
``KeyError`` or ``ValueError``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime import ConversationContext, Depth, OutputSize
from parlour.runtime.errors import ParlourError, RetryableLLMError, UncorrectableLLMError
from parlour.runtime.providers import (
    AnthropicClient,
    BedrockClient,
    LLMClient,
    OpenAIClient,
    OpenAIResponsesClient,
)
from parlour.runtime.testing import (
    ConverseStreamMock,
    anthropic_message,
    anthropic_sse,
    converse_stream_events,
    dummy_bedrock_client,
    fake_spec,
    mock_anthropic_sdk,
    mock_async_anthropic_sdk,
    mock_async_openai_sdk,
    mock_openai_sdk,
    openai_completion,
    openai_response,
    openai_response_sse,
    openai_sse,
)

DIALECTS = ("anthropic", "chat", "responses")
EVENT_STREAM = {"content-type": "text/event-stream"}
WHOLE = {"content-type": "application/json"}


def _client(dialect: str, body: bytes, headers: dict[str, str]) -> LLMClient:
    """A client of ``dialect`` whose every call (blocking or async) is answered ``body``."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=body, headers=headers)

    if dialect == "anthropic":
        return AnthropicClient(
            fake_spec(id="claude-t", provider="anthropic"),
            client=mock_anthropic_sdk(answer),
            async_client=mock_async_anthropic_sdk(answer),
        )
    cls = OpenAIClient if dialect == "chat" else OpenAIResponsesClient
    return cls(
        fake_spec(id="gpt-t", provider="openai"),
        client=mock_openai_sdk(answer),
        async_client=mock_async_openai_sdk(answer),
    )


def _conversation() -> ConversationContext:
    c = ConversationContext("c1", user_id="alice")
    c.depth, c.output_declaration = Depth.IMMEDIATE, OutputSize.COMPACT
    c.add_user_message("Hello?")
    return c


def _outcomes(calls: list[Callable[[], Any]]) -> list[Any]:
    """What each call returned, or the exception it raised."""
    outcomes: list[Any] = []
    for call in calls:
        try:
            outcomes.append(call())
        except Exception as exc:
            outcomes.append(exc)
    return outcomes


def _streamed_ways(client: LLMClient) -> list[Any]:
    """Each way of calling that reads the stream: the answer, or the error raised."""
    return _outcomes(
        [
            lambda: client.respond(_conversation(), on_text=lambda text: None),
            lambda: client.stream(_conversation()).get_final_response(),
            lambda: asyncio.run(client.arespond(_conversation(), on_text=lambda text: None)),
        ]
    )


def _whole_ways(client: LLMClient) -> list[Any]:
    """Each way of calling that reads a whole (non-streamed) answer."""
    return _outcomes(
        [
            lambda: client.respond(_conversation()),
            lambda: asyncio.run(client.arespond(_conversation())),
        ]
    )


def _events(dialect: str) -> list[bytes]:
    """A whole streamed answer of ``dialect``, as its events (each with its blank line)."""
    if dialect == "anthropic":
        raw = anthropic_sse(anthropic_message("Hello there, friend."))
    elif dialect == "chat":
        raw = openai_sse(openai_completion("Hello there, friend."))
    else:
        raw = openai_response_sse(openai_response("Hello there, friend."))
    return [event + b"\n\n" for event in raw.split(b"\n\n") if event.strip()]


def _whole_from(dialect: str) -> int:
    """How many of ``_events(dialect)`` make an answer whole: through ``message_stop``,
    through the chunk with a ``finish_reason``, through the terminal event."""
    events = _events(dialect)
    if dialect == "anthropic":
        return next(i for i, e in enumerate(events) if b"message_stop" in e) + 1
    if dialect == "chat":
        return next(i for i, e in enumerate(events) if b'"finish_reason": "' in e) + 1
    return next(i for i, e in enumerate(events) if b"response.completed" in e) + 1


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_stream_closed_before_its_last_event_is_retryable_on_every_way_of_calling(
    dialect: str,
) -> None:
    events = _events(dialect)
    whole = _whole_from(dialect)
    assert 2 < whole <= len(events)
    for kept in range(whole):
        client = _client(dialect, b"".join(events[:kept]), EVENT_STREAM)
        for outcome in _streamed_ways(client):
            assert isinstance(outcome, RetryableLLMError), (kept, outcome)
            assert "ended before" in str(outcome) and "for model" in str(outcome)
    for kept in range(whole, len(events) + 1):
        client = _client(dialect, b"".join(events[:kept]), EVENT_STREAM)
        for outcome in _streamed_ways(client):
            assert not isinstance(outcome, Exception), (kept, outcome)
            assert outcome.text == "Hello there, friend."


def test_a_converse_stream_closed_before_message_stop_is_retryable() -> None:
    events = converse_stream_events("Hello there, friend.")
    stop = next(i for i, (name, _) in enumerate(events) if name == "messageStop")
    spec = fake_spec(id="anthropic.claude-t-v1:0", provider="bedrock")
    for kept in range(len(events) + 1):
        boto = dummy_bedrock_client()
        ConverseStreamMock(boto, events[:kept])
        client = BedrockClient(spec, client=boto)
        if kept <= stop:
            with pytest.raises(RetryableLLMError, match="ended before its message did"):
                client.respond(_conversation(), on_text=lambda text: None)
        else:
            answer = client.respond(_conversation(), on_text=lambda text: None)
            assert answer.text == "Hello there, friend."


UNREADABLE_STREAMS = {
    "an event that is not JSON": b"event: message_start\ndata: {not json\n\n",
    "a JSON array where an object goes": b"event: message_start\ndata: [1, 2]\n\ndata: [1]\n\n",
    "a field of another type": (
        b'event: message_start\ndata: {"type": "message_start", "message": {"model": "m", '
        b'"content": 7, "usage": {}}}\n\n'
        b'data: {"model": "m", "choices": [{"delta": {"content": "a", "tool_calls": 5}}]}\n\n'
        b'data: {"type": "response.completed", "response": {"model": 5, "output": 3}}\n\n'
    ),
}


@pytest.mark.parametrize("body", sorted(UNREADABLE_STREAMS))
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_stream_that_is_not_the_apis_is_uncorrectable_and_names_the_model(
    dialect: str, body: str
) -> None:
    client = _client(dialect, UNREADABLE_STREAMS[body], EVENT_STREAM)
    for outcome in _streamed_ways(client):
        assert isinstance(outcome, ParlourError), outcome
        if not isinstance(outcome, RetryableLLMError):  # else: nothing of the API's came
            assert isinstance(outcome, UncorrectableLLMError)
            assert "answer for model" in str(outcome) and "could not be read" in str(outcome)
            assert outcome.__cause__ is not None


@pytest.mark.parametrize(
    "body",
    [b"<html>Bad gateway</html>", b"[1, 2]", b"{}", b'{"choices": []}', b'{"model": 5}'],
)
@pytest.mark.parametrize("dialect", ["chat", "responses"])
def test_a_whole_answer_that_is_not_the_apis_is_uncorrectable_and_names_the_model(
    dialect: str, body: bytes
) -> None:
    for outcome in _whole_ways(_client(dialect, body, WHOLE)):
        assert isinstance(outcome, UncorrectableLLMError), outcome
        assert "answer for model gpt-t could not be read" in str(outcome)


def test_an_exception_of_the_callers_on_text_is_its_own_not_an_unreadable_answer() -> None:
    def on_text(text: str) -> None:
        raise KeyError("the caller's own")

    for dialect in DIALECTS:
        client = _client(dialect, b"".join(_events(dialect)), EVENT_STREAM)
        with pytest.raises(KeyError, match="the caller's own"):
            client.respond(_conversation(), on_text=on_text)
        with pytest.raises(KeyError, match="the caller's own"):
            asyncio.run(client.arespond(_conversation(), on_text=on_text))


def _sse_of(values: list[Any]) -> bytes:
    return b"".join(f"data: {json.dumps(value)}\n\n".encode() for value in values)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)
events = st.fixed_dictionaries(
    {"type": st.sampled_from(["message_start", "content_block_delta", "response.completed"])},
    optional={
        "message": json_values,
        "choices": json_values,
        "delta": json_values,
        "index": json_values,
        "response": json_values,
        "model": json_values,
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dialect=st.sampled_from(DIALECTS),
    body=st.binary(max_size=200) | st.lists(json_values | events, max_size=4).map(_sse_of),
    streamed=st.booleans(),
)
def test_any_bytes_are_an_answer_or_a_parlour_error(
    dialect: str, body: bytes, streamed: bool
) -> None:
    client = _client(dialect, body, EVENT_STREAM if streamed else WHOLE)
    outcomes = _streamed_ways(client) if streamed else _whole_ways(client)
    for outcome in outcomes:
        assert not isinstance(outcome, Exception) or isinstance(outcome, ParlourError), repr(
            outcome
        )
