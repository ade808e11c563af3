"""Transcript: a conversation as text for a reader other than its model."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from parlour.runtime._context import ConversationContext
from parlour.runtime._messages import Message
from parlour.runtime.blocks import (
    ContentBlock,
    FileBlock,
    ImageBlock,
    JsonBlock,
    PojoBlock,
    SkillBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

_json = msgspec.json.Encoder()


class Transcript:
    """Renders a conversation for a person, a judge or a log (B105-B108).

    Every message under its role (``[user]``, ``[assistant]``), in order: the text as said,
    each tool call with its name, id and arguments, each tool result against the call it
    answers (an error result marked), a skill by name, an attachment by kind, typed data as
    its JSON. Thinking blocks (the provider's channel, meant for nobody else) and tool
    schemas are left out. Every line ends with a newline.
    """

    @staticmethod
    def render(conversation: ConversationContext) -> str:
        """The transcript of ``conversation``'s messages; reading it changes nothing."""
        return Transcript.render_messages(conversation.messages)

    @staticmethod
    def render_messages(messages: Iterable[Message]) -> str:
        """The transcript of ``messages``, in order."""
        return "".join(Transcript.render_message(m) for m in messages)

    @staticmethod
    def render_message(message: Message) -> str:
        lines = [f"[{message.role}]"]
        if message.blocks:
            lines.extend(line for b in message.blocks if (line := _line(b)))
        elif message.raw_content:
            lines.append(message.raw_content)
        return "".join(line + "\n" for line in lines)


def _line(block: ContentBlock) -> str:
    """One block's transcript line; an empty string leaves the block out."""
    match block:
        case TextBlock(text=text):
            return text
        case ToolUseBlock(id=call_id, name=name, input_json=arguments):
            return f"<tool call {name} id={call_id}> {arguments}"
        case ToolResultBlock(tool_use_id=call_id, content=content, is_error=is_error):
            return f"<tool result id={call_id}{' error' if is_error else ''}> {content}"
        case SkillBlock(name=name):
            return f"<skill {name}>"
        case ImageBlock(mime_type=mime_type):
            return f"<image {mime_type}>"
        case FileBlock(filename=filename, mime_type=mime_type):
            return f"<file {filename or mime_type}>"
        case PojoBlock(value=value):
            return _json.encode(value).decode()
        case JsonBlock(json=json):
            return json
    return ""  # thinking, redacted thinking and tool definitions are not for the reader
