"""A model answer whose stream a proxy closed early (at any event before the last) is a
retryable error the turn retries, and nothing of it is stored or sent back: the retry asks
exactly what the first call asked (a request that fits the SDK's request type), the answer
that then arrives whole is stored once, and a turn that runs out of retries keeps only the
user's message."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from parlour.actors import Agent, ConversationService, RetryPolicy
from parlour.runtime import Depth, OutputSize
from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.errors import RetryableLLMError
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.testing import anthropic_message, anthropic_sse, fake_spec, mock_anthropic_sdk
from tests.runtime.providers._sent_bodies import check_request

from .agent_helpers import stored

CALL = {"type": "tool_use", "id": "toolu_1", "name": "look_up", "input": {"q": "tides"}}


def look_up(q: str) -> str:
    """Look a thing up."""
    return f"found {q}"


def _events(answer: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in answer.split(b"\n\n") if event.strip()]


@pytest.mark.parametrize("answer", ["text", "tool call"])
def test_a_stream_cut_before_its_end_is_retried_and_nothing_of_it_is_stored_or_sent(
    service: ConversationService, answer: str
) -> None:
    message = (
        anthropic_message("Tides at six.")
        if answer == "text"
        else anthropic_message(content=[CALL], stop_reason="tool_use")
    )
    whole = _events(anthropic_sse(message))
    for kept in range(1, len(whole) - 1):  # every cut that leaves out message_stop
        bodies: list[dict[str, Any]] = []
        replies = [b"".join(whole[:kept]), anthropic_sse(anthropic_message("Tides at six."))]

        def server(
            request: httpx2.Request, replies: list[bytes] = replies, bodies: list[Any] = bodies
        ) -> httpx2.Response:
            bodies.append(json.loads(request.read()))
            headers = {"content-type": "text/event-stream"}
            return httpx2.Response(200, content=replies.pop(0), headers=headers)

        client = AnthropicClient(
            fake_spec(id="claude-t", provider="anthropic"), client=mock_anthropic_sdk(server)
        )
        waits: list[float] = []
        agent = Agent(
            client,
            tools=[look_up],
            objective="Answer.",
            output=OutputSize.STANDARD,
            depth=Depth.IMMEDIATE,
            sleep=waits.append,
        )
        chat = agent.chat(service, user_id="alice")
        assert chat.send("When are the tides?").text == "Tides at six."
        assert waits == [0.5], kept  # one retry, after the policy's first backoff
        for body in bodies:
            check_request("/v1/messages", body)
        assert bodies[0] == bodies[1], kept  # nothing of the cut answer was sent back
        messages = stored(service, chat.conversation_id, "alice").messages
        assert [m.role for m in messages] == ["user", "assistant"], kept
        blocks = [b for m in messages for b in m.blocks]
        assert not any(isinstance(b, ToolUseBlock | ToolResultBlock) for b in blocks), kept
        assert [b.text for b in blocks if isinstance(b, TextBlock)] == [
            "When are the tides?",
            "Tides at six.",
        ]


def test_a_turn_whose_every_stream_is_cut_fails_retryable_keeping_only_the_users_message(
    service: ConversationService,
) -> None:
    cut = b"".join(_events(anthropic_sse(anthropic_message("Tides at")))[:4])

    def server(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=cut, headers={"content-type": "text/event-stream"})

    client = AnthropicClient(
        fake_spec(id="claude-t", provider="anthropic"), client=mock_anthropic_sdk(server)
    )
    waits: list[float] = []
    agent = Agent(
        client,
        objective="Answer.",
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
        sleep=waits.append,
        retry=RetryPolicy(attempts=2, base_s=0.5),
    )
    chat = agent.chat(service, user_id="alice")
    with pytest.raises(RetryableLLMError, match="ended before its message did"):
        chat.send("When are the tides?")
    assert waits == [0.5, 1.0]
    messages = stored(service, chat.conversation_id, "alice").messages
    assert [m.role for m in messages] == ["user"]
