"""CPU per streamed model call: what a provider SDK costs a host, against parlour's own turn.

A host behind a real model spends, per model call, the SDK's cost of building the request
and reading the answer's stream. This measures it on the Anthropic and OpenAI SDKs over a
mock transport that streams a 40-character answer in 20 text deltas (25 server-sent events
for Anthropic, as ``async_host.py`` and ``serve.py`` answer; 22 chunks for Chat
Completions), with no delay, one call at a time on one loop, CPU time
(``time.process_time``) over ``--calls`` calls after a warm-up:

- plain HTTP (the baseline): the same POST through ``httpx2`` and the stream's bytes read;
- parlour: ``AnthropicClient.arespond`` (the request built from a conversation, the SDK's
  request, the stream read by parlour's ``StreamReader``, its text deltas handed on, the
  answer decoded), as a turn calls it;
- SDK helper: ``messages.stream`` alone, its text stream read, the final message taken
  (what ``arespond`` used before);
- SDK events: ``messages.create(stream=True)``, every typed event read;
- OpenAI, parlour: ``OpenAIClient.arespond`` with its deltas taken (Chat Completions over
  the stream, read by parlour's ``ChunkReader``);
- OpenAI, SDK chunks: ``chat.completions.create(stream=True)``, every typed chunk read
  (what ``arespond`` used before);
- Responses, parlour: ``OpenAIResponsesClient.arespond`` (the Responses API's 20 text deltas
  among its other events, read by parlour);
- Responses, SDK events: ``responses.create(stream=True)``, every typed event read.

Every way sends the same conversation: one user message, or with ``--messages N`` an agent's
longer one (N messages, alternating questions and answers of a few hundred characters), the
SDK rows given parlour's body for it. The SDKs' typed methods walk the whole body on every
call (OpenAI's typed transform, Anthropic's copy), which parlour skips by posting the body's
JSON bytes through the SDK client's own ``post``.

Prints each as µs per call and as a ratio to the baseline. Compare with
``instructions.py``'s turn (about 0.8M instructions, 0.3-0.6 ms on the reference machine).

    python benchmarks/sdk_stream.py [--calls 300] [--messages 1]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2

from parlour.runtime import ConversationContext, Depth, IncomingMessage, LLMClient, OutputSize
from parlour.runtime.blocks import TextBlock
from parlour.runtime.providers import AnthropicClient, OpenAIClient, OpenAIResponsesClient
from parlour.runtime.testing import (
    anthropic_message,
    anthropic_sse,
    fake_spec,
    openai_completion,
    openai_response,
    openai_response_sse,
    openai_sse,
)

ANSWER = "The answer, streamed in twenty chunks!!"  # 40 characters: 20 deltas of 2
URL = "https://api.anthropic.com/v1/messages"

Call = Callable[[], Awaitable[object]]


def _events() -> list[bytes]:
    stream = anthropic_sse(anthropic_message(ANSWER), chunk=2)
    return [event + b"\n\n" for event in stream.split(b"\n\n") if event]


def _streamed(events: list[bytes]) -> httpx2.Response:
    async def body() -> AsyncIterator[bytes]:
        for event in events:
            yield event

    return httpx2.Response(200, content=body(), headers={"content-type": "text/event-stream"})


async def _answer(request: httpx2.Request) -> httpx2.Response:
    return _streamed(EVENTS)


async def _completion(request: httpx2.Request) -> httpx2.Response:
    return _streamed(CHUNKS)


async def _response_events(request: httpx2.Request) -> httpx2.Response:
    return _streamed(RESPONSE_EVENTS)


EVENTS = _events()
RESPONSE_EVENTS = [
    event + b"\n\n"
    for event in openai_response_sse(openai_response(ANSWER), chunk=2).split(b"\n\n")
    if event
]
CHUNKS = [
    chunk + b"\n\n"
    for chunk in openai_sse(openai_completion(ANSWER), chunk=2).split(b"\n\n")
    if chunk
]


def conversation(messages: int) -> ConversationContext:
    """A conversation of ``messages`` messages, questions and answers in turn, the last a
    question."""
    context = ConversationContext("c1", user_id="bench")
    context.depth, context.output_declaration = Depth.IMMEDIATE, OutputSize.COMPACT
    for index in range(messages - 1):
        if index % 2:
            answer = f"Answer {index}: " + "a considered reply, " * 15
            context.add_message(IncomingMessage(blocks=[TextBlock(text=answer)]))
        else:
            context.add_user_message(f"Question {index}: " + "what about this, " * 8)
    context.add_user_message("Hello.")
    return context


def _over(reply: Any, sdk_class: Any, client_class: Any, model: str, messages: int) -> Any:
    """An async SDK client and parlour's client over a mock transport that answers with
    ``reply``, and parlour's body for a conversation of ``messages`` messages."""
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(reply))
    sdk = sdk_class(api_key="bench-key", max_retries=0, http_client=http)
    spec = fake_spec(id=model, provider=client_class.module)  # the SDK's name, the provider's
    client = client_class(spec, async_client=sdk, api_key="bench-key")
    return http, sdk, client, client.encode(client.preview(conversation(messages)))


