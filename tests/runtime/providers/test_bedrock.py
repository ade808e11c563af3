"""The Bedrock Converse dialect: the request builder, boto3 under ``Stubber`` (request and
response validated against the service model) and ``converse_stream`` through a
before-send hook."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.stub import Stubber
from hypothesis import given
from hypothesis import strategies as st

from parlour.runtime import (
    TOOL_WEIGHT_GUIDANCE,
    ConversationContext,
    Depth,
    IncomingMessage,
    OutgoingMessage,
    StopReason,
    WireRequest,
)
from parlour.runtime.blocks import (
    FileBlock,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from parlour.runtime.errors import OutputTruncationRetry
from parlour.runtime.providers import (
    DEFAULT_USER_OPENER,
    BedrockClient,
    build_converse_request,
    parse_tool_calls,
)
from parlour.runtime.providers._converse import document_name
from parlour.runtime.testing import (
    ConverseStreamMock,
    converse_response,
    converse_stream_events,
    dummy_bedrock_client,
    fake_spec,
    record_params,
)

SPEC = fake_spec(id="anthropic.claude-test-v1:0", provider="bedrock", supports_prompt_caching=False)
OBJECTIVE = "You schedule deliveries."
TOOL = ToolDefinitionBlock(name="get_time", description="The current time", schema_json="{}")
Wire = Callable[[ConversationContext], dict[str, Any]]


def conversation(objective: str | None = OBJECTIVE, output: int = 16_000) -> ConversationContext:
    c = ConversationContext("b-1")
    c.output_declaration = output
    c.depth = Depth.IMMEDIATE
    if objective:
        c.put_main_objective("task", objective)
    return c


@pytest.fixture
def stubbed() -> Iterator[tuple[BedrockClient, Stubber, list[dict[str, Any]]]]:
    boto = dummy_bedrock_client()
    seen = record_params(boto)
    with Stubber(boto) as stubber:
        yield BedrockClient(SPEC, client=boto), stubber, seen
        stubber.assert_no_pending_responses()


@pytest.fixture(params=["builder", "stubber", "stream"])
def wire(request: pytest.FixtureRequest) -> Iterator[Wire]:
    """The request: from the builder, as boto3 validated it, or as the JSON body it sent."""
    if request.param == "builder":
        offline = BedrockClient(SPEC, client=object())
        yield lambda c: build_converse_request(offline.build_request(c))
        return
    boto = dummy_bedrock_client()
    client = BedrockClient(SPEC, client=boto)
    if request.param == "stream":
        mock = ConverseStreamMock(boto)

        def streamed(c: ConversationContext) -> dict[str, Any]:
            mock._answers.append(converse_stream_events("ok"))
            client.stream(c).get_final_response()
            return mock.bodies[-1]

        yield streamed
        return
    seen = record_params(boto)
    with Stubber(boto) as stubber:

        def send(c: ConversationContext) -> dict[str, Any]:
            stubber.add_response("converse", converse_response("ok"))
            client.respond(c)
            return seen[-1]

        yield send


def texts(turns: list[dict[str, Any]]) -> str:
    return json.dumps([part.get("text") for m in turns for part in m["content"]])


def test_tools_travel_as_text_once_in_the_system_after_the_instructions(wire: Wire) -> None:
    c = conversation()
    c.add_tool(TOOL)
    c.add_user_message("What time is it?")
    body = wire(c)
    assert "toolConfig" not in body
    system = "".join(block["text"] for block in body["system"])
    assert system.count("get_time: The current time") == 1
    assert system.index(OBJECTIVE) < system.index("get_time: The current time")
    assert "get_time" not in texts(body["messages"])


def test_the_objective_is_only_in_the_system_blocks(wire: Wire) -> None:
    c = conversation()
    c.add_user_message("Plan it.")
    c.add_message(IncomingMessage("Planned.", [TextBlock(text="Planned.")]))
    c.add_user_message("Thanks.")
    body = wire(c)
    assert json.dumps(body["system"]).count(OBJECTIVE) == 1
    assert OBJECTIVE not in texts(body["messages"])


def test_two_user_turns_are_one_wire_message_keeping_their_blocks_in_order(wire: Wire) -> None:
    # Converse refuses roles that do not alternate, so same-role turns share one message
    c = conversation()
    c.add_user_message("first")
    c.add_user_message("second")
    assert wire(c)["messages"] == [
        {"role": "user", "content": [{"text": "first"}, {"text": "second"}]}
    ]


def test_max_tokens_is_capped_at_the_models_ceiling(wire: Wire) -> None:
    c = conversation(output=4 * SPEC.max_output_tokens)
    c.add_user_message("Everything, please.")
    assert wire(c)["inferenceConfig"] == {"maxTokens": SPEC.max_output_tokens}


def test_a_late_tool_and_tool_traffic_ride_the_turns_as_text(wire: Wire) -> None:
    c = conversation()
    c.add_user_message("hello")
    c.prepare_messages_for_llm()  # the first render freezes the head
    c.add_tool(TOOL)
    c.add_message(
        IncomingMessage(
            blocks=[
                TextBlock(text='{"tool_calls": [{"name": "get_time"}]}'),
                ToolUseBlock(id="get_time#1", name="get_time", input_json="{}"),
            ]
        )
    )
    c.add_message(
        OutgoingMessage(blocks=[ToolResultBlock(tool_use_id="get_time#1", content="9:00")])
    )
    turns = wire(c)["messages"]
    assert [m["role"] for m in turns] == ["user", "assistant", "user"]
    # the result, then the announcement at the point of declaration, in one user message;
    # the head never had tools, so the tool-weight guidance (the palette's companion) comes
    # with it
    assert turns[-1]["content"] == [
        {"text": "Tool result for get_time#1: 9:00"},
        {"text": "Additional tools now available:"},
        {"text": TOOL_WEIGHT_GUIDANCE},
        {"text": "get_time: The current time\n  Input parameters: {}"},
    ]
    assert all("toolUse" not in part for m in turns for part in m["content"])


# -- tool calls out of the text -----------------------------------------------------------


def test_calls_parsed_from_text_get_ids_from_their_name_and_place() -> None:
    envelope = {
        "tool_calls": [
            {"name": "get_time", "arguments": {}},
            {"name": "search", "arguments": {"q": "x"}},
        ]
    }
    text = f"Let me check.\n```json\n{json.dumps(envelope)}\n```"
    calls = parse_tool_calls(text)
    assert [(c.id, c.name) for c in calls] == [("get_time#1", "get_time"), ("search#2", "search")]
    assert json.loads(calls[1].input_json) == {"q": "x"}
    kept = parse_tool_calls('{"tool_calls": [{"id": "mine", "name": "get_time"}]}')
    assert kept[0].id == "mine"


@given(st.lists(st.from_regex(r"[a-z_]{1,12}", fullmatch=True), max_size=5), st.text(max_size=30))
def test_any_envelope_round_trips_through_the_parser(names: list[str], prose: str) -> None:
    envelope = json.dumps(
        {"tool_calls": [{"name": n, "arguments": {"n": i}} for i, n in enumerate(names)]}
    )
    calls = parse_tool_calls(prose.replace("{", "(") + "\n" + envelope)
    assert [c.name for c in calls] == names
    assert [c.id for c in calls] == [f"{n}#{i}" for i, n in enumerate(names, start=1)]
    assert [json.loads(c.input_json) for c in calls] == [{"n": i} for i in range(len(names))]


def test_a_converse_answer_with_an_envelope_is_a_tool_use(
    stubbed: tuple[BedrockClient, Stubber, list[dict[str, Any]]],
) -> None:
    client, stubber, _ = stubbed
    answer = '{"tool_calls": [{"name": "get_time", "arguments": {}}]}'
    stubber.add_response("converse", converse_response(answer, cache_read=40, input_tokens=60))
    c = conversation()
    c.add_tool(TOOL)
    c.add_user_message("Time?")
    response = client.respond(c)
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.tool_uses == [ToolUseBlock(id="get_time#1", name="get_time", input_json="{}")]
    assert response.actual_input_tokens == 100
    assert response.cache_read_input_tokens == 40


def test_a_streamed_answer_yields_text_and_the_complete_response() -> None:
    boto = dummy_bedrock_client()
    mock = ConverseStreamMock(boto, converse_stream_events("Delivery at nine.", output_tokens=7))
    c = conversation()
    c.add_user_message("When?")
    pieces: list[str] = []
    response = BedrockClient(SPEC, client=boto).respond(c, on_text=pieces.append)
    assert len(pieces) > 1 and "".join(pieces) == "Delivery at nine."
    assert response.text == "Delivery at nine."
    assert response.output_tokens == 7
    assert mock.bodies[0]["inferenceConfig"] == {"maxTokens": 16_000}


def test_a_max_tokens_stop_is_a_truncation(
    stubbed: tuple[BedrockClient, Stubber, list[dict[str, Any]]],
) -> None:
    client, stubber, _ = stubbed
    stubber.add_response("converse", converse_response("cut", stop_reason="max_tokens"))
    c = conversation()
    c.add_user_message("go")
    with pytest.raises(OutputTruncationRetry):
        client.respond(c)


# -- Converse's own rules ------------------------------------------------------------------------


def test_a_natively_served_assistant_turn_is_sent_as_its_tool_call_envelope(wire: Wire) -> None:
    # thinking and a native call have no Converse form: the turn is written, never dropped
    c = conversation()
    c.add_user_message("What time is it?")
    call = ToolUseBlock(id="toolu_01", name="get_time", input_json='{"zone": "UTC"}')
    c.add_message(IncomingMessage(blocks=[ThinkingBlock(text="hm", signature="s"), call]))
    c.add_message(OutgoingMessage(blocks=[ToolResultBlock(tool_use_id="toolu_01", content="9:00")]))
    messages = wire(c)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    envelope = {"tool_calls": [{"id": "toolu_01", "name": "get_time", "input": {"zone": "UTC"}}]}
    assert messages[1]["content"] == [{"text": json.dumps(envelope)}]
    assert parse_tool_calls(messages[1]["content"][0]["text"]) == [call]


def test_a_call_already_in_the_answer_text_is_not_written_twice(wire: Wire) -> None:
    c = conversation()
    c.add_user_message("Time?")
    said = '{"tool_calls": [{"name": "get_time", "arguments": {}}]}'
    c.add_message(IncomingMessage(blocks=[TextBlock(text=said), *parse_tool_calls(said)]))
    c.add_message(OutgoingMessage(blocks=[ToolResultBlock(tool_use_id="get_time#1", content="9")]))
    c.add_user_message("thanks")
    assert wire(c)["messages"][1]["content"] == [{"text": said}]


def test_a_turn_of_thinking_alone_is_sent_as_its_reasoning(wire: Wire) -> None:
    c = conversation()
    c.add_user_message("Think.")
    c.add_message(IncomingMessage(blocks=[ThinkingBlock(text="Pondering.", signature="s")]))
    c.add_user_message("And?")
    messages = wire(c)["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": [{"text": '{"reasoning": "Pondering."}'}],
    }


def test_a_history_opening_with_an_assistant_turn_gets_a_user_opener(wire: Wire) -> None:
    c = conversation()
    c.add_message(IncomingMessage("Welcome back.", [TextBlock(text="Welcome back.")]))
    c.add_user_message("Hi.")
    assert wire(c)["messages"] == [
        {"role": "user", "content": [{"text": DEFAULT_USER_OPENER}]},
        {"role": "assistant", "content": [{"text": "Welcome back."}]},
        {"role": "user", "content": [{"text": "Hi."}]},
    ]


def test_the_user_opener_is_configurable() -> None:
    c = conversation()
    c.add_message(IncomingMessage("Welcome back.", [TextBlock(text="Welcome back.")]))
    client = BedrockClient(SPEC, client=object(), user_opener="(resumed)")
    assert client.encode(client.build_request(c))["messages"][0]["content"] == [
        {"text": "(resumed)"}
    ]


def test_blank_text_is_never_sent(wire: Wire) -> None:
    c = conversation()
    c.add_user_message("hello")
    c.add_user_message("   ")
    c.add_message(IncomingMessage(blocks=[TextBlock(text=""), TextBlock(text="Hi.")]))
    c.add_message(IncomingMessage(blocks=[TextBlock(text=" \n")]))
    c.add_user_message("")
    c.add_user_message("bye")
    assert wire(c)["messages"] == [
        {"role": "user", "content": [{"text": "hello"}]},
        {"role": "assistant", "content": [{"text": "Hi."}]},
        {"role": "user", "content": [{"text": "bye"}]},
    ]


FORMATS = [
    ("application/pdf", "pdf"),
    ("text/plain", "txt"),
    ("text/markdown", "md"),
    ("text/csv", "csv"),
    ("text/html", "html"),
    ("application/msword", "doc"),
    ("application/vnd.openxmlformats-officedocument.wordprocessingml.document", "docx"),
    ("application/vnd.ms-excel", "xls"),
    ("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "xlsx"),
]


@pytest.mark.parametrize(("mime", "expected"), FORMATS)
def test_a_document_format_is_one_of_converses_and_its_name_its_allowed_characters(
    stubbed: tuple[BedrockClient, Stubber, list[dict[str, Any]]], mime: str, expected: str
) -> None:
    client, stubber, seen = stubbed
    stubber.add_response("converse", converse_response("ok"))  # validates the request
    c = conversation()
    document = FileBlock(data="aGk=", mime_type=mime, filename="Q3 report.final_v2.md")
    c.add_message(OutgoingMessage(blocks=[TextBlock(text="Read this."), document]))
    client.respond(c)
    sent = seen[-1]["messages"][0]["content"][1]["document"]
    assert sent == {"format": expected, "name": "Q3 report final v2 md", "source": {"bytes": b"hi"}}


@given(st.text(max_size=60))
def test_any_filename_becomes_a_name_converse_accepts(filename: str) -> None:
    name = document_name(filename)
    assert re.fullmatch(r"[A-Za-z0-9\-()\[\]]+( [A-Za-z0-9\-()\[\]]+)*", name)
    assert 1 <= len(name) <= 200


def test_an_unmappable_document_type_is_refused_before_anything_is_sent(
    stubbed: tuple[BedrockClient, Stubber, list[dict[str, Any]]],
) -> None:
    client, _, seen = stubbed
    c = conversation()
    c.add_message(
        OutgoingMessage(
            blocks=[FileBlock(data="aGk=", mime_type="image/svg+xml", filename="x.svg")]
        )
    )
    with pytest.raises(
        ValueError, match=r"Conversation b-1: Converse takes documents as .*'x\.svg'"
    ):
        client.respond(c)
    assert seen == []


def test_an_image_jpg_type_is_sent_as_jpeg(wire: Wire) -> None:
    c = conversation()
    c.add_message(
        OutgoingMessage(
            blocks=[TextBlock(text="Look"), ImageBlock(data="aGk=", mime_type="image/jpg")]
        )
    )
    assert wire(c)["messages"][0]["content"][1]["image"]["format"] == "jpeg"


KINDS = st.sampled_from(["user", "user-blank", "assistant", "assistant-native", "result"])


def turn_of(kind: str, n: int) -> IncomingMessage | OutgoingMessage:
    if kind == "user":
        return OutgoingMessage(blocks=[TextBlock(text=f"u{n}")])
    if kind == "user-blank":
        return OutgoingMessage(blocks=[TextBlock(text=" ")])
    if kind == "result":
        return OutgoingMessage(blocks=[ToolResultBlock(tool_use_id=f"c{n}", content="r")])
    if kind == "assistant":
        return IncomingMessage(blocks=[TextBlock(text=f"a{n}")])
    call = ToolUseBlock(id=f"c{n}", name="get_time", input_json="{}")
    return IncomingMessage(blocks=[ThinkingBlock(text="t", signature="s"), call])


@given(st.lists(KINDS, min_size=1, max_size=12))
def test_any_history_alternates_from_a_user_turn_and_keeps_every_block_in_order(
    kinds: list[str],
) -> None:
    c = conversation()
    for n, kind in enumerate(kinds):
        c.add_message(turn_of(kind, n))
    messages = BUILDER.encode(unchecked_request(c))["messages"]
    roles = [m["role"] for m in messages]
    assert all(a != b for a, b in itertools.pairwise(roles))
    assert not messages or roles[0] == "user"
    assert all(
        m["content"] and all(p.get("text", "x").strip() for p in m["content"]) for m in messages
    )
    sent = [p["text"] for m in messages for p in m["content"]]
    expected = [t for n, k in enumerate(kinds) for t in _texts(k, n)]
    first = next((k for k in kinds if k != "user-blank"), "user")
    opener = [DEFAULT_USER_OPENER] if first.startswith("assistant") else []
    assert sent == opener + expected


def _texts(kind: str, n: int) -> list[str]:
    if kind == "user-blank":
        return []
    if kind == "result":
        return [f"Tool result for c{n}: r"]
    if kind == "assistant-native":
        return [json.dumps({"tool_calls": [{"id": f"c{n}", "name": "get_time", "input": {}}]})]
    return [f"{kind[0]}{n}"]


BUILDER = BedrockClient(SPEC, client=object())


def unchecked_request(c: ConversationContext) -> WireRequest:
    """``c`` rendered as a request without the template's pairing check: the histories above
    hold calls and results in any order, and alternation is the encoder's own rule."""
    prepared = c.prepare_messages_for_llm(BUILDER.formatter, False)
    return WireRequest(
        prepared=prepared,
        spec=SPEC,
        depth=Depth.IMMEDIATE,
        output_budget=16_000,
        max_tokens=16_000,
        thinking_active=False,
    )
