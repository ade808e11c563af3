"""A conversation's tool calls reach every HTTP provider in a form it takes, whoever made
them: ids of ``[A-Za-z0-9_-]``, at most 40 characters, none twice in a request, each result
with its call's; on Anthropic a name of 1 to 200 characters and an object for the input. An
id that fits already goes as it is, and a call's id never changes as the conversation
grows (the cached prefix holds). A conversation begun on Bedrock, whose text calls are
numbered per turn, goes on through Anthropic's and OpenAI's SDKs."""

from __future__ import annotations

import json
from typing import Any

from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import (
    ConversationContext,
    Depth,
    IncomingMessage,
    OutgoingMessage,
    TurnRole,
)
from parlour.runtime._prepared import Turn
from parlour.runtime.blocks import TextBlock, ToolDefinitionBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.providers import (
    AnthropicClient,
    BedrockClient,
    LLMClient,
    OpenAIClient,
    OpenAIResponsesClient,
)
from parlour.runtime.providers._call_ids import wire_turns
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    converse_response,
    dummy_bedrock_client,
    fake_spec,
    mock_anthropic_sdk,
    mock_openai_sdk,
    openai_completion,
    openai_response,
)
from tests.runtime.providers._sent_bodies import ANTHROPIC_ID, OPENAI_ID_LIMIT, check_request
from tests.runtime.providers.test_tool_pairing_wire import (
    anthropic_pairs,
    openai_pairs,
    responses_pairs,
    restored,
)

LOOK = ToolDefinitionBlock(
    name="look_up",
    description="Looks a thing up",
    schema_json='{"type": "object", "properties": {"q": {"type": "string"}}}',
)
ids = st.one_of(
    st.sampled_from(["toolu_01A", "call_0", "look_up#1", "functions.look_up:0", "", "x" * 41]),
    st.text(max_size=60),  # any text: NUL, lone surrogates, emoji
)


def _turns(calls: list[list[str]]) -> list[Turn]:
    """One assistant turn per entry, its calls with those ids, each answered by the next
    (user) turn in the order given."""
    turns: list[Turn] = [Turn(role=TurnRole.USER, blocks=[TextBlock(text="Go.")])]
    for batch in calls:
        uses = [ToolUseBlock(id=i, name="look_up", input_json="{}") for i in batch]
        turns.append(Turn(role=TurnRole.ASSISTANT, blocks=[TextBlock(text="On it."), *uses]))
        results = [ToolResultBlock(tool_use_id=i, content=f"r{n}") for n, i in enumerate(batch)]
        turns.append(Turn(role=TurnRole.USER, blocks=[*results, TextBlock(text="And?")]))
    return turns


def _calls(turns: list[Turn]) -> list[str]:
    return [b.id for t in turns for b in t.blocks if isinstance(b, ToolUseBlock)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(ids, min_size=1, max_size=3), max_size=5))
def test_any_ids_go_allowed_unique_paired_and_stable_as_the_conversation_grows(
    calls: list[list[str]],
) -> None:
    turns = _turns(calls)
    wired = wire_turns(turns)
    sent = _calls(wired)
    assert all(ANTHROPIC_ID.fullmatch(i) and len(i) <= OPENAI_ID_LIMIT for i in sent), sent
    assert len(set(sent)) == len(sent)
    for asked, answered in zip(wired[1::2], wired[2::2], strict=True):
        uses = [b.id for b in asked.blocks if isinstance(b, ToolUseBlock)]
        results = [b for b in answered.blocks if isinstance(b, ToolResultBlock)]
        assert [r.tool_use_id for r in results] == uses  # each result still its call's
        assert [r.content for r in results] == [f"r{n}" for n in range(len(uses))]
    for end in range(len(turns) + 1):  # a shorter conversation sends the same ids
        assert _calls(wire_turns(turns[:end])) == sent[: len(_calls(turns[:end]))]
    originals = _calls(turns)
    if all(ANTHROPIC_ID.fullmatch(i) and len(i) <= 40 for i in originals) and len(
        set(originals)
    ) == len(originals):
        assert wired is turns  # nothing to rename: the turns go as they are


