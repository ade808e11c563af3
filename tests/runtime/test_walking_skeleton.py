"""The runtime's walking skeleton: roles, the objective map, utterances, blocks, snapshots,
and the scripted model, end to end with no actor started."""

from __future__ import annotations

import typing

import msgspec
import pytest

from parlour.runtime import (
    ConversationContext,
    IncomingMessage,
    OutgoingMessage,
    ScriptedClient,
    StopReason,
    TurnRole,
)
from parlour.runtime import blocks as b
from parlour.runtime.errors import UncorrectableLLMError
from parlour.runtime.snapshots import decode_snapshot, encode_snapshot


def test_turn_role_has_two_members_and_matches_ignoring_case() -> None:
    assert [r.name for r in TurnRole] == ["USER", "ASSISTANT"]
    assert TurnRole.of("user") is TurnRole.USER
    assert TurnRole.of("Assistant") is TurnRole.ASSISTANT


@pytest.mark.parametrize("role", ["system", "tool", None])
def test_turn_role_refuses_anything_else_with_the_spec_message(role: str | None) -> None:
    with pytest.raises(UncorrectableLLMError) as raised:
        TurnRole.of(role)
    assert str(raised.value) == (
        f"Message role '{role}' is not a conversation turn. Turns are user or assistant; "
        "system content goes through the main objective."
    )


def test_the_objective_is_system_text_and_never_a_turn() -> None:
    c = ConversationContext("c1")
    c.put_main_objective("task", "OBJECTIVE-MARKER do things")
    c.add_message(OutgoingMessage("hi", role="assistant"))
    c.add_user_message("question")
    prepared = c.prepare_messages_for_llm()
    assert "OBJECTIVE-MARKER" in prepared.system_text
    assert [t.role for t in prepared.turns] == [TurnRole.ASSISTANT, TurnRole.USER]
    assert all(
        "OBJECTIVE-MARKER" not in getattr(blk, "text", "")
        for t in prepared.turns
        for blk in t.blocks
    )


def test_a_reput_keeps_its_position_and_empty_values_make_no_slot() -> None:
    c = ConversationContext("c1")
    c.put_main_objective("task", "FIRST")
    c.put_main_objective("extra", "EXTRA")
    c.put_main_objective("task", "OBJ")
    c.put_main_objective("k", "")
    c.put_main_objective("k", None)
    assert not c.has_main_objective("k")
    copy = c.get_main_objective()
    copy["injected"] = b.TextBlock(text="x")
    assert not c.has_main_objective("injected")
    system = c.prepare_messages_for_llm().system_text
    assert "FIRST" not in system and system.index("OBJ") < system.index("EXTRA")


def test_the_first_utterance_skips_app_authored_messages_and_titles_the_conversation() -> None:
    c = ConversationContext("c1")
    assert c.title == "Untitled Conversation"
    c.add_message(OutgoingMessage("PROJECT: Acme Demo (ID: 201)…", app_authored=True))
    assert c.first_user_utterance() is None
    c.add_user_message("Are you working?")
    assert c.first_user_utterance() == "Are you working?" and c.title == "Are you working?"
    long = ConversationContext("c2")
    long.add_user_message("x" * 60)
    assert long.title == "x" * 50 + "..."


def test_the_block_union_has_eleven_kinds_with_stable_tags() -> None:
    kinds = typing.get_args(b.ContentBlock)
    assert sorted(k.__struct_config__.tag for k in kinds) == sorted(
        [
            "text",
            "pojo",
            "json",
            "tool_definition",
            "image",
            "file",
            "tool_use",
            "tool_result",
            "thinking",
            "redacted_thinking",
            "skill",
        ]
    )
    block = b.TextBlock(text="x")
    with pytest.raises(AttributeError):
        block.text = "y"  # type: ignore[misc]
    assert block == b.TextBlock(text="x")


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


def test_the_scripted_client_calls_a_named_tool_then_reports_its_result() -> None:
    c = ConversationContext("c1")
    c.add_tool(b.ToolDefinitionBlock(name="get_time", description="now"))
    c.add_user_message("please use get_time")
    client = ScriptedClient()
    first = client.respond(c)
    assert first.stop_reason is StopReason.TOOL_USE
    [call] = first.tool_uses
    assert call.name == "get_time"
    c.add_message(first.to_message())
    c.add_message(OutgoingMessage(blocks=[b.ToolResultBlock(tool_use_id=call.id, content="12:00")]))
    second = client.respond(c)
    assert second.stop_reason is StopReason.END_TURN and "12:00" in second.text
    assert second.end_time is not None and second.start_time is not None
    assert ScriptedClient(["scripted answer"]).respond(c).text == "scripted answer"


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
