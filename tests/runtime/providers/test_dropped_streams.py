"""A connection lost, or a read timing out, in the middle of a streamed answer that parlour
reads itself (Anthropic's Messages, OpenAI's Chat Completions): a ``RetryableLLMError`` on
every way of calling, as when the SDK read its own stream, never a raw transport error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx2
import pytest

from parlour.runtime import ConversationContext, Depth, OutputSize
from parlour.runtime.errors import RetryableLLMError
from parlour.runtime.providers import AnthropicClient, OpenAIClient
from parlour.runtime.testing import (
    anthropic_message,
    anthropic_sse,
    fake_spec,
    openai_completion,
    openai_sse,
)

_FAILURES = {
    "reset": httpx2.ReadError("connection reset by peer"),
    "timeout": httpx2.ReadTimeout("the read timed out"),
}


def _client(provider: str, failure: Exception) -> AnthropicClient | OpenAIClient:
    if provider == "anthropic":
        raw = anthropic_sse(anthropic_message("Hello there, friend."))
    else:
        raw = openai_sse(openai_completion("Hello there, friend."))
    half = raw[: len(raw) // 2]

    def body() -> Iterator[bytes]:
        yield half
        raise failure

    async def abody() -> AsyncIterator[bytes]:
        yield half
        raise failure

    headers = {"content-type": "text/event-stream"}
    sync = httpx2.Client(
        transport=httpx2.MockTransport(
            lambda r: httpx2.Response(200, content=body(), headers=headers)
        )
    )

    async def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=abody(), headers=headers)

    loop = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    if provider == "anthropic":
        import anthropic

        spec = fake_spec(id="claude-t", provider="anthropic")
        return AnthropicClient(
            spec,
            client=anthropic.Anthropic(api_key="k", max_retries=0, http_client=sync),
            async_client=anthropic.AsyncAnthropic(api_key="k", max_retries=0, http_client=loop),
        )
    import openai

    spec = fake_spec(id="gpt-t", provider="openai")
    return OpenAIClient(
        spec,
        client=openai.OpenAI(api_key="k", max_retries=0, http_client=sync),
        async_client=openai.AsyncOpenAI(api_key="k", max_retries=0, http_client=loop),
    )


def _conversation() -> ConversationContext:
    c = ConversationContext("c1", user_id="alice")
    c.depth, c.output_declaration = Depth.IMMEDIATE, OutputSize.COMPACT
    c.add_user_message("Hello?")
    return c


@pytest.mark.parametrize("failure", sorted(_FAILURES))
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_stream_cut_mid_answer_is_retryable_on_every_way_of_calling(
    provider: str, failure: str
) -> None:
    client = _client(provider, _FAILURES[failure])
    seen: list[str] = []
    with pytest.raises(RetryableLLMError) as caught:
        asyncio.run(client.arespond(_conversation(), on_text=seen.append))
    assert isinstance(caught.value.__cause__, Exception)
    assert not isinstance(caught.value.__cause__, httpx2.TransportError)
    with pytest.raises(RetryableLLMError):
        list(client.stream(_conversation()))
    if provider == "anthropic":  # OpenAI's respond is not streamed
        with pytest.raises(RetryableLLMError):
            client.respond(_conversation())
