"""The OpenAI Responses dialect through the real SDK over a mock transport: the wire of a
multi-turn, tool-using conversation with reasoning, reasoning items kept byte for byte
through LMDB, a conversation moving between Responses, Chat Completions and Anthropic,
streaming, usage, refusals and the failures a stream can end with."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import (
    ConversationContext,
    Depth,
    IncomingMessage,
    OutgoingMessage,
    ThinkingMode,
)
from parlour.runtime.blocks import (
    FileBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from parlour.runtime.errors import (
    OutputTruncationRetry,
    ProviderRefusalError,
    RetryableLLMError,
    UncorrectableLLMError,
)
from parlour.runtime.providers import (
    AnthropicClient,
    BedrockClient,
    OpenAIClient,
    OpenAIResponsesClient,
    build_converse_request,
)
from parlour.runtime.testing import (
    MockProvider,
    anthropic_message,
    fake_spec,
    mock_anthropic_sdk,
    mock_async_openai_sdk,
    mock_openai_sdk,
    openai_completion,
    openai_reasoning,
    openai_response,
    openai_response_sse,
    openai_response_sse_error,
)
from parlour.stores import LmdbStore
from tests.runtime.providers._sent_bodies import check_request

SPEC = fake_spec(id="gpt-test", provider="openai", thinking_mode=ThinkingMode.REASONING_EFFORT)
PLAIN = fake_spec(id="gpt-plain", provider="openai", thinking_mode=ThinkingMode.NONE)
CLAUDE = fake_spec(id="claude-test", provider="anthropic")
OBJECTIVE = "You answer questions about the warehouse."
FIND = ToolDefinitionBlock(
    name="find",
    description="finds a shelf",
    schema_json='{"type": "object", "properties": {"item": {"type": "string"}}}',
)
# what a reasoning model sends: summaries, non-ASCII, and the opaque encrypted content
FIRST = openai_reasoning("rs_1", "Need the shelf — ask the tool.", "gAAAAB1x/+=" * 40)
SECOND = openai_reasoning("rs_2", "", "gAAAAB2y-_" * 40)


def conversation(cid: str = "r-1") -> ConversationContext:
    c = ConversationContext(cid)
    c.output_declaration, c.depth = 16_000, Depth.THOROUGH
    c.put_main_objective("task", OBJECTIVE)
    c.add_tool(FIND)
    return c


def client(*replies: Any, spec: Any = SPEC) -> tuple[OpenAIResponsesClient, MockProvider]:
    server = MockProvider(*replies)
    return OpenAIResponsesClient(spec, client=mock_openai_sdk(server)), server


def answer(c: ConversationContext, llm: Any, *, streamed: bool = False) -> None:
    response = llm.respond(c, on_text=(lambda _: None) if streamed else None)
    c.add_message(response.to_message())


def last_call(c: ConversationContext) -> ToolUseBlock:
    call = c.messages[-1].blocks[-1]
    assert isinstance(call, ToolUseBlock)
    return call


def tool_loop(llm: Any) -> ConversationContext:
    """A user question, a reasoning call of ``find``, its result, a reasoning answer."""
    c = conversation()
    c.add_user_message("Where are the blue kettles?")
    answer(c, llm, streamed=True)
    call = last_call(c)
    c.add_message(OutgoingMessage(blocks=[ToolResultBlock(tool_use_id=call.id, content="K7")]))
    answer(c, llm)
    return c


def loop_replies() -> list[Any]:
    calling = openai_response(
        None,
        reasoning=[FIRST],
        tool_calls=[{"id": "call_1", "name": "find", "arguments": '{"item":"kettle"}'}],
    )
    return [calling, openai_response("Shelf K7.", reasoning=[SECOND])]


def items_of(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [item for item in body["input"] if item.get("type") == kind]


# -- the wire ------------------------------------------------------------------------------------


def test_every_body_of_a_tool_using_conversation_with_reasoning_fits_the_sdk_type() -> None:
    llm, server = client(*loop_replies(), openai_response("You are welcome."))
    c = tool_loop(llm)
    c.add_user_message("Thanks.")
    answer(c, llm, streamed=True)
    assert len(server.bodies) == 3
    for body in server.bodies:
        check_request("/v1/responses", body)
        assert body["instructions"].startswith(OBJECTIVE)  # then the tool guidance
        assert body["store"] is False and "previous_response_id" not in body
        assert body["include"] == ["reasoning.encrypted_content"]
        assert body["reasoning"] == {"effort": "medium"}
        assert body["tools"] == [
            {
                "type": "function",
                "name": "find",
                "description": "finds a shelf",
                "parameters": json.loads(FIND.schema_json or ""),
                "strict": False,
            }
        ]
        assert OBJECTIVE not in json.dumps(body["input"])  # the objective is only instructions
    assert [b.get("stream", False) for b in server.bodies] == [True, False, True]


def test_reasoning_items_go_back_unchanged_in_their_place_among_the_turns_items() -> None:
    llm, server = client(*loop_replies(), openai_response("You are welcome."))
    c = tool_loop(llm)
    c.add_user_message("Thanks.")
    answer(c, llm)
    second, third = server.bodies[1]["input"], server.bodies[2]["input"]
    assert [i.get("type") or i["role"] for i in second] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert second[1] == FIRST  # the item as the server sent it, encrypted content and all
    assert second[2] == {
        "type": "function_call",
        "id": "fc_0",  # the item id the reasoning item is paired with
        "call_id": "call_1",
        "name": "find",
        "arguments": '{"item":"kettle"}',
    }
    assert second[3] == {"type": "function_call_output", "call_id": "call_1", "output": "K7"}
    assert third[:4] == second
    assert third[4:] == [
        SECOND,
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Shelf K7.", "annotations": []}],
        },
        {"role": "user", "content": [{"type": "input_text", "text": "Thanks."}]},
    ]


def test_only_the_item_right_after_a_reasoning_item_carries_its_id() -> None:
    reply = openai_response(
        "Looking.",
        reasoning=[FIRST],
        tool_calls=[
            {"id": "call_1", "name": "find", "arguments": "{}"},
            {"id": "call_2", "name": "find", "arguments": "{}"},
        ],
    )
    llm, server = client(reply, openai_response("Done."))
    c = conversation()
    c.add_user_message("Find two.")
    answer(c, llm)
    blocks = c.messages[-1].blocks
    assert isinstance(blocks[0], ReasoningBlock) and blocks[0].followed_by == "msg_1"
    results = [ToolResultBlock(tool_use_id=f"call_{n}", content="K7") for n in (1, 2)]
    c.add_message(OutgoingMessage(blocks=results))
    answer(c, llm)
    sent = server.last_body["input"][1:5]
    assert [(i.get("type"), i.get("id")) for i in sent] == [
        ("reasoning", "rs_1"),
        ("message", "msg_1"),
        ("function_call", None),
        ("function_call", None),
    ]


def test_images_and_files_are_input_parts_with_data_urls() -> None:
    llm, server = client(openai_response("A cat."))
    c = conversation()
    image = ImageBlock(data="aGk=", mime_type="image/png")
    document = FileBlock(data="aGk=", mime_type="application/pdf", filename="cat.pdf")
    c.add_message(OutgoingMessage(blocks=[TextBlock(text="What is this?"), image, document]))
    answer(c, llm)
    check_request("/v1/responses", server.last_body)
    assert server.last_body["input"][0]["content"] == [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,aGk=", "detail": "auto"},
        {
            "type": "input_file",
            "file_data": "data:application/pdf;base64,aGk=",
            "filename": "cat.pdf",
        },
    ]


def test_a_model_without_reasoning_is_asked_for_none() -> None:
    llm, server = client(openai_response("Hi."), spec=PLAIN)
    c = conversation()
    c.add_user_message("Hello")
    answer(c, llm)
    assert "reasoning" not in server.last_body and "include" not in server.last_body
    assert server.last_body["store"] is False


def test_thinking_of_another_provider_stays_home() -> None:
    llm, server = client(openai_response("Hi."))
    c = conversation()
    c.add_user_message("Hello")
    c.add_message(
        IncomingMessage(blocks=[ThinkingBlock(text="mull", signature="sig"), TextBlock(text="Yo")])
    )
    c.add_user_message("Again")
    answer(c, llm)
    assert "mull" not in json.dumps(server.last_body) and "sig" not in json.dumps(server.last_body)
    assert {"role": "assistant", "content": "Yo"} in server.last_body["input"]


# -- the store and the other dialects ------------------------------------------------------------


def stored_and_loaded(store: LmdbStore, c: ConversationContext) -> ConversationContext:
    if store.exists(c.conversation_id or "", "alice"):
        c.stored_version = store.save_context(c.to_snapshot(), "alice")
    else:
        store.create_context(c.to_snapshot(), "alice")
        c.stored_version = store.version_of(c.conversation_id or "", "alice") or 0
    loaded = store.load(c.conversation_id or "", "alice")
    assert loaded is not None
    return loaded.to_conversation()


def reasoning_of(c: ConversationContext) -> list[ReasoningBlock]:
    return [b for m in c.messages for b in m.blocks if isinstance(b, ReasoningBlock)]


def test_reasoning_items_round_trip_through_lmdb_byte_for_byte(lmdb_store: LmdbStore) -> None:
    llm, server = client(*loop_replies(), openai_response("Bye."))
    c = tool_loop(llm)
    before = reasoning_of(c)
    assert [json.loads(b.item_json) for b in before] == [FIRST, SECOND]
    restored = stored_and_loaded(lmdb_store, c)
    after = reasoning_of(restored)
    assert [(b.item_json, b.summary) for b in after] == [(b.item_json, b.summary) for b in before]
    assert after[0].summary == "Need the shelf — ask the tool."
    restored.add_user_message("Bye.")
    answer(restored, llm)
    assert items_of(server.last_body, "reasoning") == [FIRST, SECOND]


def test_a_conversation_moves_between_responses_chat_completions_and_anthropic(
    lmdb_store: LmdbStore,
) -> None:
    responses, r_server = client(*loop_replies(), openai_response("Again K7."))
    chat_server = MockProvider(openai_completion("Still K7."))
    chat = OpenAIClient(SPEC, client=mock_openai_sdk(chat_server))
    claude_server = MockProvider(anthropic_message("K7, as before."))
    claude = AnthropicClient(CLAUDE, client=mock_anthropic_sdk(claude_server))

    c = tool_loop(responses)
    c.add_user_message("Sure?")
    answer(c, chat)  # the same provider: the binding holds
    chat_body = chat_server.last_body
    assert "gAAAAB" not in json.dumps(chat_body) and "Need the shelf" not in json.dumps(chat_body)
    assert [m["role"] for m in chat_body["messages"]] == [
        "system", "user", "assistant", "tool", "assistant", "user",
    ]  # fmt: skip

    c = stored_and_loaded(lmdb_store, c)  # a binding is not stored: the next client binds
    c.add_user_message("Certain?")
    answer(c, claude)
    claude_body = claude_server.last_body
    assert "gAAAAB" not in json.dumps(claude_body)
    kinds = [p["type"] for m in claude_body["messages"] for p in m["content"]]
    assert "thinking" not in kinds and "redacted_thinking" not in kinds
    assert kinds.count("tool_use") == kinds.count("tool_result") == 1

    c = stored_and_loaded(lmdb_store, c)
    c.add_user_message("And now?")
    answer(c, responses)
    assert items_of(r_server.last_body, "reasoning") == [FIRST, SECOND]
    said = [i["content"] for i in r_server.last_body["input"] if i.get("role") == "assistant"]
    assert said[1:] == ["Still K7.", "K7, as before."]  # the first is the paired message
    assert said[0][0]["text"] == "Shelf K7."


def test_converse_reads_a_reasoning_only_turn_as_its_summary() -> None:
    c = conversation("r-converse")
    c.add_user_message("Think first.")
    c.add_message(IncomingMessage(blocks=[ReasoningBlock(item_json="{}", summary="weighing")]))
    c.add_user_message("Go on.")
    bedrock = BedrockClient(fake_spec(id="anthropic.t-v1:0", provider="bedrock"), client=object())
    body = build_converse_request(bedrock.build_request(c))
    texts = [p.get("text") for m in body["messages"] for p in m["content"]]
    assert json.dumps({"reasoning": "weighing"}) in texts and "{}" not in texts


# -- answers -------------------------------------------------------------------------------------


def test_usage_counts_cached_and_reasoning_tokens() -> None:
    reply = openai_response(
        "Hi.", input_tokens=900, cached_tokens=640, output_tokens=300, reasoning_tokens=256
    )
    llm, _ = client(reply, reply)
    for streamed in (False, True):
        c = conversation()
        c.add_user_message("Hello")
        response = llm.respond(c, on_text=(lambda _: None) if streamed else None)
        assert response.usage.input_tokens == 900
        assert response.usage.cache_read_input_tokens == 640
        assert response.usage.output_tokens == 300 and response.usage.reasoning_tokens == 256


def test_a_streamed_answer_yields_its_deltas_then_the_whole_response() -> None:
    llm, _ = client(openai_response("Shelf K7, second row.", reasoning=[FIRST]))
    c = conversation()
    c.add_user_message("Where?")
    stream = llm.stream(c)
    pieces = list(stream)
    assert len(pieces) > 2 and "".join(pieces) == "Shelf K7, second row."
    assert [type(b) for b in stream.response.blocks] == [ReasoningBlock, TextBlock]


def test_arespond_sends_the_same_body_and_streams_on_the_loop() -> None:
    server = MockProvider(*loop_replies())
    sync_server = MockProvider(*loop_replies())
    llm = OpenAIResponsesClient(
        SPEC, client=mock_openai_sdk(sync_server), async_client=mock_async_openai_sdk(server)
    )
    reference = tool_loop(OpenAIResponsesClient(SPEC, client=mock_openai_sdk(sync_server)))

    async def run() -> ConversationContext:
        c = conversation()
        c.add_user_message("Where are the blue kettles?")
        pieces: list[str] = []
        c.add_message((await llm.arespond(c, on_text=pieces.append)).to_message())
        assert pieces == []  # a call answers with no text
        call = last_call(c)
        result = ToolResultBlock(tool_use_id=call.id, content="K7")
        c.add_message(OutgoingMessage(blocks=[result]))
        c.add_message((await llm.arespond(c)).to_message())
        return c

    c = asyncio.run(run())
    assert server.bodies[0] == sync_server.bodies[0]
    assert server.bodies[1] == sync_server.bodies[1]
    assert reasoning_of(c) == reasoning_of(reference)


def test_a_refusal_raises_the_refusal_error_with_its_text() -> None:
    llm, _ = client(openai_response(None, refusal="I cannot help with that."))
    c = conversation()
    c.add_user_message("Something bad")
    with pytest.raises(ProviderRefusalError, match="I cannot help with that"):
        llm.respond(c)


def test_an_incomplete_answer_signals_a_retry_or_a_refusal() -> None:
    cut = openai_response("cut sh", status="incomplete", incomplete_reason="max_output_tokens")
    filtered = openai_response("no", status="incomplete", incomplete_reason="content_filter")
    llm, _ = client(cut, filtered)
    c = conversation()
    c.add_user_message("Long answer please")
    with pytest.raises(OutputTruncationRetry):
        llm.respond(c, on_text=lambda _: None)
    with pytest.raises(ProviderRefusalError):
        llm.respond(c)


# -- failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [("server_error", RetryableLLMError), ("invalid_prompt", UncorrectableLLMError)],
)
def test_a_failed_response_mid_stream_maps_by_its_code(
    code: str, expected: type[Exception]
) -> None:
    llm, _ = client(openai_response_sse_error(code, failed=True))
    c = conversation()
    c.add_user_message("Go")
    pieces: list[str] = []
    with pytest.raises(expected, match=f"mid-stream with {code}") as caught:
        llm.respond(c, on_text=pieces.append)
    assert type(caught.value) is expected
    assert "".join(pieces) == "Partial"
    assert type(caught.value.__cause__).__module__.startswith("openai")


def test_a_stream_cut_before_its_end_is_retryable() -> None:
    whole = openai_response_sse(openai_response("Never finished.")).decode()
    cut = whole[: whole.index("event: response.completed")].encode()
    llm, _ = client(cut)
    c = conversation()
    c.add_user_message("Go")
    with pytest.raises(RetryableLLMError, match="ended before the response did"):
        llm.respond(c, on_text=lambda _: None)


def test_a_failed_response_without_a_stream_maps_like_one_in_a_stream() -> None:
    failed = openai_response(
        None, status="failed", error={"code": "server_error", "message": "boom"}
    )
    llm, _ = client(failed, (400, {"error": {"message": "bad input", "type": "invalid"}}))
    c = conversation()
    c.add_user_message("Go")
    with pytest.raises(RetryableLLMError, match="server_error"):
        llm.respond(c)
    with pytest.raises(UncorrectableLLMError, match="answered 400"):
        llm.respond(c)


def test_a_dropped_connection_on_the_async_client_is_retryable() -> None:
    server = MockProvider(httpx2.ConnectError("refused"))
    llm = OpenAIResponsesClient(SPEC, client=object(), async_client=mock_async_openai_sdk(server))
    c = conversation()
    c.add_user_message("Go")
    with pytest.raises(RetryableLLMError, match="could not be reached"):
        asyncio.run(llm.arespond(c, on_text=lambda _: None))


# -- any answer ----------------------------------------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
ITEM = st.one_of(
    st.builds(lambda s, e: ("reasoning", s, e), TEXT, st.text("abcXYZ+/=-_", min_size=1)),
    st.builds(lambda t: ("message", t), TEXT.filter(lambda t: not t.isspace() and t != "")),
    st.just(("call",)),
)


def output_of(items: list[tuple[str, ...]]) -> dict[str, Any]:
    """A response whose output is ``items`` in order, ids numbered by position."""
    body = openai_response(None)
    output: list[dict[str, Any]] = []
    for n, item in enumerate(items):
        if item[0] == "reasoning":
            output.append(openai_reasoning(f"rs_{n}", item[1], item[2]))
        elif item[0] == "message":
            content = [{"type": "output_text", "text": item[1], "annotations": []}]
            message = {"id": f"msg_{n}", "type": "message", "role": "assistant"}
            output.append({**message, "status": "completed", "content": content})
        else:
            call = {"id": f"fc_{n}", "type": "function_call", "call_id": f"call_{n}"}
            output.append({**call, "name": "find", "arguments": "{}", "status": "completed"})
    return {**body, "output": output}


@settings(max_examples=60, deadline=None)
@given(st.lists(ITEM, min_size=1, max_size=6))
def test_any_answer_goes_back_with_its_reasoning_in_place_and_paired(
    items: list[tuple[str, ...]],
) -> None:
    body = output_of(items)
    llm, server = client(body, openai_response("ok"))
    c = conversation()
    c.add_user_message("Go")
    answer(c, llm)
    calls = [b.id for b in c.messages[-1].blocks if isinstance(b, ToolUseBlock)]
    results = [ToolResultBlock(tool_use_id=call_id, content="K7") for call_id in calls]
    c.add_message(OutgoingMessage(blocks=results) if results else OutgoingMessage("More?"))
    answer(c, llm)
    check_request("/v1/responses", server.last_body)
    sent = [  # the answer's items, between the question and the results or the next question
        i
        for i in server.last_body["input"][1:]
        if i.get("type") != "function_call_output" and i.get("role") != "user"
    ]
    output = body["output"]
    last = max((n for n, i in enumerate(output) if i["type"] != "reasoning"), default=-1)
    kept = [i for n, i in enumerate(output) if i["type"] != "reasoning" or n < last]
    assert [i for i in sent if i.get("type") == "reasoning"] == [
        i for i in kept if i["type"] == "reasoning"
    ]  # every reasoning item that led somewhere, unchanged and in order
    for at, item in enumerate(sent[:-1]):
        if item.get("type") == "reasoning" and sent[at + 1].get("type") != "reasoning":
            index = output.index(item)
            assert sent[at + 1]["id"] == output[index + 1]["id"]  # paired by id
    assert [i["call_id"] for i in sent if i.get("type") == "function_call"] == calls
