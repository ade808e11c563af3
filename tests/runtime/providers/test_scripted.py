"""The scripted model: declarations resolved as the real clients resolve them, and scripted
answers that call tools with arguments."""

from __future__ import annotations

import json

import pytest

from parlour.runtime import ConversationContext, Depth, OutgoingMessage, StopReason
from parlour.runtime.blocks import ToolDefinitionBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.errors import UncorrectableLLMError
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.testing import ScriptedClient, fake_spec, scripted_tool_calls

SEARCH = ToolDefinitionBlock(name="search", description="Searches", schema_json="{}")


def refusal(client: object, c: ConversationContext) -> str:
    with pytest.raises(UncorrectableLLMError) as caught:
        client.respond(c)  # type: ignore[attr-defined]
    return str(caught.value)


@pytest.mark.parametrize("declared", ["nothing", "depth only", "output only"])
def test_without_defaults_an_undeclared_seat_is_refused_as_a_real_client_refuses_it(
    declared: str,
) -> None:
    def seat() -> ConversationContext:
        c = ConversationContext("s-1")
        if declared == "depth only":
            c.depth = Depth.IMMEDIATE
        if declared == "output only":
            c.output_declaration = 1_000
        c.add_user_message("hi")
        return c

    spec = fake_spec(id="claude-t", provider="anthropic")
    real = AnthropicClient(spec, client=object())
    scripted = ScriptedClient(spec=spec, depth=None, output_declaration=None)
    message = refusal(real, seat())
    assert refusal(scripted, seat()) == message
    assert "declares no" in message


def test_a_scripted_answer_calls_tools_with_arguments() -> None:
    c = ConversationContext("s-2")
    c.add_tool(SEARCH)
    c.add_user_message("Find kettles.")
    script = [scripted_tool_calls(("search", {"q": "kettle", "limit": 3}), text="Looking.")]
    client = ScriptedClient(script)
    response = client.respond(c)
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.text == "Looking."
    assert response.tool_uses == [
        ToolUseBlock(
            id="toolu_0001_1", name="search", input_json=json.dumps({"q": "kettle", "limit": 3})
        )
    ]
    c.add_message(response.to_message())
    c.add_user_message("more")
    assert client.respond(c).text.startswith("Answer 2")  # the script ran out: the default


def test_a_scripted_call_to_a_tool_never_announced_is_refused() -> None:
    c = ConversationContext("s-3")
    c.add_user_message("Find kettles.")
    with pytest.raises(ValueError, match="calls search, which the conversation never announced"):
        ScriptedClient([scripted_tool_calls(("search", {}))]).respond(c)


def test_scripted_results_answer_through_the_default_policy() -> None:
    c = ConversationContext("s-4")
    c.add_tool(SEARCH)
    c.add_user_message("go")
    client = ScriptedClient([scripted_tool_calls(("search", {"q": "x"}))])
    c.add_message(client.respond(c).to_message())
    c.add_message(
        OutgoingMessage(blocks=[ToolResultBlock(tool_use_id="toolu_0001_1", content="3 hits")])
    )
    assert client.respond(c).text == "The tools answered: toolu_0001_1 returned 3 hits."
