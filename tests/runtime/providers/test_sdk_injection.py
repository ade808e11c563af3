"""Injected SDK clients: the async one alone wants no key, and the mock SDK helpers take
any transport handler (a function of a request to a response), not only ``MockProvider``."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest

from parlour.runtime import ConversationContext, Depth, OutputSize
from parlour.runtime.errors import UncorrectableLLMError
from parlour.runtime.providers import AnthropicClient, OpenAIClient
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    fake_spec,
    mock_async_anthropic_sdk,
    mock_async_openai_sdk,
    openai_completion,
)


def seat() -> ConversationContext:
    c = ConversationContext("inject-1")
    c.output_declaration = OutputSize.COMPACT
    c.depth = Depth.IMMEDIATE
    c.add_user_message("hi")
    return c


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_an_async_client_alone_wants_no_key_and_answers() -> None:
    provider = MockProvider(anthropic_message("from the async SDK"))
    spec = fake_spec(id="claude-t", provider="anthropic")
    client = AnthropicClient(spec, async_client=mock_async_anthropic_sdk(provider))
    response = asyncio.run(client.arespond(seat()))
    assert response.text == "from the async SDK"
    with pytest.raises(UncorrectableLLMError, match="ANTHROPIC_API_KEY"):
        client.respond(seat())  # the blocking client is made at its first use, from the key


def test_without_any_client_or_key_the_refusal_comes_at_construction() -> None:
    with pytest.raises(UncorrectableLLMError, match="OPENAI_API_KEY"):
        OpenAIClient(fake_spec(id="gpt-t", provider="openai"))


def test_the_mock_sdks_take_any_function_of_a_request_to_a_response() -> None:
    seen: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.url.path)
        return httpx2.Response(200, json=openai_completion("a plain handler answered"))

    spec = fake_spec(id="gpt-t", provider="openai")
    client = OpenAIClient(spec, async_client=mock_async_openai_sdk(handler))
    response: Any = asyncio.run(client.arespond(seat()))
    assert response.text == "a plain handler answered" and seen == ["/v1/chat/completions"]