def _conversation() -> ConversationContext:
    c = ConversationContext("failover", user_id="alice")
    c.output_declaration, c.depth = 1_000, Depth.IMMEDIATE
    c.put_main_objective("task", "You answer questions about the harbour.")
    c.add_tool(LOOK)
    return c


def _begun_on_bedrock() -> ConversationContext:
    """Two turns on Bedrock, each calling look_up once: ``look_up#1`` both times."""
    c = _conversation()
    boto = dummy_bedrock_client()
    bedrock = BedrockClient(
        fake_spec(id="anthropic.claude-t-v1:0", provider="bedrock"), client=boto
    )
    envelope = json.dumps({"tool_calls": [{"name": "look_up", "input": {"q": "tides"}}]})
    with Stubber(boto) as stubber:
        for ask in ("When is high tide?", "And low tide?"):
            c.add_user_message(ask)
            stubber.add_response("converse", converse_response(envelope))
            answer = bedrock.respond(c)
            c.add_message(answer.to_message())
            [use] = answer.tool_uses
            c.add_message(
                OutgoingMessage(blocks=[ToolResultBlock(tool_use_id=use.id, content="9")])
            )
    assert _calls([Turn(role=TurnRole.ASSISTANT, blocks=m.blocks) for m in c.messages]) == [
        "look_up#1",
        "look_up#1",
    ]
    return c


def _http_clients() -> dict[str, tuple[LLMClient, MockProvider]]:
    """Each HTTP dialect's client over its SDK's double, answering once."""
    said = "High at nine, low at three."
    made: dict[str, tuple[LLMClient, MockProvider]] = {}
    for name, cls, provider, sdk, answer in (
        ("anthropic", AnthropicClient, "anthropic", mock_anthropic_sdk, anthropic_message),
        ("chat", OpenAIClient, "openai", mock_openai_sdk, openai_completion),
        ("responses", OpenAIResponsesClient, "openai", mock_openai_sdk, openai_response),
    ):
        server = MockProvider()
        server.add(answer(said))
        spec = fake_spec(id=f"{provider}-t", provider=provider)
        made[name] = (cls(spec, client=sdk(server)), server)
    return made


RULES = {"anthropic": anthropic_pairs, "chat": openai_pairs, "responses": responses_pairs}
ENDPOINTS = {"anthropic": "/v1/messages", "chat": "/chat/completions", "responses": "/responses"}


def test_a_conversation_begun_on_bedrock_goes_on_through_every_http_provider() -> None:
    for name, (client, provider) in _http_clients().items():
        c = restored(_begun_on_bedrock())  # as another host's agent loads it from the store
        c.add_user_message("Thanks. Both again?")
        assert client.respond(c).text == "High at nine, low at three."
        [body] = provider.bodies
        check_request(ENDPOINTS[name], body)
        pairs = RULES[name](body)
        assert [text for _, text, _ in pairs] == ["9", "9"]


def test_anthropic_gets_an_object_for_any_arguments_and_a_name_it_takes() -> None:
    odd = {
        "{not json": {},
        "": {},
        "[1, 2]": {},
        '"text"': {},
        "null": {},
        '{"q": "tides"}': {"q": "tides"},
    }
    c = _conversation()
    c.add_user_message("Look things up.")
    uses = [
        ToolUseBlock(id=f"call_{n}", name=name, input_json=arguments)
        for n, (arguments, name) in enumerate(
            zip(odd, ["look_up", "", "x" * 300, *["look_up"] * 3], strict=True)
        )
    ]
    c.add_message(IncomingMessage(blocks=uses))
    results = [ToolResultBlock(tool_use_id=u.id, content="no", is_error=True) for u in uses]
    c.add_message(OutgoingMessage(blocks=results))
    provider = MockProvider()
    provider.add(anthropic_message("Done."))
    client = AnthropicClient(
        fake_spec(id="claude-t", provider="anthropic"), client=mock_anthropic_sdk(provider)
    )
    client.respond(c)
    [body] = provider.bodies
    check_request("/v1/messages", body)
    anthropic_pairs(body)
    sent: list[dict[str, Any]] = [
        p for m in body["messages"] for p in m["content"] if p["type"] == "tool_use"
    ]
    assert [p["input"] for p in sent] == list(odd.values())
    assert [p["name"] for p in sent] == ["look_up", "unnamed_tool", "x" * 200, *["look_up"] * 3]