def calls(messages: int = 1) -> dict[str, Call]:
    """Each way of making the call, on one shared mock transport, for a conversation of
    ``messages`` messages."""
    import anthropic
    import openai

    http, sdk, client, params = _over(
        _answer, anthropic.AsyncAnthropic, AnthropicClient, "claude-test", messages
    )

    async def plain() -> object:
        response = await http.post(URL, json=params)
        return sum([len(chunk) async for chunk in response.aiter_bytes()])

    async def helper() -> object:
        async with sdk.messages.stream(**params) as stream:
            async for _ in stream.text_stream:
                pass
            return await stream.get_final_message()

    async def events() -> object:
        stream = await sdk.messages.create(stream=True, **params)
        return [event async for event in stream]

    _, openai_sdk, openai_client, body = _over(
        _completion, openai.AsyncOpenAI, OpenAIClient, "gpt-test", messages
    )

    async def openai_chunks() -> object:
        stream = await openai_sdk.chat.completions.create(**body, stream=True)
        return [chunk async for chunk in stream]

    _, responses_sdk, responses_client, responses_body = _over(
        _response_events, openai.AsyncOpenAI, OpenAIResponsesClient, "gpt-test", messages
    )

    async def responses_events() -> object:
        stream = await responses_sdk.responses.create(**responses_body, stream=True)
        return [event async for event in stream]

    return {
        "plain HTTP (baseline)": plain,
        "parlour (arespond)": _asked(client, messages),
        "SDK helper": helper,
        "SDK events": events,
        "OpenAI, parlour": _asked(openai_client, messages),
        "OpenAI, SDK chunks": openai_chunks,
        "Responses, parlour": _asked(responses_client, messages),
        "Responses, SDK events": responses_events,
    }


def _asked(client: LLMClient, messages: int) -> Call:
    """A turn's call of ``client``: the conversation, its deltas taken."""
    context = conversation(messages)

    async def call() -> object:
        return await client.arespond(context, on_text=lambda text: None)

    return call


async def per_call(call: Call, count: int) -> float:
    """CPU µs per call, after 20 calls of warm-up."""
    for _ in range(20):
        await call()
    start = time.process_time()
    for _ in range(count):
        await call()
    return (time.process_time() - start) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--messages", type=int, default=1, help="the conversation's messages")
    args = parser.parse_args()

    async def run() -> dict[str, float]:
        ways = calls(args.messages).items()
        return {name: await per_call(call, args.calls) for name, call in ways}

    costs = asyncio.run(run())
    base = costs["plain HTTP (baseline)"]
    print(
        f"CPU per streamed call, {args.messages} messages sent, {len(EVENTS)} events back, "
        f"{args.calls} calls"
    )
    print(f"{'way':<28}{'µs/call':>10}{'x baseline':>12}")
    for name, cost in costs.items():
        print(f"{name:<28}{cost:>10,.0f}{cost / base:>11.1f}x")


if __name__ == "__main__":
    main()
