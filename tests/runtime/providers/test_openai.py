"""The OpenAI dialect, on the request builder and through the real SDK over a mock
transport."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from parlour.runtime import (
    ConversationContext,
    Depth,
    IncomingMessage,
    OutgoingMessage,
    StopReason,
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
from parlour.runtime.errors import (
    OutputTruncationRetry,
    ProviderRefusalError,
)
from parlour.runtime.providers import OpenAIClient, build_openai_body
from parlour.runtime.testing import (
    MockProvider,
    fake_spec,
    mock_openai_sdk,
    openai_completion,
    openai_sse,
)

SPEC = fake_spec(id="gpt-test", provider="openai", thinking_mode=ThinkingMode.REASONING_EFFORT)
OBJECTIVE = "You answer questions about the warehouse."
TOOL = ToolDefinitionBlock(
    name="find", description="finds things", schema_json='{"type": "object", "properties": {}}'
)
Wire = Callable[[ConversationContext], dict[str, Any]]


def conversation(objective: str | None = OBJECTIVE, output: int = 16_000) -> ConversationContext:
    c = ConversationContext("o-1")
    c.output_declaration = output
    c.depth = Depth.IMMEDIATE
    if objective:
        c.put_main_objective("task", objective)
    return c


@pytest.fixture(params=["builder", "sdk"])
def wire(request: pytest.FixtureRequest) -> Wire:
    """The request body: from the credential-free builder, or as the SDK sent it."""
    if request.param == "builder":
        offline = OpenAIClient(SPEC, client=object())
        return lambda c: build_openai_body(offline.build_request(c))
    handler = MockProvider()
    client = OpenAIClient(SPEC, client=mock_openai_sdk(handler))

    def send(c: ConversationContext) -> dict[str, Any]:
        handler.add(openai_completion("ok"))
        client.respond(c)
        return handler.last_body

    return send


def sdk_client(*replies: Any) -> tuple[OpenAIClient, MockProvider]:
    handler = MockProvider(*replies)
    return OpenAIClient(SPEC, client=mock_openai_sdk(handler)), handler


def test_a_tool_is_one_function_entry_and_no_message_mentions_it(wire: Wire) -> None:
    c = conversation()
    c.add_tool(TOOL)
    c.add_user_message("Where is it?")
    body = wire(c)
    assert len(body["tools"]) == 1
    entry = body["tools"][0]
    assert entry["type"] == "function"
    assert entry["function"]["name"] == "find"
    assert entry["function"]["description"] == "finds things"
    assert entry["function"]["parameters"]["type"] == "object"
    assert "finds things" not in json.dumps(body["messages"])
    assert all("find:" not in json.dumps(m) for m in body["messages"])


def test_native_tool_calls_and_results_take_openais_shapes(wire: Wire) -> None:
    c = conversation()
    c.add_tool(TOOL)
    c.add_user_message("Find the crate.")
    arguments = '{"what":  "crate"}'
    c.add_message(
        IncomingMessage(blocks=[ToolUseBlock(id="call_1", name="find", input_json=arguments)])
    )
    c.add_message(
        OutgoingMessage(
            blocks=[
                ToolResultBlock(tool_use_id="call_1", content="aisle 4"),
                TextBlock(text="Thanks."),
            ]
        )
    )
    messages = wire(c)["messages"]
    assistant, tool, user = messages[2], messages[3], messages[4]
    assert assistant["role"] == "assistant"
    assert "content" not in assistant or assistant["content"] is None
    assert assistant["tool_calls"][0]["id"] == "call_1"
    assert assistant["tool_calls"][0]["function"]["arguments"] == arguments
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "aisle 4"}
    assert user == {"role": "user", "content": [{"type": "text", "text": "Thanks."}]}


def test_the_objective_is_the_leading_system_message_only(wire: Wire) -> None:
    c = conversation()
    c.add_message(IncomingMessage("Hello.", [TextBlock(text="Hello.")]))
    c.add_user_message("Hi.")
    messages = wire(c)["messages"]
    assert messages[0] == {"role": "system", "content": OBJECTIVE}
    assert sum(OBJECTIVE in json.dumps(m) for m in messages) == 1
    assert len(messages) == 3


def test_max_completion_tokens_books_reasoning_even_at_immediate(wire: Wire) -> None:
    c = conversation(output=16_000)
    c.add_user_message("go")
    body = wire(c)
    assert body["max_completion_tokens"] == 16_000 + SPEC.get_thinking_budget(Depth.IMMEDIATE)
    assert body["reasoning_effort"] == "minimal"
    assert "max_tokens" not in body


def test_images_travel_as_data_urls_and_thinking_stays_home(wire: Wire) -> None:
    c = conversation()
    c.add_message(
        OutgoingMessage(
            blocks=[TextBlock(text="Look:"), ImageBlock(data="aGk=", mime_type="image/png")]
        )
    )
    c.add_message(IncomingMessage(blocks=[ThinkingBlock(text="secret"), TextBlock(text="A cat.")]))
    c.add_user_message("Sure?")
    messages = wire(c)["messages"]
    assert messages[1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,aGk="},
    }
    assert messages[2] == {"role": "assistant", "content": "A cat."}


def test_cached_tokens_are_a_subset_of_the_input() -> None:
    client, _ = sdk_client(openai_completion("ok", prompt_tokens=150, cached_tokens=30))
    c = conversation()
    c.add_user_message("go")
    response = client.respond(c)
    assert response.actual_input_tokens == 150
    assert response.cache_read_input_tokens == 30
    assert response.cache_creation_input_tokens is None
    assert response.get_cache_hit_rate() == 1.0


def test_a_tool_call_answer_decodes_to_tool_use_blocks() -> None:
    call = {"id": "call_9", "name": "find", "arguments": '{"what": "box"}'}
    client, _ = sdk_client(openai_completion(None, tool_calls=[call], finish_reason="tool_calls"))
    c = conversation()
    c.add_tool(TOOL)
    c.add_user_message("Find the box.")
    response = client.respond(c)
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.tool_uses == [
        ToolUseBlock(id="call_9", name="find", input_json='{"what": "box"}')
    ]


def test_a_streamed_answer_yields_text_and_the_complete_response() -> None:
    call = {"id": "call_3", "name": "find", "arguments": "{}"}
    completion = openai_completion(
        "It is in aisle four.", tool_calls=[call], finish_reason="tool_calls", cached_tokens=4
    )
    client, handler = sdk_client(openai_sse(completion))
    c = conversation()
    c.add_tool(TOOL)
    c.add_user_message("Where?")
    stream = client.stream(c)
    pieces = list(stream)
    assert handler.last_body["stream"] is True
    assert handler.last_body["stream_options"] == {"include_usage": True}
    assert len(pieces) > 1 and "".join(pieces) == "It is in aisle four."
    response = stream.response
    assert response.blocks == [
        TextBlock(text="It is in aisle four."),
        ToolUseBlock(id="call_3", name="find", input_json="{}"),
    ]
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.cache_read_input_tokens == 4


def test_a_length_finish_is_a_truncation() -> None:
    client, _ = sdk_client(openai_completion("cut", finish_reason="length"))
    c = conversation()
    c.add_user_message("go")
    with pytest.raises(OutputTruncationRetry):
        client.respond(c)
    assert c.messages[-1].requested_output_tokens == SPEC.max_output_tokens


def test_a_refusal_message_is_a_provider_refusal() -> None:
    client, _ = sdk_client(openai_completion(None, refusal="I can't help with that."))
    c = conversation()
    c.add_user_message("go")
    with pytest.raises(ProviderRefusalError, match="can't help"):
        client.respond(c)
