"""A call's body goes to the SDK client's own ``post`` (as JSON bytes to Anthropic's own
client, as the mapping to OpenAI's and to a cloud's): the request on the wire carries the
JSON and the headers the SDK's typed method (``messages.create``,
``chat.completions.create``, ``responses.create``) sends for the same body, whatever the
conversation holds, and goes to the same URL (Azure's and Vertex's included); the SDK's
retries still apply; and text the SDK escapes reaches the wire alike."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from anthropic._utils._json import openapi_dumps
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import (
    ConversationContext,
    Depth,
    IncomingMessage,
    OutgoingMessage,
    ThinkingMode,
)
from parlour.runtime.blocks import (
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from parlour.runtime.providers import (
    AnthropicClient,
    LLMResponse,
    OpenAIClient,
    OpenAIResponsesClient,
)
from parlour.runtime.providers._http import wire_json
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    anthropic_sse,
    fake_spec,
    mock_anthropic_sdk,
    mock_async_anthropic_sdk,
    mock_async_openai_sdk,
    mock_openai_sdk,
    openai_completion,
    openai_response,
)

# headers that differ between any two requests, or by how the SDK was asked for the answer
VOLATILE = {"content-length", "x-stainless-raw-response", "idempotency-key", "traceparent"}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(40))).decode()
LOOK = ToolDefinitionBlock(
    name="look_up",
    description="Looks a thing up",
    schema_json='{"type": "object", "properties": {"q": {"type": "string"}}}',
)
SPECS = {
    "anthropic": fake_spec(id="claude-test", provider="anthropic"),
    "openai": fake_spec(
        id="gpt-test", provider="openai", thinking_mode=ThinkingMode.REASONING_EFFORT
    ),
}

# text of any kind a message can hold (no lone surrogate: a message refuses one)
texts = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def conversations(draw: st.DrawFn) -> ConversationContext:
    """A conversation of 1-4 exchanges: text, images, tool calls with any JSON input and
    their results, thinking; the last turn the user's."""
    context = ConversationContext("c-posted", user_id="u")
    context.depth = Depth.IMMEDIATE
    context.output_declaration = 1_000
    context.add_tool(LOOK)
    for index in range(draw(st.integers(1, 4))):
        blocks: list[Any] = [TextBlock(text=draw(texts))]
        if draw(st.booleans()):
            blocks.append(ImageBlock(data=PNG, mime_type="image/png"))
        context.add_message(OutgoingMessage(blocks=blocks))
        answer: list[Any] = []
        if draw(st.booleans()):
            answer.append(ThinkingBlock(text=draw(texts), signature="sig"))
        answer.append(TextBlock(text=draw(texts)))
        call = draw(st.booleans())
        if call:
            arguments = json.dumps({"q": draw(json_values)})
            answer.append(ToolUseBlock(id=f"call_{index}", name="look_up", input_json=arguments))
        context.add_message(IncomingMessage(blocks=answer))
        if call:
            result = ToolResultBlock(
                tool_use_id=f"call_{index}", content=draw(texts), is_error=draw(st.booleans())
            )
            context.add_message(OutgoingMessage(blocks=[result]))
    context.add_user_message(draw(texts))
    return context


class Recorder:
    """A transport handler that keeps each request and answers from ``reply(request)``."""

    def __init__(self, reply: Callable[[Any], httpx2.Response]) -> None:
        self.requests: list[httpx2.Request] = []
        self._reply = reply

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        request.read()
        self.requests.append(request)
        return self._reply(request)

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        return self(request)


def _anthropic_reply(request: httpx2.Request) -> httpx2.Response:
    sse = anthropic_sse(anthropic_message("Fine."))
    return httpx2.Response(200, content=sse, headers={"content-type": "text/event-stream"})


def _openai_reply(answer: dict[str, Any]) -> Callable[[httpx2.Request], httpx2.Response]:
    provider = MockProvider()

    def reply(request: httpx2.Request) -> httpx2.Response:
        provider.add(answer)
        response: httpx2.Response = provider(request)  # a streamed request: as its stream
        return response

    return reply


def same_request(ours: httpx2.Request, theirs: httpx2.Request) -> None:
    assert (ours.method, str(ours.url)) == (theirs.method, str(theirs.url))
    assert json.loads(ours.content) == json.loads(theirs.content)
    kept = {k: v for k, v in ours.headers.items() if k.lower() not in VOLATILE}
    wanted = {k: v for k, v in theirs.headers.items() if k.lower() not in VOLATILE}
    assert kept == wanted


