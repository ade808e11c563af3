"""Tool calls and results reach every provider in pairs: a conversation stored while a tool
ran (its process killed) is restored answerable and sent in each dialect's valid shape, and
a request holding an unpaired call or result is refused before anything is sent."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import (
    ConversationContext,
    Depth,
    IncomingMessage,
    LLMClient,
    OutgoingMessage,
    ThinkingMode,
    WireRequest,
)
from parlour.runtime.blocks import TextBlock, ToolDefinitionBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.errors import UnpairedToolCallError
from parlour.runtime.providers import (
    AnthropicClient,
    BedrockClient,
    OpenAIClient,
    OpenAIResponsesClient,
    build_anthropic_params,
    build_converse_request,
    build_openai_body,
    build_responses_body,
    parse_tool_calls,
)
from parlour.runtime.snapshots import decode_snapshot, encode_snapshot
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
    record_params,
)
from tests.runtime.providers._sent_bodies import ANTHROPIC_ID, OPENAI_ID_LIMIT

SPECS = {
    "anthropic": fake_spec(id="claude-test", provider="anthropic"),
    "openai": fake_spec(
        id="gpt-test", provider="openai", thinking_mode=ThinkingMode.REASONING_EFFORT
    ),
    "responses": fake_spec(
        id="gpt-test", provider="openai", thinking_mode=ThinkingMode.REASONING_EFFORT
    ),
    "bedrock": fake_spec(
        id="anthropic.claude-test-v1:0", provider="bedrock", supports_prompt_caching=False
    ),
}
LOOK = ToolDefinitionBlock(
    name="look_up",
    description="Looks a thing up, slowly",
    schema_json='{"type": "object", "properties": {"q": {"type": "string"}}}',
)
# (call id, the result's text, whether it is an error), in the order the wire holds them
Pairs = list[tuple[str, str, bool]]


def call(call_id: str) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name="look_up", input_json='{"q": "tides"}')


def result(call_id: str, text: str = "high at nine") -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call_id, content=text)


def conversation(cid: str = "w-1") -> ConversationContext:
    c = ConversationContext(cid, user_id="alice")
    c.output_declaration, c.depth = 1_000, Depth.IMMEDIATE
    c.put_main_objective("task", "You answer questions about the harbour.")
    c.add_tool(LOOK)
    c.add_user_message("When is high tide?")
    return c


def ending_with_the_call(c: ConversationContext) -> list[str]:
    c.add_message(IncomingMessage(blocks=[TextBlock(text="Looking."), call("toolu_1")]))
    return ["toolu_1"]


def followed_by_user_messages(c: ConversationContext) -> list[str]:
    # the broken state: each turn after the crash failed and stored one more user message
    ending_with_the_call(c)
    c.add_user_message("Hello?")
    c.add_user_message("Are you there?")
    return ["toolu_1"]


def some_calls_answered(c: ConversationContext) -> list[str]:
    calls = [call("toolu_1"), call("toolu_2"), call("toolu_3")]
    c.add_message(IncomingMessage(blocks=[TextBlock(text="Looking thrice."), *calls]))
    c.add_message(OutgoingMessage(blocks=[result("toolu_2")]))
    return ["toolu_1", "toolu_3"]


SHAPES = {
    "ending with the call": ending_with_the_call,
    "followed by user messages": followed_by_user_messages,
    "some calls answered": some_calls_answered,
}


def restored(c: ConversationContext) -> ConversationContext:
    """``c`` as a new process finds it: stored, loaded, restored."""
    cid = c.conversation_id or ""
    return decode_snapshot(encode_snapshot(c.to_snapshot()), cid).to_conversation()


def says_interrupted(text: str) -> bool:
    return "look_up" in text and "interrupted" in text and "outcome is unknown" in text


# -- each dialect's rules, on the body sent -----------------------------------------------------


def anthropic_pairs(body: dict[str, Any]) -> Pairs:
    """Every tool_use is answered by tool_result blocks first in the very next (user)
    message, one per call; no tool_result stands anywhere else; every tool_use has an id
    of the allowed characters that no other has, a name of 1 to 200 characters and an
    object for its input."""
    messages, pairs = body["messages"], []
    uses = [p for m in messages for p in m["content"] if p["type"] == "tool_use"]
    assert all(ANTHROPIC_ID.fullmatch(p["id"]) for p in uses), [p["id"] for p in uses]
    assert len({p["id"] for p in uses}) == len(uses), [p["id"] for p in uses]
    assert all(1 <= len(p["name"]) <= 200 and isinstance(p["input"], dict) for p in uses)
    for at, message in enumerate(messages):
        calls = [p["id"] for p in message["content"] if p["type"] == "tool_use"]
        if message["role"] == "assistant" and calls:
            after = messages[at + 1]
            assert after["role"] == "user"
            lead = list(itertools.takewhile(lambda p: p["type"] == "tool_result", after["content"]))
            assert sorted(p["tool_use_id"] for p in lead) == sorted(calls)
            pairs += [(p["tool_use_id"], p["content"], p["is_error"]) for p in lead]
    everywhere = [p for m in messages for p in m["content"] if p["type"] == "tool_result"]
    assert len(everywhere) == len(pairs)
    return pairs


def openai_pairs(body: dict[str, Any]) -> Pairs:
    """Every assistant message with tool_calls is followed directly by one tool message
    per call id; no tool message stands anywhere else."""
    messages, pairs, at = body["messages"], [], 0
    ids = [c["id"] for m in messages for c in m.get("tool_calls", ())]
    assert all(len(i) <= OPENAI_ID_LIMIT for i in ids), ids
    while at < len(messages):
        message = messages[at]
        assert message["role"] != "tool"
        ids = [c["id"] for c in message.get("tool_calls", ())]
        answers = messages[at + 1 : at + 1 + len(ids)]
        assert [m["role"] for m in answers] == ["tool"] * len(ids)
        assert sorted(m["tool_call_id"] for m in answers) == sorted(ids)
        pairs += [
            (m["tool_call_id"], m["content"], m["content"].startswith("Error: ")) for m in answers
        ]
        at += 1 + len(ids)
    return pairs


def responses_pairs(body: dict[str, Any]) -> Pairs:
    """Every run of function_call items is followed directly by one function_call_output
    per call id; no output stands anywhere else."""
    items, pairs, at = body["input"], [], 0
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    assert all(len(i) <= OPENAI_ID_LIMIT for i in calls), calls
    while at < len(items):
        assert items[at].get("type") != "function_call_output"
        ids = []
        while at < len(items) and items[at].get("type") == "function_call":
            ids.append(items[at]["call_id"])
            at += 1
        if not ids:
            at += 1
            continue
        answers = items[at : at + len(ids)]
        assert [a.get("type") for a in answers] == ["function_call_output"] * len(ids)
        assert sorted(a["call_id"] for a in answers) == sorted(ids)
        pairs += [(a["call_id"], a["output"], a["output"].startswith("Error: ")) for a in answers]
        at += len(ids)
    return pairs


_RESULT_TEXT = re.compile(r"Tool (result|error) for (.+?): (.*)", re.DOTALL)


def converse_pairs(body: dict[str, Any]) -> Pairs:
    """Roles alternate from a user message; the calls an assistant message writes are
    answered by result texts first in the very next (user) message; no result text stands
    anywhere else."""
    messages, pairs = body["messages"], []
    roles = [m["role"] for m in messages]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))
    for at, message in enumerate(messages):
        said = "".join(p.get("text", "") for p in message["content"])
        calls = [c.id for c in parse_tool_calls(said)] if message["role"] == "assistant" else []
        if calls:
            texts = [p.get("text", "") for p in messages[at + 1]["content"]]
            lead = [m for m in map(_RESULT_TEXT.fullmatch, texts[: len(calls)]) if m]
            assert sorted(m[2] for m in lead) == sorted(calls)
            pairs += [(m[2], m[3], m[1] == "error") for m in lead]
    texts = [p.get("text", "") for m in messages for p in m["content"]]
    everywhere = [t for t in texts if _RESULT_TEXT.match(t)]
    assert len(everywhere) == len(pairs)
    return pairs


PAIRS: dict[str, Callable[[dict[str, Any]], Pairs]] = {
    "anthropic": anthropic_pairs,
    "openai": openai_pairs,
    "responses": responses_pairs,
    "bedrock": converse_pairs,
}


# -- each dialect through its real SDK over the offline doubles ---------------------------------


class Dialect:
    """One dialect's client over its SDK's double: ``send`` answers with the body sent,
    ``sent`` lists every body that left."""

    def __init__(self, name: str, client: LLMClient, sent: list[dict[str, Any]]) -> None:
        self.name, self.client, self.sent = name, client, sent

    def send(self, c: ConversationContext) -> dict[str, Any]:
        self.client.respond(c)
        return self.sent[-1]


@pytest.fixture(params=list(SPECS))
def dialect(request: pytest.FixtureRequest) -> Iterator[Dialect]:
    name: str = request.param
    if name == "bedrock":
        boto = dummy_bedrock_client()
        seen = record_params(boto)
        with Stubber(boto) as stubber:
            for _ in range(2):
                stubber.add_response("converse", converse_response("ok"))
            yield Dialect(name, BedrockClient(SPECS[name], client=boto), seen)
        return
    handler = MockProvider()
    if name == "anthropic":
        handler.add(anthropic_message("ok"), anthropic_message("ok"))
        client: LLMClient = AnthropicClient(SPECS[name], client=mock_anthropic_sdk(handler))
    elif name == "openai":
        handler.add(openai_completion("ok"), openai_completion("ok"))
        client = OpenAIClient(SPECS[name], client=mock_openai_sdk(handler))
    else:
        handler.add(openai_response("ok"), openai_response("ok"))
        client = OpenAIResponsesClient(SPECS[name], client=mock_openai_sdk(handler))
    yield Dialect(name, client, handler.bodies)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_conversation_stored_mid_tool_is_sent_with_every_call_answered_as_interrupted(
    dialect: Dialect, shape: str
) -> None:
    c = conversation()
    interrupted = SHAPES[shape](c)
    resumed = restored(c)
    resumed.add_user_message("Go on.")
    pairs = PAIRS[dialect.name](dialect.send(resumed))
    answered = {call_id: (text, error) for call_id, text, error in pairs}
    for call_id in interrupted:
        text, error = answered.pop(call_id)
        assert says_interrupted(text) and error
    assert all(not says_interrupted(text) for text, _ in answered.values())


def test_the_resumed_conversation_goes_on_with_the_interrupted_result_in_place(
    dialect: Dialect,
) -> None:
    c = conversation()
    followed_by_user_messages(c)
    resumed = restored(c)
    resumed.add_user_message("Go on.")
    resumed.add_message(dialect.client.respond(resumed).to_message())
    resumed.add_user_message("Thanks.")
    body = dialect.send(resumed)  # the second turn: the repair is still in place, once
    pairs = PAIRS[dialect.name](body)
    assert [(call_id, error) for call_id, _, error in pairs] == [("toolu_1", True)]


def hand_built(kind: str) -> ConversationContext:
    c = conversation("w-unpaired")
    if kind == "call without result":
        ending_with_the_call(c)
        c.add_user_message("Hello?")
    else:
        c.add_message(IncomingMessage("Nothing to look up.", [TextBlock(text="Nothing.")]))
        c.add_message(OutgoingMessage(blocks=[result("toolu_9")]))
    return c


@pytest.mark.parametrize(
    ("kind", "call_id", "missing"),
    [("call without result", "toolu_1", "result"), ("result without call", "toolu_9", "call")],
)
def test_every_dialect_refuses_an_unpaired_request_and_sends_nothing(
    dialect: Dialect, kind: str, call_id: str, missing: str
) -> None:
    with pytest.raises(UnpairedToolCallError) as refused:
        dialect.client.respond(hand_built(kind))
    assert refused.value.conversation_id == "w-unpaired"
    assert refused.value.call_id == call_id and refused.value.missing == missing
    assert "w-unpaired" in str(refused.value) and call_id in str(refused.value)
    assert dialect.sent == []


def test_a_streamed_or_previewed_request_is_refused_the_same_way(dialect: Dialect) -> None:
    with pytest.raises(UnpairedToolCallError):
        list(dialect.client.stream(hand_built("call without result")))
    with pytest.raises(UnpairedToolCallError):
        dialect.client.preview(hand_built("result without call"))
    assert dialect.sent == []


def test_a_result_after_another_message_is_refused_though_it_exists() -> None:
    c = conversation("w-late")
    ending_with_the_call(c)
    c.add_user_message("Hello?")
    c.add_message(OutgoingMessage(blocks=[result("toolu_1")]))
    offline = AnthropicClient(SPECS["anthropic"], client=object())
    with pytest.raises(UnpairedToolCallError, match="toolu_1"):
        offline.build_request(c)


def test_a_check_that_passed_once_still_refuses_what_is_added_after() -> None:
    c = conversation("w-grow")
    offline = OpenAIClient(SPECS["openai"], client=object())
    offline.build_request(c)
    c.add_message(IncomingMessage(blocks=[call("toolu_1")]))
    c.add_message(OutgoingMessage(blocks=[result("toolu_1")]))
    offline.build_request(c)  # verified: the next check walks only what follows
    c.add_message(OutgoingMessage(blocks=[result("toolu_1")]))  # answered twice
    with pytest.raises(UnpairedToolCallError) as refused:
        offline.build_request(c)
    assert refused.value.missing == "call"
    c.messages.pop()
    c.messages[1].blocks.append(call("toolu_2"))  # an edit inside the verified turns
    with pytest.raises(UnpairedToolCallError, match="toolu_2"):
        offline.build_request(c)


def test_what_a_check_verified_is_noted_on_the_conversation_for_every_client_and_list() -> None:
    """The note of what was verified lives on the conversation's render record, not in a
    client: a second client walks only what is new, and a replaced message list (another
    record's list) is walked whole by both."""
    c = conversation("w-note")
    c.add_message(IncomingMessage(blocks=[call("toolu_1")]))
    c.add_message(OutgoingMessage(blocks=[result("toolu_1")]))
    first = OpenAIClient(SPECS["openai"], client=object())
    second = OpenAIClient(SPECS["openai"], client=object())  # another client of the same model
    first.build_request(c)
    second.build_request(c)
    c.messages = list(c.messages)[:-1]  # the result dropped: another list, not an edit
    for client in (second, first):
        with pytest.raises(UnpairedToolCallError) as refused:
            client.build_request(c)
        assert refused.value.call_id == "toolu_1" and refused.value.missing == "result"


# -- any conversation, restored, renders valid in every dialect ---------------------------------

OFFLINE: dict[str, LLMClient] = {
    "anthropic": AnthropicClient(SPECS["anthropic"], client=object()),
    "openai": OpenAIClient(SPECS["openai"], client=object()),
    "responses": OpenAIResponsesClient(SPECS["responses"], client=object()),
    "bedrock": BedrockClient(SPECS["bedrock"], client=object()),
}
ENCODERS: dict[str, Callable[[WireRequest], dict[str, Any]]] = {
    "anthropic": build_anthropic_params,
    "openai": build_openai_body,
    "responses": build_responses_body,
    "bedrock": build_converse_request,
}


def offline_body(name: str, c: ConversationContext) -> dict[str, Any]:
    """The body ``name``'s client would send for ``c`` (the template's checks included)."""
    return ENCODERS[name](OFFLINE[name].build_request(c))


STEP = st.one_of(
    st.just(("user",)),
    st.just(("assistant",)),
    st.just(("orphan",)),
    st.tuples(
        st.just("calls"),
        st.lists(st.booleans(), min_size=1, max_size=3),  # which calls got their result
        st.integers(0, 2),  # user messages stored after them
        st.booleans(),  # ids used again (as the text dialects number calls)
    ),
)


def build(steps: list[tuple[Any, ...]]) -> tuple[ConversationContext, int]:
    """The conversation the steps describe, and how many of its calls have no result."""
    c = conversation("w-any")
    missing = 0
    for n, step in enumerate(steps):
        if step[0] == "user":
            c.add_user_message(f"u{n}")
        elif step[0] == "assistant":
            c.add_message(IncomingMessage(f"a{n}", [TextBlock(text=f"a{n}")]))
        elif step[0] == "orphan":
            c.add_message(OutgoingMessage(blocks=[result(f"ghost{n}")]))
        else:
            _, answered, users, again = step
            ids = [f"look_up#{k + 1}" if again else f"c{n}_{k}" for k in range(len(answered))]
            c.add_message(IncomingMessage(blocks=[TextBlock(text=f"a{n}"), *map(call, ids)]))
            results = [result(i) for i, done in zip(ids, answered, strict=True) if done]
            if results:
                c.add_message(OutgoingMessage(blocks=results))
            missing += answered.count(False)
            for k in range(users):
                c.add_user_message(f"u{n}.{k}")
    return c, missing


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, max_size=8))
def test_any_conversation_restored_renders_every_call_paired_in_every_dialect(
    steps: list[tuple[Any, ...]],
) -> None:
    for name, pairs_of in PAIRS.items():  # a copy each: a render binds it to the model
        c, missing = build(steps)
        resumed = restored(c)
        resumed.add_user_message("Go on.")
        pairs = pairs_of(offline_body(name, resumed))
        assert sum(says_interrupted(text) and error for _, text, error in pairs) == missing


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, max_size=8))
def test_whatever_the_check_lets_through_every_dialect_can_send(
    steps: list[tuple[Any, ...]],
) -> None:
    for name, pairs_of in PAIRS.items():
        c, _ = build(steps)  # not restored: dangling calls and orphans as they were stored
        c.add_user_message("Go on.")
        try:
            body = offline_body(name, c)
        except UnpairedToolCallError:
            continue
        pairs_of(body)
