"""The Anthropic dialect, on the request builder and through the real SDK over a mock
transport."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from parlour.runtime import (
    ConversationContext,
    Depth,
    IncomingMessage,
    ModelBinding,
    OutgoingMessage,
    OutputSize,
    PojoResponseHandler,
    StopReason,
    TokenCounter,
    respond_with_truncation_retry,
)
from parlour.runtime.blocks import (
    FileBlock,
    ImageBlock,
    RedactedThinkingBlock,
    SkillBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from parlour.runtime.errors import (
    ProviderRefusalError,
    UncorrectableLLMError,
)
from parlour.runtime.providers import AnthropicClient, build_anthropic_params
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    anthropic_sse,
    fake_spec,
    mock_anthropic_sdk,
)

SPEC = fake_spec(id="claude-test", provider="anthropic")
OBJECTIVE = "You audit invoices with great care."
TOOL = ToolDefinitionBlock(
    name="lookup_inventory",
    description="Looks up stock levels",
    schema_json='{"type": "object", "properties": {"sku": {"type": "string"}}}',
)
Wire = Callable[[ConversationContext], dict[str, Any]]


def conversation(objective: str | None = OBJECTIVE, *, output: int = 16_000) -> ConversationContext:
    c = ConversationContext("a-1")
    c.output_declaration = output
    c.depth = Depth.IMMEDIATE
    if objective:
        c.put_main_objective("task", objective)
    return c


@pytest.fixture(params=["builder", "sdk"])
def wire(request: pytest.FixtureRequest) -> Wire:
    """The request body: from the credential-free builder, or as the SDK sent it."""
    return wire_for(SPEC, request.param)


def wire_for(spec: Any, mode: str) -> Wire:
    if mode == "builder":
        offline = AnthropicClient(spec, client=object())  # no key, no SDK client
        return lambda c: build_anthropic_params(offline.build_request(c))
    handler = MockProvider()
    client = AnthropicClient(spec, client=mock_anthropic_sdk(handler))

    def send(c: ConversationContext) -> dict[str, Any]:
        handler.add(anthropic_message("ok"))
        client.respond(c)
        return handler.last_body

    return send


def markers(body: dict[str, Any]) -> int:
    return json.dumps(body).count('"cache_control"')


def marked_texts(body: dict[str, Any]) -> list[str]:
    return [
        part.get("text", part["type"])
        for m in body["messages"]
        for part in m["content"]
        if "cache_control" in part
    ]


def flagged_turns(c: ConversationContext, count: int) -> None:
    for n in range(1, count + 1):
        c.add_user_message(f"turn {n}").set_cache(True)


# -- routing and tools ---------------------------------------------------------------------------


def test_a_tool_travels_only_in_the_tools_parameter(wire: Wire) -> None:
    c = conversation()
    c.add_tool(TOOL)
    c.add_user_message("How many left?")
    body = wire(c)
    assert [t["name"] for t in body["tools"]] == ["lookup_inventory"]
    assert body["tools"][0]["input_schema"]["properties"] == {"sku": {"type": "string"}}
    assert "lookup_inventory" not in json.dumps(body["system"])
    assert "lookup_inventory" not in json.dumps(body["messages"])


def test_the_objective_is_only_in_system_and_roles_are_kept(wire: Wire) -> None:
    c = conversation()
    c.add_user_message("Question")
    c.add_message(IncomingMessage("Answer", [TextBlock(text="Answer")]))
    c.add_user_message("Follow-up")
    body = wire(c)
    assert json.dumps(body["system"]).count(OBJECTIVE) == 1
    assert OBJECTIVE not in json.dumps(body["messages"])
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


def test_two_user_turns_are_never_merged(wire: Wire) -> None:
    c = conversation()
    c.add_user_message("first")
    c.add_user_message("second")
    body = wire(c)
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "first"}]},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
    ]


# -- cache breakpoints ---------------------------------------------------------------------------


def test_six_flagged_turns_with_a_cached_objective_use_exactly_four_markers(wire: Wire) -> None:
    c = conversation()
    flagged_turns(c, 6)
    body = wire(c)
    assert markers(body) == 4
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert marked_texts(body) == ["turn 1", "turn 2", "turn 3"]


def test_an_uncached_objective_leaves_four_breakpoints_to_the_turns(wire: Wire) -> None:
    c = conversation()
    c.set_cache_main_objective(False)
    flagged_turns(c, 6)
    body = wire(c)
    assert "cache_control" not in json.dumps(body["system"])
    assert marked_texts(body) == ["turn 1", "turn 2", "turn 3", "turn 4"]


def test_an_empty_objective_takes_no_breakpoint(wire: Wire) -> None:
    c = conversation(objective=None)
    flagged_turns(c, 6)
    body = wire(c)
    assert "system" not in body
    assert marked_texts(body) == ["turn 1", "turn 2", "turn 3", "turn 4"]


@pytest.mark.parametrize("mode", ["builder", "sdk"])
def test_a_model_without_caching_gets_no_markers(mode: str) -> None:
    send = wire_for(
        fake_spec(id="claude-test", provider="anthropic", supports_prompt_caching=False), mode
    )
    c = conversation()
    flagged_turns(c, 3)
    assert markers(send(c)) == 0


def test_only_the_first_text_block_of_a_turn_anchors(wire: Wire) -> None:
    c = conversation()
    image = ImageBlock(data="aGk=", mime_type="image/png")
    c.add_message(
        OutgoingMessage(blocks=[image, TextBlock(text="a"), TextBlock(text="b")], cache=True)
    )
    body = wire(c)
    content = body["messages"][0]["content"]
    assert "cache_control" not in content[0]
    assert content[1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in content[2]


def test_turns_without_text_spend_no_breakpoint(wire: Wire) -> None:
    c = conversation()
    image = ImageBlock(data="aGk=", mime_type="image/png")
    call = ToolUseBlock(id="toolu_1", name="lookup_inventory", input_json='{"sku": "A"}')
    c.add_message(OutgoingMessage(blocks=[image], cache=True))
    c.add_message(
        IncomingMessage(blocks=[ThinkingBlock(text="hm", signature="s"), call], cache=True)
    )
    c.add_message(
        OutgoingMessage(blocks=[ToolResultBlock(tool_use_id="toolu_1", content="7")], cache=True)
    )
    flagged_turns(c, 3)
    body = wire(c)
    assert marked_texts(body) == ["turn 1", "turn 2", "turn 3"]
    assert markers(body) == 4


def test_a_skill_block_can_anchor_a_breakpoint(wire: Wire) -> None:
    c = conversation()
    image = ImageBlock(data="aGk=", mime_type="image/png")
    skill = SkillBlock(name="triage", body="Sort by urgency.")
    c.add_message(OutgoingMessage(blocks=[image, skill, TextBlock(text="go")], cache=True))
    content = wire(c)["messages"][0]["content"]
    assert content[1]["text"].startswith("Skill triage")
    assert content[1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in content[2]


def test_unflagged_turns_are_never_marked(wire: Wire) -> None:
    c = conversation()
    c.add_user_message("plain one")
    c.add_user_message("flagged").set_cache(True)
    c.add_user_message("plain two")
    body = wire(c)
    assert marked_texts(body) == ["flagged"]


def test_skills_precede_the_objective_and_only_the_last_system_block_is_marked(
    wire: Wire,
) -> None:
    c = conversation()
    c.put_main_objective("task", "OBJECTIVE-TEXT")
    c.admit_skill(SkillBlock(name="citations", body="Cite every claim."))
    c.admit_skill(SkillBlock(name="citations", body="a duplicate name is ignored"))
    c.add_user_message("hello")
    system = wire(c)["system"]
    assert [b["text"] for b in system] == [
        "Skill citations:\nCite every claim.",
        "OBJECTIVE-TEXT",
    ]
    assert [b.get("cache_control") for b in system] == [None, {"type": "ephemeral"}]


def test_a_skill_admitted_after_the_freeze_rides_the_stream(wire: Wire) -> None:
    c = conversation()
    c.put_main_objective("task", "OBJECTIVE-TEXT")
    c.add_user_message("hello")
    c.prepare_messages_for_llm()  # the head freezes
    c.admit_skill(SkillBlock(name="late", body="Late instructions."))
    body = wire(c)
    assert [b["text"] for b in body["system"]] == ["OBJECTIVE-TEXT"]
    assert body["messages"][-1]["content"][0]["text"] == "Skill late:\nLate instructions."
    restored = c.to_snapshot().to_conversation()
    assert [s.name for s in restored.admitted_skills()] == ["late"]
    assert len(restored.prepare_messages_for_llm().skills) == 0  # said once, in the stream


# -- thinking, budgets, usage --------------------------------------------------------------------


def test_thinking_and_redacted_thinking_are_echoed_verbatim(wire: Wire) -> None:
    c = conversation()
    c.add_user_message("think")
    c.add_message(
        IncomingMessage(
            blocks=[
                ThinkingBlock(text="Let me see.", signature="sig-abc=="),
                RedactedThinkingBlock(data="opaque-bytes"),
                TextBlock(text="Done."),
            ]
        )
    )
    c.add_user_message("next")
    assistant = wire(c)["messages"][1]["content"]
    assert assistant[0] == {"type": "thinking", "thinking": "Let me see.", "signature": "sig-abc=="}
    assert assistant[1] == {"type": "redacted_thinking", "data": "opaque-bytes"}


def test_max_tokens_is_the_declared_budget_at_immediate(wire: Wire) -> None:
    c = conversation(output=16_000)
    c.add_user_message("go")
    body = wire(c)
    assert body["max_tokens"] == 16_000
    assert "thinking" not in body


def test_thinking_depth_books_its_budget_in_max_tokens(wire: Wire) -> None:
    c = conversation(output=16_000)
    c.depth = Depth.STANDARD
    c.add_user_message("go")
    body = wire(c)
    assert body["max_tokens"] == 16_000 + SPEC.get_thinking_budget(Depth.STANDARD)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8_000}


def sdk_client(*replies: Any) -> tuple[AnthropicClient, MockProvider]:
    handler = MockProvider(*replies)
    return AnthropicClient(SPEC, client=mock_anthropic_sdk(handler)), handler


def test_usage_is_additive_with_cache_counters() -> None:
    client, _ = sdk_client(
        anthropic_message("ok", input_tokens=100, cache_creation=20, cache_read=30, output_tokens=5)
    )
    c = conversation()
    c.add_user_message("go")
    response = client.respond(c)
    assert response.actual_input_tokens == 150
    assert (response.cache_creation_input_tokens, response.cache_read_input_tokens) == (20, 30)
    assert response.output_tokens == 5
    assert response.get_cache_hit_rate() == 0.6


def test_a_native_tool_call_comes_back_under_the_providers_id_and_is_echoed() -> None:
    call = {"type": "tool_use", "id": "toolu_01", "name": "lookup_inventory", "input": {"sku": "A"}}
    client, handler = sdk_client(
        anthropic_message(None, content=[call], stop_reason="tool_use"), anthropic_message("7 left")
    )
    c = conversation()
    c.add_tool(TOOL)
    c.add_user_message("How many?")
    response = client.respond(c)
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.tool_uses == [
        ToolUseBlock(id="toolu_01", name="lookup_inventory", input_json='{"sku": "A"}')
    ]
    c.add_message(response.to_message())
    c.add_message(OutgoingMessage(blocks=[ToolResultBlock(tool_use_id="toolu_01", content="7")]))
    client.respond(c)
    messages = handler.last_body["messages"]
    assert messages[1]["content"] == [call]
    assert messages[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_01",
        "content": "7",
        "is_error": False,
    }


def test_a_streamed_answer_yields_text_and_the_complete_response() -> None:
    thinking = {"type": "thinking", "thinking": "Checking.", "signature": "sig=="}
    message = anthropic_message("Seven units remain.", content=[thinking], output_tokens=9)
    client, handler = sdk_client(anthropic_sse(message))
    c = conversation()
    c.add_user_message("How many?")
    pieces: list[str] = []
    response = client.respond(c, on_text=pieces.append)
    assert handler.last_body["stream"] is True
    assert handler.last_body["max_tokens"] == 16_000
    assert len(pieces) > 1 and "".join(pieces) == "Seven units remain."
    assert response.blocks == [
        ThinkingBlock(text="Checking.", signature="sig=="),
        TextBlock(text="Seven units remain."),
    ]
    assert response.output_tokens == 9


def test_the_retry_helper_resends_at_the_ceiling() -> None:
    client, handler = sdk_client(
        anthropic_message("cut sh", stop_reason="max_tokens"), anthropic_message("whole")
    )
    c = conversation(output=16_000)
    c.add_user_message("go")
    assert respond_with_truncation_retry(client, c).text == "whole"
    assert [b["max_tokens"] for b in handler.bodies] == [16_000, SPEC.max_output_tokens]


def test_a_refusal_on_the_wire_is_a_provider_refusal() -> None:
    details = {
        "type": "refusal",
        "category": "reasoning_extraction",
        "explanation": "This request was blocked",
    }
    client, _ = sdk_client(anthropic_message(None, stop_reason="refusal", stop_details=details))
    c = conversation()
    c.add_user_message("show me your thoughts")
    with pytest.raises(ProviderRefusalError) as caught:
        client.respond(c)
    assert caught.value.category == "reasoning_extraction"
    assert caught.value.explanation == "This request was blocked"


# -- errors, keys, counting ----------------------------------------------------------------------


def test_exact_token_counts_come_from_the_count_tokens_endpoint() -> None:
    client, handler = sdk_client({"input_tokens": 1234})
    assert isinstance(client, TokenCounter)  # the same interface as the local estimate
    c = conversation()
    c.add_user_message("count me")
    assert client.count_tokens(c) == 1234
    assert handler.requests[-1].url.path == "/v1/messages/count_tokens"
    assert "max_tokens" not in handler.last_body
    assert handler.last_body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "count me"}]}
    ]
    assert not c.is_frozen() and c.model_binding is None


def test_a_conversation_bound_elsewhere_is_refused() -> None:
    client, _ = sdk_client()
    c = conversation()
    c.set_model_binding(ModelBinding.resolved(fake_spec(id="gpt-x", provider="openai")))
    c.add_user_message("go")
    with pytest.raises(UncorrectableLLMError, match="speaks anthropic"):
        client.respond(c)


def test_the_rung_declaration_reaches_the_wire() -> None:
    client, handler = sdk_client(anthropic_message("ok"))
    c = conversation()
    c.output_declaration = OutputSize.COMPACT
    c.add_user_message("go")
    client.respond(c)
    assert handler.last_body["max_tokens"] == SPEC.get_output_budget(OutputSize.COMPACT)


# -- the API's own rules -------------------------------------------------------------------------


@pytest.mark.parametrize("mime", ["text/plain", "text/markdown", "text/csv"])
def test_a_text_file_is_sent_as_the_plain_text_document_source(wire: Wire, mime: str) -> None:
    c = conversation()
    notes = base64.b64encode("Ship on Friday. ✓".encode()).decode()
    c.add_message(
        OutgoingMessage(
            blocks=[TextBlock(text="Read:"), FileBlock(data=notes, mime_type=mime, filename="n.md")]
        )
    )
    document = wire(c)["messages"][0]["content"][1]
    assert document == {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "Ship on Friday. ✓"},
    }


def test_a_pdf_stays_the_base64_document_source(wire: Wire) -> None:
    c = conversation()
    c.add_message(OutgoingMessage(blocks=[FileBlock(data="JVBE", mime_type="application/pdf")]))
    assert wire(c)["messages"][0]["content"][0]["source"] == {
        "type": "base64",
        "media_type": "application/pdf",
        "data": "JVBE",
    }


@pytest.mark.parametrize(
    ("mime", "data", "refusal"),
    [
        (
            "application/msword",
            "aGk=",
            r"PDF or plain text, and file 'x\.doc' is application/msword",
        ),
        ("text/plain", base64.b64encode(b"\xff\xfe").decode(), r"not base64 of UTF-8 text"),
    ],
)
def test_a_file_the_api_cannot_take_is_refused_before_anything_is_sent(
    mime: str, data: str, refusal: str
) -> None:
    client, handler = sdk_client()
    c = conversation()
    c.add_message(OutgoingMessage(blocks=[FileBlock(data=data, mime_type=mime, filename="x.doc")]))
    with pytest.raises(ValueError, match=f"Conversation a-1: .*{refusal}"):
        client.respond(c)
    assert handler.bodies == []


def test_an_image_jpg_type_is_sent_as_image_jpeg(wire: Wire) -> None:
    c = conversation()
    c.add_message(OutgoingMessage(blocks=[ImageBlock(data="aGk=", mime_type="image/jpg")]))
    assert wire(c)["messages"][0]["content"][0]["source"]["media_type"] == "image/jpeg"


def test_empty_text_is_never_sent(wire: Wire) -> None:
    c = conversation()
    c.add_user_message("")
    c.add_message(
        OutgoingMessage(blocks=[TextBlock(text="  "), TextBlock(text="real")], cache=True)
    )
    assert wire(c)["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "real", "cache_control": {"type": "ephemeral"}}],
        }
    ]


# -- counting exactly what is sent ---------------------------------------------------------------


class Verdict(msgspec.Struct):
    approved: bool


def test_count_tokens_counts_exactly_the_body_messages_create_sends() -> None:
    client, handler = sdk_client({"input_tokens": 321}, anthropic_message('{"approved": true}'))
    c = conversation()
    c.depth = Depth.STANDARD  # thinking on: its config is part of the count
    c.add_tool(TOOL)
    c.add_message(OutgoingMessage("Approve?", response_handler=PojoResponseHandler(Verdict)))
    assert client.count_tokens(c) == 321
    assert not c.is_frozen() and c.model_binding is None
    client.respond(c)
    counted, sent = handler.bodies
    assert {k: v for k, v in sent.items() if k not in ("max_tokens", "stream")} == counted
    assert "thinking" in counted and "tools" in counted
    assert "approved" in json.dumps(counted["messages"])  # the response instructions


def test_count_tokens_on_a_frozen_conversation_counts_a_late_tool_as_it_will_be_sent() -> None:
    client, handler = sdk_client(
        anthropic_message("ok"), {"input_tokens": 9}, anthropic_message("ok")
    )
    c = conversation()
    c.add_user_message("hello")
    c.add_message(client.respond(c).to_message())
    c.add_tool(TOOL)  # after the freeze: announced in the stream, not in the head
    c.add_user_message("and now?")
    before = list(c.messages)
    client.count_tokens(c)
    assert c.messages == before  # counting appended no announcement
    client.respond(c)
    counted, sent = handler.bodies[1:]
    assert {k: v for k, v in sent.items() if k not in ("max_tokens", "stream")} == counted
    assert "Additional tools now available" in json.dumps(counted["messages"])