@settings(max_examples=40, deadline=None)
@given(context=conversations(), timeout=st.none() | st.floats(1, 600))
def test_anthropic_posts_what_messages_create_sends(
    context: ConversationContext, timeout: float | None
) -> None:
    ours, theirs = Recorder(_anthropic_reply), Recorder(_anthropic_reply)
    client = AnthropicClient(SPECS["anthropic"], client=mock_anthropic_sdk(ours))
    request = client.build_request(context)
    if timeout is not None:
        request = type(request)(**{**_fields(request), "timeout_s": timeout})
    client._send(request)
    body = client._body(request)
    with mock_anthropic_sdk(theirs).messages.create(stream=True, **body) as stream:
        list(stream)
    same_request(ours.requests[0], theirs.requests[0])
    assert json.loads(ours.requests[0].content)["stream"] is True


def _typed_chat(sdk: Any, body: dict[str, Any], streamed: bool) -> None:
    if not streamed:
        sdk.chat.completions.create(**body)
        return
    streaming = {"stream": True, "stream_options": {"include_usage": True}}
    with sdk.chat.completions.create(**body, **streaming) as stream:
        list(stream)


def _typed_responses(sdk: Any, body: dict[str, Any], streamed: bool) -> None:
    if not streamed:
        sdk.responses.create(**body)
        return
    with sdk.responses.create(**body, stream=True) as stream:
        list(stream)


OPENAI_WAYS = {  # the client, its answer, the SDK's typed method for the same body
    "chat completions": (OpenAIClient, openai_completion("Fine."), _typed_chat),
    "responses": (OpenAIResponsesClient, openai_response("Fine."), _typed_responses),
}


@pytest.mark.parametrize("way", sorted(OPENAI_WAYS))
@settings(max_examples=30, deadline=None)
@given(context=conversations(), streamed=st.booleans())
def test_openai_posts_what_the_typed_create_sends(
    way: str, context: ConversationContext, streamed: bool
) -> None:
    cls, answer, typed = OPENAI_WAYS[way]
    ours, theirs = Recorder(_openai_reply(answer)), Recorder(_openai_reply(answer))
    client = cls(SPECS["openai"], client=mock_openai_sdk(ours))
    request = client.build_request(context)
    if streamed:
        *_, read = client._stream(request)
    else:
        read = client._send(request)
    assert isinstance(read, LLMResponse) and read.text == "Fine."
    typed(mock_openai_sdk(theirs), client._body(request), streamed)
    same_request(ours.requests[0], theirs.requests[0])


@pytest.mark.parametrize("dialect", ["anthropic", "openai", "responses"])
def test_the_async_calls_post_what_the_async_sdk_methods_send(dialect: str) -> None:
    context = ConversationContext("c-async", user_id="u")
    context.depth, context.output_declaration = Depth.IMMEDIATE, 1_000
    context.add_tool(LOOK)
    context.add_user_message('Héllo, 世界 \u2028 "quoted" \\ back')
    if dialect == "anthropic":
        reply: Callable[[httpx2.Request], httpx2.Response] = _anthropic_reply
    else:
        answer = openai_completion("Fine.") if dialect == "openai" else openai_response("Fine.")
        reply = _openai_reply(answer)
    ours, theirs = Recorder(reply), Recorder(reply)

    async def main() -> None:
        if dialect == "anthropic":
            client: Any = AnthropicClient(
                SPECS["anthropic"], async_client=mock_async_anthropic_sdk(ours.handle)
            )
        else:
            cls = OpenAIClient if dialect == "openai" else OpenAIResponsesClient
            client = cls(SPECS["openai"], async_client=mock_async_openai_sdk(ours.handle))
        said: list[str] = []
        answer = await client.arespond(context, on_text=said.append)
        assert answer.text == "Fine." and "".join(said) == "Fine."
        body = client._body(client.preview(context))
        if dialect == "anthropic":
            sdk: Any = mock_async_anthropic_sdk(theirs.handle)
            async with await sdk.messages.create(stream=True, **body) as stream:
                _ = [event async for event in stream]
        elif dialect == "openai":
            sdk = mock_async_openai_sdk(theirs.handle)
            streaming = {"stream": True, "stream_options": {"include_usage": True}}
            async with await sdk.chat.completions.create(**body, **streaming) as stream:
                _ = [chunk async for chunk in stream]
        else:
            sdk = mock_async_openai_sdk(theirs.handle)
            async with await sdk.responses.create(**body, stream=True) as stream:
                _ = [event async for event in stream]

    asyncio.run(main())
    same_request(ours.requests[0], theirs.requests[0])


