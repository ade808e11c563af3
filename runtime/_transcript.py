"""Transcript: a conversation as text for a reader other than its model."""

from __future__ import annotations

from collections.abc import Iterable

from ._context import ConversationContext
from ._messages import Message
from .blocks import transcript_text


class Transcript:
    """Renders a conversation for a person, a judge or a log.

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
            lines.extend(line for b in message.blocks if (line := transcript_text(b)))
        elif message.raw_content:
            lines.append(message.raw_content)
        return "".join(line + "\n" for line in lines)
