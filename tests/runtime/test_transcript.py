"""Transcripts."""

from __future__ import annotations

import msgspec

from parlour.runtime import (
    ConversationContext,
    GenericContentFormatter,
    IncomingMessage,
    OutgoingMessage,
    Transcript,
)
from parlour.runtime.blocks import (
    FileBlock,
    ImageBlock,
    JsonBlock,
    PojoBlock,
    SkillBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
)

APPENDIX_A = """\
[user]
How many days until the end of the year?
[assistant]
I need today's date.
<tool call get_current_time id=call-1> {"timezone":"UTC"}
[user]
<tool result id=call-1> {"now":"2026-09-22"}
<tool result id=call-2 error> no such tool
[assistant]
100 days.
"""


class Point(msgspec.Struct):
    x: int
    y: int


def transcript_test_conversation() -> ConversationContext:
    c = ConversationContext()
    c.add_user_message("How many days until the end of the year?")
    c.add_message(
        IncomingMessage(
            blocks=[
                ThinkingBlock(text="let me check the date", signature="sig"),
                TextBlock(text="I need today's date."),
                ToolUseBlock(id="call-1", name="get_current_time", input_json='{"timezone":"UTC"}'),
            ]
        )
    )
    c.add_message(
        OutgoingMessage(
            blocks=[
                ToolResultBlock(tool_use_id="call-1", content='{"now":"2026-09-22"}'),
                ToolResultBlock(tool_use_id="call-2", content="no such tool", is_error=True),
            ]
        )
    )
    c.add_message(IncomingMessage("100 days."))
    return c


def test_the_transcript_matches_appendix_a() -> None:
    assert Transcript.render(transcript_test_conversation()) == APPENDIX_A


def test_thinking_is_left_out() -> None:
    assert "let me check the date" not in Transcript.render(transcript_test_conversation())


def test_a_late_tool_announcement_shows_no_schema() -> None:
    c = ConversationContext()
    c.add_tool(ToolDefinitionBlock(name="early", description="in the head"))
    c.add_user_message("hi")
    c.prepare_messages_for_llm(GenericContentFormatter())
    c.add_tool(ToolDefinitionBlock(name="late", description="SCHEMA-DESC", schema_json='{"S":1}'))
    c.prepare_messages_for_llm(GenericContentFormatter())
    rendered = Transcript.render(c)
    assert rendered.endswith("[user]\nAdditional tools now available:\n")
    assert "SCHEMA-DESC" not in rendered and '{"S":1}' not in rendered


def test_skills_attachments_and_data_render_by_kind() -> None:
    c = ConversationContext()
    c.add_message(
        OutgoingMessage(
            blocks=[
                SkillBlock(name="summarize", body="the whole skill body"),
                ImageBlock(data="aGk=", mime_type="image/png"),
                FileBlock(data="aGk=", mime_type="application/pdf", filename="report.pdf"),
                PojoBlock(value=Point(x=1, y=2)),
                JsonBlock(json='{"k":"v"}'),
            ]
        )
    )
    assert Transcript.render(c) == (
        "[user]\n<skill summarize>\n<image image/png>\n<file report.pdf>\n"
        '{"x":1,"y":2}\n{"k":"v"}\n'
    )


def test_rendering_leaves_the_conversation_as_it_was() -> None:
    c = transcript_test_conversation()
    before = [list(m.blocks) for m in c.messages]
    Transcript.render(c)
    assert [m.blocks for m in c.messages] == before
    assert not c.is_frozen()