def test_the_sdks_retry_still_applies_to_a_posted_body() -> None:
    overloaded = httpx2.Response(
        529,
        json={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
        headers={"retry-after-ms": "1"},
    )
    answers = [overloaded, _anthropic_reply(None)]  # type: ignore[arg-type]
    recorder = Recorder(lambda request: answers.pop(0))
    import anthropic

    sdk = anthropic.Anthropic(
        api_key="test-key",
        max_retries=1,
        http_client=httpx2.Client(transport=httpx2.MockTransport(recorder)),
    )
    client = AnthropicClient(SPECS["anthropic"], client=sdk)
    context = ConversationContext("c-retry", user_id="u")
    context.depth, context.output_declaration = Depth.IMMEDIATE, 1_000
    context.add_user_message("Hello.")
    assert client.respond(context).text == "Fine."
    assert len(recorder.requests) == 2
    assert recorder.requests[0].content == recorder.requests[1].content
    assert recorder.requests[1].headers["x-stainless-retry-count"] == "1"


@given(st.text(max_size=40) | st.lists(st.text(max_size=8), max_size=4))
def test_wire_json_decodes_to_what_the_sdks_encoder_sends(value: Any) -> None:
    """Lone surrogates included: msgspec cannot encode them, so they go escaped, as the
    SDK's own encoder sends them."""
    body = {"model": "m", "messages": [{"role": "user", "content": value}]}
    assert json.loads(wire_json(body)) == json.loads(openapi_dumps(body))


def _fields(request: Any) -> dict[str, Any]:
    return {name: getattr(request, name) for name in request.__struct_fields__}


def _simple() -> ConversationContext:
    context = ConversationContext("c-cloud", user_id="u")
    context.depth, context.output_declaration = Depth.IMMEDIATE, 1_000
    context.add_user_message("Hello.")
    return context


def test_an_azure_client_gets_its_deployment_url_as_the_typed_method_sends_it() -> None:
    """Azure's client builds the URL from the body's model: it is given the body itself."""
    import openai

    def azure(recorder: Recorder) -> Any:
        http = httpx2.Client(transport=httpx2.MockTransport(recorder))
        return openai.AzureOpenAI(
            azure_endpoint="https://example.openai.azure.com",
            api_version="2024-06-01",
            api_key="test-key",
            max_retries=0,
            http_client=http,
        )

    reply = _openai_reply(openai_completion("Fine."))
    ours, theirs = Recorder(reply), Recorder(reply)
    client = OpenAIClient(SPECS["openai"], client=azure(ours))
    assert client.respond(_simple()).text == "Fine."
    azure(theirs).chat.completions.create(**client._body(client.preview(_simple())))
    assert "/openai/deployments/gpt-test/chat/completions" in str(ours.requests[0].url)
    same_request(ours.requests[0], theirs.requests[0])


def test_a_vertex_client_gets_its_model_url_as_the_typed_method_sends_it() -> None:
    """Vertex's client moves the model from the body into the URL: it is given the body."""
    import anthropic

    def vertex(recorder: Recorder) -> Any:
        http = httpx2.Client(transport=httpx2.MockTransport(recorder))
        return anthropic.AnthropicVertex(
            region="us-east5", project_id="p", access_token="t", max_retries=0, http_client=http
        )

    ours, theirs = Recorder(_anthropic_reply), Recorder(_anthropic_reply)
    client = AnthropicClient(SPECS["anthropic"], client=vertex(ours))
    assert client.respond(_simple()).text == "Fine."
    body = client._body(client.preview(_simple()))
    with vertex(theirs).messages.create(stream=True, **body) as stream:
        list(stream)
    assert "/models/claude-test:streamRawPredict" in str(ours.requests[0].url)
    same_request(ours.requests[0], theirs.requests[0])


def test_a_float_that_is_not_finite_goes_as_null_not_as_text_no_json_reader_takes() -> None:
    body = {"input": {"x": float("nan"), "y": float("inf"), "z": 10**30}}
    assert json.loads(wire_json(body)) == {"input": {"x": None, "y": None, "z": 10**30}}
