"""A snapshot round trip: what a conversation holds comes back; results whose call is
nowhere are dropped; an answer stays dehydrated until a handler is given."""

from __future__ import annotations

import msgspec
import pytest

from parlour.runtime import (
    ConversationContext,
    IncomingMessage,
    OutgoingMessage,
)
from parlour.runtime import blocks as b
from parlour.runtime.snapshots import decode_snapshot, encode_snapshot


class Point(msgspec.Struct):
    x: int
    y: int


def test_a_snapshot_round_trip_keeps_messages_objective_tools_and_typed_values() -> None:
    # the round trip keeps what the skeleton holds
    c = ConversationContext("c1", user_id="alice", workflow_id="wf")
    c.put_main_objective("task", "Be brief.")
    c.add_tool(b.ToolDefinitionBlock(name="get_time", description="now", schema_json="{}"))
    c.add_message(OutgoingMessage(blocks=[b.PojoBlock(value=Point(x=1, y=2))]))
    c.add_message(
        IncomingMessage(blocks=[b.ToolUseBlock(id="t1", name="get_time", input_json="{}")])
    )
    c.add_message(
        OutgoingMessage(blocks=[b.ToolResultBlock(tool_use_id="t1", content="ok", is_error=True)])
    )
    snapshot = decode_snapshot(encode_snapshot(c.to_snapshot()), "c1")
    restored = snapshot.to_conversation()
    assert restored.to_snapshot() == c.to_snapshot()
    assert restored.messages[0].blocks[0] == b.PojoBlock(value=Point(x=1, y=2))
    assert list(restored.get_main_objective()) == ["task"]
    assert list(restored.declared_tools()) == ["get_time"]


def test_a_restore_drops_tool_results_whose_call_is_nowhere() -> None:
    c = ConversationContext("c1")
    c.add_user_message("question")
    c.add_message(
        IncomingMessage(blocks=[b.ToolUseBlock(id="toolu_matched", name="t", input_json="{}")])
    )
    c.add_message(
        OutgoingMessage(
            blocks=[
                b.ToolResultBlock(tool_use_id="toolu_matched", content="ok"),
                b.ToolResultBlock(tool_use_id="toolu_orphan", content="lost"),
            ]
        )
    )
    c.add_message(OutgoingMessage(blocks=[b.ToolResultBlock(tool_use_id="gone", content="x")]))
    restored = c.to_snapshot().to_conversation()
    results = [
        blk for m in restored.messages for blk in m.blocks if isinstance(blk, b.ToolResultBlock)
    ]
    assert [r.tool_use_id for r in results] == ["toolu_matched"]
    assert len(restored.messages) == 3
    assert restored.messages[1].blocks == [
        b.ToolUseBlock(id="toolu_matched", name="t", input_json="{}")
    ]


def test_a_restored_answer_is_dehydrated_until_a_handler_is_given() -> None:
    from parlour.runtime import StringResponseHandler
    from parlour.runtime.errors import DehydratedError

    c = ConversationContext("c1")
    c.add_user_message("question")
    c.add_message(IncomingMessage("the answer", response_handler=StringResponseHandler()))
    restored = ConversationContext.from_snapshot(c.to_snapshot())
    answer = restored.messages[1]
    assert isinstance(answer, IncomingMessage) and answer.is_dehydrated()
    with pytest.raises(DehydratedError):
        answer.get_response()
    answer.rehydrate(StringResponseHandler())
    assert not answer.is_dehydrated() and answer.get_response() == "the answer"


def test_a_snapshot_restores_into_a_conversation_context_either_way_alike() -> None:
    c = ConversationContext("c1")
    c.add_user_message("question")
    snapshot = c.to_snapshot()
    restored = snapshot.to_conversation()
    assert type(restored) is ConversationContext
    again = ConversationContext.from_snapshot(snapshot)
    assert restored.to_snapshot() == again.to_snapshot() == snapshot
