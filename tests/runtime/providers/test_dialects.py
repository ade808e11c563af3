"""What every dialect promises alike, run over the four (Anthropic, OpenAI's Chat
Completions and Responses, Converse) through their real SDKs: errors
map to retryable or final at the seam (HTTP statuses, dropped connections, failures in the
middle of a stream), truncation signals a retry, streaming yields text then the response,
and a missing key or SDK says what to set or install."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import httpx2
import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber

from parlour.runtime import ConversationContext, Depth, LLMClient
from parlour.runtime.errors import OutputTruncationRetry, RetryableLLMError, UncorrectableLLMError
from parlour.runtime.providers import (
    AnthropicClient,
    BedrockClient,
    OpenAIClient,
    OpenAIResponsesClient,
)
from parlour.runtime.providers._http import HttpSdkClient
from parlour.runtime.testing import (
    ConverseStreamMock,
    MockProvider,
    anthropic_message,
    anthropic_sse,
    anthropic_sse_error,
    converse_stream_events,
    dummy_bedrock_client,
    fake_spec,
    mock_anthropic_sdk,
    mock_openai_sdk,
    openai_completion,
    openai_response,
    openai_response_sse_error,
    openai_sse_error,
)

R = RetryableLLMError
F = UncorrectableLLMError


def conversation() -> ConversationContext:
    c = ConversationContext("d-1")
    c.output_declaration, c.depth = 16_000, Depth.IMMEDIATE
    c.put_main_objective("task", "Answer briefly.")
    c.add_user_message("go")
    return c


@dataclass
class Dialect:
    """One provider's client over its SDK's fake server, and how to make it answer."""

    name: str
    sdk: str  # the module an escaped exception would come from
    client: LLMClient
    answer: Callable[[str, str], None]  # text, stop reason ("end" or "max")
    fail: Callable[[int], None]  # a canned HTTP error status
    drop: Callable[[], None]  # the connection fails
    fail_mid_stream: Callable[[str], None]  # the stream starts, then fails with this kind
    last_max_tokens: Callable[[], int]


def anthropic_dialect() -> Dialect:
    handler = MockProvider()
    stops = {"end": "end_turn", "max": "max_tokens"}

    def error(status: int) -> None:
        body = {"type": "error", "error": {"type": "some_error", "message": "nope"}}
        handler.add((status, body))

    return Dialect(
        "anthropic",
        "anthropic",
        AnthropicClient(
            fake_spec(id="claude-t", provider="anthropic"), client=mock_anthropic_sdk(handler)
        ),
        lambda text, stop: handler.add(
            anthropic_sse(anthropic_message(text, stop_reason=stops[stop]))
        ),
        error,
        lambda: handler.add(httpx2.ConnectError("connection refused")),
        lambda kind: handler.add(anthropic_sse_error(kind)),
        lambda: int(handler.last_body["max_tokens"]),
    )


def openai_dialect() -> Dialect:
    handler = MockProvider()
    stops = {"end": "stop", "max": "length"}

    def answer(text: str, stop: str) -> None:
        handler.add(openai_completion(text, finish_reason=stops[stop]))

    return Dialect(
        "openai",
        "openai",
        OpenAIClient(fake_spec(id="gpt-t", provider="openai"), client=mock_openai_sdk(handler)),
        answer,
        lambda status: handler.add((status, {"error": {"message": "nope", "type": "x"}})),
        lambda: handler.add(httpx2.ConnectError("connection refused")),
        lambda kind: handler.add(openai_sse_error(kind)),
        lambda: int(handler.last_body["max_completion_tokens"]),
    )


def responses_dialect() -> Dialect:
    handler = MockProvider()

    def answer(text: str, stop: str) -> None:
        if stop == "max":
            handler.add(
                openai_response(text, status="incomplete", incomplete_reason="max_output_tokens")
            )
        else:
            handler.add(openai_response(text))

    return Dialect(
        "responses",
        "openai",
        OpenAIResponsesClient(
            fake_spec(id="gpt-t", provider="openai"), client=mock_openai_sdk(handler)
        ),
        answer,
        lambda status: handler.add((status, {"error": {"message": "nope", "type": "x"}})),
        lambda: handler.add(httpx2.ConnectError("connection refused")),
        lambda kind: handler.add(openai_response_sse_error(kind)),
        lambda: int(handler.last_body["max_output_tokens"]),
    )


# the Converse error codes that answer with each canned status
BEDROCK_CODES = {
    429: "ThrottlingException",
    529: "ServiceUnavailableException",
    500: "InternalServerException",
    400: "ValidationException",
    401: "UnrecognizedClientException",
    403: "AccessDeniedException",
}


def bedrock_dialect() -> Dialect:
    boto = dummy_bedrock_client()
    stubber = Stubber(boto)  # activated by a canned error only: it answers every call
    stream = ConverseStreamMock(boto)
    stops = {"end": "end_turn", "max": "max_tokens"}

    def answer(text: str, stop: str) -> None:
        stream.add(converse_stream_events(text, stop_reason=stops[stop]))

    def fail(status: int) -> None:
        stubber.activate()
        stubber.add_client_error(
            "converse", service_error_code=BEDROCK_CODES[status], http_status_code=status
        )

    def fail_mid_stream(kind: str) -> None:
        events = converse_stream_events("Partial")[:2]
        stream.add([*events, (kind, {"message": "trouble"})])

    return Dialect(
        "bedrock",
        "botocore",
        BedrockClient(fake_spec(id="anthropic.t-v1:0", provider="bedrock"), client=boto),
        answer,
        fail,
        lambda: stream.add(EndpointConnectionError(endpoint_url="https://bedrock.test")),
        fail_mid_stream,
        lambda: int(stream.bodies[-1]["inferenceConfig"]["maxTokens"]),
    )


MAKERS = {
    "anthropic": anthropic_dialect,
    "openai": openai_dialect,
    "responses": responses_dialect,
    "bedrock": bedrock_dialect,
}


@pytest.fixture(params=sorted(MAKERS))
def dialect(request: pytest.FixtureRequest) -> Dialect:
    return MAKERS[request.param]()


# -- the error maps ------------------------------------------------------------------------------

STATUSES = [(429, R), (529, R), (500, R), (400, F), (401, F), (403, F)]


@pytest.mark.parametrize(("status", "expected"), STATUSES)
def test_a_canned_error_status_maps_to_retryable_or_final(
    dialect: Dialect, status: int, expected: type[Exception]
) -> None:
    dialect.fail(status)
    marker = BEDROCK_CODES[status] if dialect.name == "bedrock" else f"answered {status}"
    with pytest.raises(expected, match=marker) as caught:
        dialect.client.respond(conversation())
    assert type(caught.value) is expected  # a parlour error, the SDK's kept as the cause
    assert type(caught.value.__cause__).__module__.startswith(dialect.sdk)


def test_a_dropped_connection_is_retryable(dialect: Dialect) -> None:
    dialect.drop()
    with pytest.raises(RetryableLLMError, match="could not be reached") as caught:
        dialect.client.stream(conversation()).get_final_response()
    assert type(caught.value.__cause__).__module__.startswith(dialect.sdk)


MID_STREAM = {
    "anthropic": [
        ("overloaded_error", R),
        ("api_error", R),
        ("rate_limit_error", R),
        ("invalid_request_error", F),
        ("authentication_error", F),
    ],
    "openai": [("server_error", R), ("rate_limit_exceeded", R), ("invalid_request_error", F)],
    "responses": [("server_error", R), ("rate_limit_exceeded", R), ("invalid_prompt", F)],
    "bedrock": [
        ("throttlingException", R),
        ("serviceUnavailableException", R),
        ("internalServerException", R),
        ("modelStreamErrorException", R),
        ("validationException", F),
    ],
}
MID_STREAM_CASES = [
    (name, kind, verdict) for name in MID_STREAM for kind, verdict in MID_STREAM[name]
]


@pytest.mark.parametrize(("name", "kind", "expected"), MID_STREAM_CASES)
def test_a_failure_in_the_middle_of_a_stream_maps_like_its_http_twin(
    name: str, kind: str, expected: type[Exception]
) -> None:
    dialect = MAKERS[name]()
    dialect.fail_mid_stream(kind)
    pieces: list[str] = []
    with pytest.raises(expected, match=kind) as caught:
        dialect.client.respond(conversation(), on_text=pieces.append)
    assert type(caught.value) is expected
    assert "mid-stream" in str(caught.value)
    assert "".join(pieces).startswith("Part")  # the stream had begun
    assert type(caught.value.__cause__).__module__.startswith(dialect.sdk)


def test_every_anthropic_call_streams_so_a_mid_stream_overload_retries_a_plain_respond() -> None:
    dialect = anthropic_dialect()
    dialect.fail_mid_stream("overloaded_error")
    with pytest.raises(RetryableLLMError, match="overloaded_error"):
        dialect.client.respond(conversation())


# -- the template, through each dialect ----------------------------------------------------------


def test_a_streamed_answer_yields_text_then_the_complete_response(dialect: Dialect) -> None:
    dialect.answer("Delivery at nine sharp.", "end")
    stream = dialect.client.stream(conversation())
    pieces = list(stream)
    assert len(pieces) > 1 and "".join(pieces) == "Delivery at nine sharp."
    assert stream.response.text == "Delivery at nine sharp."
    assert dialect.last_max_tokens() == 16_000


def test_a_streamed_truncation_raises_the_retry_signal(dialect: Dialect) -> None:
    dialect.answer("cut sh", "max")
    c = conversation()
    with pytest.raises(OutputTruncationRetry):
        list(dialect.client.stream(c))
    assert c.messages[-1].requested_output_tokens == 64_000  # fake_spec's ceiling


# -- construction --------------------------------------------------------------------------------

KEYED = [
    (AnthropicClient, "claude-sonnet-4-5", "ANTHROPIC_API_KEY", "anthropic"),
    (OpenAIClient, "gpt-5-mini", "OPENAI_API_KEY", "openai"),
    (OpenAIResponsesClient, "gpt-5-mini", "OPENAI_API_KEY", "openai"),
]


@pytest.mark.parametrize(("cls", "model", "env", "_"), KEYED)
def test_a_missing_key_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, cls: type[HttpSdkClient], model: str, env: str, _: str
) -> None:
    monkeypatch.delenv(env, raising=False)
    with pytest.raises(UncorrectableLLMError, match=env):
        cls(model)


@pytest.mark.parametrize(("cls", "model", "_", "sdk"), KEYED)
def test_a_missing_sdk_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, cls: type[HttpSdkClient], model: str, _: str, sdk: str
) -> None:
    monkeypatch.setitem(sys.modules, sdk, None)
    with pytest.raises(ImportError, match=rf"pip install -e '\.\[{sdk}\]' in parlour's checkout"):
        cls(model, api_key="k")
