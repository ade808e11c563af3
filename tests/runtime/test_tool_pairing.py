"""A restore answers every tool call its process left without a result (killed while the tool
ran): an error result saying the call was interrupted, right after the call, once."""

from __future__ import annotations

from pathlib import Path

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import (
    ConversationContext,
    IncomingMessage,
    OutgoingMessage,
    PojoResponseHandler,
    ScriptedClient,
    dangling_calls,
)
from parlour.runtime.blocks import (
    ContentBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from parlour.runtime.snapshots import (
    decode_snapshot,
    encode_snapshot,
    repaired_messages,
)
from parlour.stores import LmdbStore

INTERRUPTED = (
    "The call to look_up was interrupted before it returned a result, so its outcome is unknown."
)


class Tide(msgspec.Struct):
    high_at: str


def call(call_id: str, name: str = "look_up") -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name=name, input_json='{"q": "tides"}')


def result(call_id: str, text: str = "high at nine") -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call_id, content=text)


def interrupted(call_id: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call_id, content=INTERRUPTED, is_error=True)


def asked() -> ConversationContext:
    c = ConversationContext("p-1", user_id="alice")
    c.add_user_message("When is high tide?")
    return c


def restored(c: ConversationContext) -> ConversationContext:
    return decode_snapshot(encode_snapshot(c.to_snapshot()), "p-1").to_conversation()


def shape(c: ConversationContext) -> list[tuple[str, str, list[ContentBlock]]]:
    """Each message as (kind, role, blocks)."""
    return [(type(m).__name__, m.role, list(m.blocks)) for m in c.messages]


def test_a_conversation_ending_with_a_call_gets_the_interrupted_result_after_it() -> None:
    c = asked()
    c.add_message(IncomingMessage(blocks=[TextBlock(text="Looking."), call("toolu_1")]))
    assert shape(restored(c)) == [
        *shape(c),
        ("OutgoingMessage", "user", [interrupted("toolu_1")]),
    ]


def test_user_messages_stored_after_a_dangling_call_follow_its_interrupted_result() -> None:
    c = asked()
    c.add_message(IncomingMessage(blocks=[call("toolu_1")]))
    c.add_user_message("Hello?")
    c.add_user_message("Are you there?")
    before = shape(c)
    assert shape(restored(c)) == [
        *before[:2],
        ("OutgoingMessage", "user", [interrupted("toolu_1")]),
        *before[2:],
    ]


def test_only_the_calls_without_a_result_are_answered_ahead_of_the_results_given() -> None:
    c = asked()
    c.add_message(IncomingMessage(blocks=[call("toolu_1"), call("toolu_2"), call("toolu_3")]))
    c.add_message(OutgoingMessage(blocks=[result("toolu_2")]))
    c.add_user_message("And tomorrow?")
    before = shape(c)
    answers = [interrupted("toolu_1"), interrupted("toolu_3"), result("toolu_2")]
    assert shape(restored(c)) == [
        *before[:2],
        ("OutgoingMessage", "user", answers),
        before[3],
    ]


def test_a_restore_with_a_response_handler_keeps_its_instructions_after_every_result() -> None:
    # a restored outgoing message takes the handler, whose instructions end its turn
    c = asked()
    c.add_message(IncomingMessage(blocks=[call("toolu_1"), call("toolu_2")]))
    c.add_message(OutgoingMessage(blocks=[result("toolu_2")]))
    resumed = c.to_snapshot().to_conversation(PojoResponseHandler(Tide))
    client = ScriptedClient()
    turns = client.build_request(resumed).prepared.turns  # refused if anything stood between
    assert [type(b) for b in turns[2].blocks] == [ToolResultBlock, ToolResultBlock, TextBlock]


def test_the_interrupted_result_names_the_tool_it_answers() -> None:
    c = asked()
    c.add_message(IncomingMessage(blocks=[call("toolu_1", name="send_invoice")]))
    (answer,) = restored(c).messages[-1].blocks
    assert isinstance(answer, ToolResultBlock) and answer.is_error
    assert answer.content == INTERRUPTED.replace("look_up", "send_invoice")


def test_a_paired_record_is_restored_from_the_very_list_it_holds() -> None:
    c = asked()
    c.add_message(IncomingMessage(blocks=[call("toolu_1")]))
    c.add_message(OutgoingMessage(blocks=[result("toolu_1")]))
    stored = c.to_snapshot().messages
    assert repaired_messages(stored) is stored
    assert shape(restored(c)) == shape(c)


