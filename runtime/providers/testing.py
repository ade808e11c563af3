"""Fakes of the providers' servers, for testing the real clients with no network.

The pattern is httpx's ``MockTransport``: the real SDK runs end to end and only the last
hop is answered here, so a test asserts on the exact wire body the SDK produced.

anthropic and openai (over ``httpx2``): ``MockProvider`` is a transport handler that records
the JSON body of every request and answers from a queue: a JSON body, a ``(status, body)``
error, the bytes of a server-sent event stream, or an exception to raise (a dropped
connection: ``httpx2.ConnectError``). ``mock_anthropic_sdk`` / ``mock_openai_sdk`` build the
SDK client over it (``mock_async_anthropic_sdk`` / ``mock_async_openai_sdk`` the async
one); ``anthropic_message``, ``anthropic_sse``, ``openai_completion`` and ``openai_sse``
build the answers; ``anthropic_sse_error`` and ``openai_sse_error`` build
a stream that fails part-way, as the servers do. The Responses endpoint's:
``openai_response`` (with ``openai_reasoning`` items), ``openai_response_sse`` and
``openai_response_sse_error`` (an ``error`` event, or ``response.failed``).

boto3 (Bedrock): ``dummy_bedrock_client`` is a real ``bedrock-runtime`` client with dummy
credentials; ``converse`` is stubbed with ``botocore.stub.Stubber`` (``converse_response``
builds a valid answer, ``record_params`` records what was sent), and ``converse_stream``
is answered by ``ConverseStreamMock`` from a before-send hook with a real AWS event-stream
body (``converse_stream_events``; an event whose type ends in ``Exception`` is sent as a
mid-stream exception).

The SDKs and httpx2 are imported only when these are used. Thread-safety: one double per
test; none is meant to be shared between threads.
"""

from ._fake_bedrock import (
    ConverseStreamMock,
    converse_response,
    converse_stream_events,
    dummy_bedrock_client,
    encode_event,
    record_params,
)
from ._fake_http import (
    MockProvider,
    anthropic_message,
    anthropic_sse,
    anthropic_sse_error,
    mock_anthropic_sdk,
    mock_async_anthropic_sdk,
    mock_async_openai_sdk,
    mock_openai_sdk,
    openai_completion,
    openai_sse,
    openai_sse_error,
)
from ._fake_responses import (
    openai_reasoning,
    openai_response,
    openai_response_sse,
    openai_response_sse_error,
)

__all__ = [
    "ConverseStreamMock",
    "MockProvider",
    "anthropic_message",
    "anthropic_sse",
    "anthropic_sse_error",
    "converse_response",
    "converse_stream_events",
    "dummy_bedrock_client",
    "encode_event",
    "mock_anthropic_sdk",
    "mock_async_anthropic_sdk",
    "mock_async_openai_sdk",
    "mock_openai_sdk",
    "openai_completion",
    "openai_reasoning",
    "openai_response",
    "openai_response_sse",
    "openai_response_sse_error",
    "openai_sse",
    "openai_sse_error",
    "record_params",
]
