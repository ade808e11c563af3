"""``arespond``: asyncio code gets the same request, checks and errors as ``respond``, on the
SDKs' async clients (AsyncAnthropic, AsyncOpenAI over ``httpx2.MockTransport``), boto3 on a
worker thread, and the scripted model on the loop itself."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from botocore.stub import Stubber

from parlour.runtime import ConversationContext, Depth, LLMClient
from parlour.runtime.errors import OutputTruncationRetry, RetryableLLMError, UncorrectableLLMError
from parlour.runtime.providers import AnthropicClient, BedrockClient, OpenAIClient
from parlour.runtime.testing import (
    MockProvider,
    ScriptedClient,
    anthropic_message,
    anthropic_sse_error,
    converse_response,
    dummy_bedrock_client,
    fake_spec,
    mock_anthropic_sdk,
    mock_async_anthropic_sdk,
    mock_async_openai_sdk,
    mock_openai_sdk,
    openai_completion,
    openai_sse,
    record_params,
)

ANTHROPIC = fake_spec(id="claude-t", provider="anthropic")
OPENAI = fake_spec(id="gpt-t", provider="openai")


def conversation(text: str = "How many?") -> ConversationContext:
    c = ConversationContext("as-1")
    c.output_declaration, c.depth = 16_000, Depth.IMMEDIATE
    c.put_main_objective("task", "Count carefully.")
    c.add_user_message(text)
    return c


def pair(provider: str, *replies: Any) -> tuple[LLMClient, MockProvider, MockProvider]:
    """A client whose sync SDK answers from one fake server and async SDK from another."""
    sync, concurrent = MockProvider(*replies), MockProvider(*replies)
    if provider == "anthropic":
        client: LLMClient = AnthropicClient(
            ANTHROPIC,
            client=mock_anthropic_sdk(sync),
            async_client=mock_async_anthropic_sdk(concurrent),
        )
    else:
        client = OpenAIClient(
            OPENAI, client=mock_openai_sdk(sync), async_client=mock_async_openai_sdk(concurrent)
        )
    return client, sync, concurrent


def reply(provider: str, text: str, stop: str = "end") -> Any:
    if provider == "anthropic":
        return anthropic_message(text, stop_reason={"end": "end_turn", "max": "max_tokens"}[stop])
    return openai_completion(text, finish_reason={"end": "stop", "max": "length"}[stop])


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_arespond_sends_the_same_body_as_respond_over_the_async_sdk(provider: str) -> None:
    client, sync, concurrent = pair(provider, reply(provider, "Seven."))
    assert client.respond(conversation()).text == "Seven."
    response = asyncio.run(client.arespond(conversation()))
    assert response.text == "Seven." and response.requested_output_tokens == 16_000
    assert concurrent.bodies == sync.bodies  # byte for byte the same request
    assert len(concurrent.bodies) == 1


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_arespond_streams_text_deltas_on_the_event_loop(provider: str) -> None:
    answer = reply(provider, "Seven units remain.")
    client, _, concurrent = pair(provider, openai_sse(answer) if provider == "openai" else answer)
    pieces: list[tuple[str, int]] = []

    async def main() -> str:
        loop_thread = threading.get_ident()
        result = await client.arespond(
            conversation(), on_text=lambda t: pieces.append((t, threading.get_ident()))
        )
        assert {thread for _, thread in pieces} == {loop_thread}
        return result.text

    assert asyncio.run(main()) == "Seven units remain."
    assert len(pieces) > 1 and "".join(t for t, _ in pieces) == "Seven units remain."
    assert concurrent.last_body["stream"] is True


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_an_async_truncation_raises_the_retry_signal_and_escalates(provider: str) -> None:
    client, _, _ = pair(provider, reply(provider, "cut", "max"))
    c = conversation()
    with pytest.raises(OutputTruncationRetry):
        asyncio.run(client.arespond(c))
    assert c.messages[-1].requested_output_tokens == ANTHROPIC.max_output_tokens


def test_an_async_mid_stream_overload_is_retryable() -> None:
    client, _, _ = pair("anthropic", anthropic_sse_error("overloaded_error"))
    with pytest.raises(RetryableLLMError, match="mid-stream with overloaded_error"):
        asyncio.run(client.arespond(conversation()))


def test_an_async_error_status_is_mapped_at_the_seam() -> None:
    client, _, _ = pair("openai", (401, {"error": {"message": "bad key", "type": "x"}}))
    with pytest.raises(UncorrectableLLMError, match="answered 401") as caught:
        asyncio.run(client.arespond(conversation()))
    assert type(caught.value.__cause__).__module__.startswith("openai")


def test_without_a_key_an_injected_sync_client_cannot_make_its_async_twin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    client = AnthropicClient(ANTHROPIC, client=mock_anthropic_sdk(MockProvider()))
    with pytest.raises(UncorrectableLLMError, match="ANTHROPIC_API_KEY"):
        asyncio.run(client.arespond(conversation()))


def test_bedrock_arespond_sends_on_a_worker_thread() -> None:
    boto = dummy_bedrock_client()
    seen = record_params(boto)
    threads: list[int] = []
    boto.meta.events.register(
        "provide-client-params.bedrock-runtime.Converse",
        lambda **_: threads.append(threading.get_ident()),
    )
    client = BedrockClient(fake_spec(id="anthropic.t-v1:0", provider="bedrock"), client=boto)

    async def main() -> str:
        with Stubber(boto) as stubber:
            stubber.add_response("converse", converse_response("Nine."))
            text = (await client.arespond(conversation())).text
        assert threads and threads[0] != threading.get_ident()  # the loop never blocked on it
        return text

    assert asyncio.run(main()) == "Nine."
    assert seen[0]["inferenceConfig"] == {"maxTokens": 16_000}


def test_the_scripted_model_answers_arespond_on_the_loop() -> None:
    pieces: list[str] = []
    response = asyncio.run(
        ScriptedClient(["one two"]).arespond(conversation(), on_text=pieces.append)
    )
    assert response.text == "one two" and pieces == ["one", " two"]