def test_dangling_calls_name_the_message_the_tool_and_its_arguments() -> None:
    c = asked()
    c.add_message(IncomingMessage(blocks=[call("toolu_1"), call("toolu_2", name="fetch")]))
    c.add_message(OutgoingMessage(blocks=[result("toolu_1")]))
    for messages in (c.messages, c.to_snapshot().messages):  # live or stored
        (dangling,) = dangling_calls(messages)
        assert (dangling.message, dangling.id, dangling.name) == (1, "toolu_2", "fetch")
        assert dangling.arguments == '{"q": "tides"}'
    assert dangling_calls(restored(c).messages) == []


def test_an_id_used_again_pairs_each_call_with_its_own_result() -> None:
    # the text dialects number calls by their place in the turn: look_up#1 every time
    c = asked()
    c.add_message(IncomingMessage(blocks=[call("look_up#1")]))
    c.add_message(OutgoingMessage(blocks=[result("look_up#1")]))
    c.add_user_message("Again?")
    c.add_message(IncomingMessage(blocks=[call("look_up#1")]))
    (dangling,) = dangling_calls(c.messages)
    assert dangling.message == 4
    assert restored(c).messages[-1].blocks == [interrupted("look_up#1")]


def test_a_broken_record_survives_the_lmdb_store_with_its_repair_kept_once(
    tmp_path: Path,
) -> None:
    c = asked()
    c.add_message(IncomingMessage(blocks=[TextBlock(text="Looking."), call("toolu_1")]))
    c.add_user_message("Hello?")
    with LmdbStore(tmp_path / "lmdb") as store:
        c.stored_version = store.create_context(c.to_snapshot(), "alice")
        loaded = store.load("p-1", "alice")
        assert loaded is not None
        first = loaded.to_conversation()
        first.add_user_message("Are you there?")
        first.stored_version = store.save_context(first.to_snapshot(), "alice")
        again = store.load("p-1", "alice")
        assert again is not None
        second = again.to_conversation()
    assert [m.blocks for m in again.messages] == [m.blocks for m in first.messages]
    assert (
        shape(second)
        == shape(first)
        == [
            *shape(c)[:2],
            ("OutgoingMessage", "user", [interrupted("toolu_1")]),
            shape(c)[2],
            ("OutgoingMessage", "user", [TextBlock(text="Are you there?")]),
        ]
    )


# -- any stored conversation ------------------------------------------------------------------

STEP = st.one_of(
    st.just("user"),
    st.just("assistant"),
    st.tuples(st.lists(st.booleans(), min_size=1, max_size=3), st.integers(0, 2)),
)


def build(steps: list[str | tuple[list[bool], int]]) -> ConversationContext:
    c = asked()
    for n, step in enumerate(steps):
        if isinstance(step, str):
            if step == "user":
                c.add_user_message(f"u{n}")
            else:
                c.add_message(IncomingMessage(f"a{n}", [TextBlock(text=f"a{n}")]))
            continue
        answered, users = step
        ids = [f"c{n}_{k}" for k in range(len(answered))]
        c.add_message(IncomingMessage(blocks=[call(i) for i in ids]))
        results = [result(i) for i, done in zip(ids, answered, strict=True) if done]
        if results:
            c.add_message(OutgoingMessage(blocks=results))
        for k in range(users):
            c.add_user_message(f"u{n}.{k}")
    return c


def is_repair(block: ContentBlock) -> bool:
    return isinstance(block, ToolResultBlock) and block.content == INTERRUPTED


@settings(max_examples=200, deadline=None)
@given(st.lists(STEP, max_size=8))
def test_a_restore_answers_every_dangling_call_once_and_drops_nothing(
    steps: list[str | tuple[list[bool], int]],
) -> None:
    c = build(steps)
    missing = [d.id for d in dangling_calls(c.messages)]
    once = restored(c)
    twice = decode_snapshot(encode_snapshot(once.to_snapshot()), "p-1").to_conversation()
    assert dangling_calls(once.messages) == []
    assert shape(twice) == shape(once)  # a repaired record needs no repair
    stored = once.to_snapshot().messages
    blocks = [b for m in stored for b in m.blocks]
    assert [b.tool_use_id for b in blocks if isinstance(b, ToolResultBlock) and is_repair(b)] == (
        missing
    )
    assert [b for b in blocks if not is_repair(b)] == [
        b for m in c.to_snapshot().messages for b in m.blocks
    ]
