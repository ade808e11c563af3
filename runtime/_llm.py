"""The shared client template, the normalized response, and stop reasons.

Each provider dialect implements ``_send``; everything else (render, timing, response
shape) lives here once, so behaviour is the same for every provider and for the offline
``ScriptedClient``.
"""

from __future__ import annotations

import datetime as dt
import enum
from abc import ABC, abstractmethod

import msgspec

from parlour.runtime._context import ConversationContext
from parlour.runtime._handlers import ContentFormatter, GenericContentFormatter
from parlour.runtime._messages import IncomingMessage
from parlour.runtime._prepared import PreparedConversation
from parlour.runtime.blocks import ContentBlock, TextBlock, ToolUseBlock


class StopReason(enum.Enum):
    """Why the model stopped, normalized across providers."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    CONTENT_FILTERED = "content_filtered"
    UNKNOWN = "unknown"


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Provider-reported token counts for one call. They live on the response, never on the
    conversation: each call reports the whole conversation's input, not an increment."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class LLMResponse(msgspec.Struct, kw_only=True):
    """One model answer: its blocks, why it stopped, what it cost, when it ran."""

    model_id: str
    blocks: list[ContentBlock]
    stop_reason: StopReason = StopReason.END_TURN
    usage: Usage = Usage()
    start_time: dt.datetime | None = None
    end_time: dt.datetime | None = None

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.blocks if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.blocks if isinstance(b, ToolUseBlock)]

    def to_message(self) -> IncomingMessage:
        """The answer as the assistant message to add to the conversation."""
        return IncomingMessage(blocks=self.blocks)


class LLMClient(ABC):
    """The template every client goes through: render, send, time, normalize.

    Thread-safety: a client holds no per-call state, so one instance serves many threads.
    """

    model_id: str = "unknown"
    formatter: ContentFormatter = GenericContentFormatter()

    def respond(self, conversation: ConversationContext, thinking_active: bool = False) -> LLMResponse:
        """Render ``conversation`` and ask the model for the next assistant turn.

        The conversation is only read (and its head frozen by the render); the caller adds
        ``response.to_message()`` itself.
        """
        prepared = conversation.prepare_messages_for_llm(self.formatter, thinking_active)
        start = dt.datetime.now(dt.UTC)
        response = self._send(prepared)
        response.start_time = start
        response.end_time = dt.datetime.now(dt.UTC)
        return response

    @abstractmethod
    def _send(self, prepared: PreparedConversation) -> LLMResponse:
        """Send one prepared conversation in this client's dialect."""
