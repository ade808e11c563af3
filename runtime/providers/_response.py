"""The normalized model answer: blocks, stop reason, usage and cache metrics; and
``ResponseStream``, an answer read delta by delta as it arrives.

Provider-reported token counts live here and never on the conversation: each call reports
the whole conversation's input, not an increment, so per-message actuals cannot exist.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable, Iterator

import msgspec

from .._messages import IncomingMessage
from ..blocks import ContentBlock, TextBlock, ThinkingBlock, ToolUseBlock
from ..errors import IllegalStateError


class StopReason(enum.Enum):
    """Why the model stopped, normalized across providers."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    CONTENT_FILTERED = "content_filtered"
    UNKNOWN = "unknown"


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token counts of one call. ``input_tokens`` is the whole input, cached parts included;
    the cache counters are the parts of it written to and read from the provider's cache.
    ``reasoning_tokens`` is the part of ``output_tokens`` spent reasoning, where the provider
    reports it (OpenAI), else None."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    reasoning_tokens: int | None = None

    @classmethod
    def additive(
        cls, uncached: int, cache_creation: int | None, cache_read: int | None, output: int
    ) -> Usage:
        """The Anthropic/Converse shape: the cache counters come on top of ``uncached``."""
        total = uncached + (cache_creation or 0) + (cache_read or 0)
        return cls(
            input_tokens=total,
            output_tokens=output,
            cache_creation_input_tokens=cache_creation,
            cache_read_input_tokens=cache_read,
        )

    @classmethod
    def subset(
        cls,
        total: int,
        cache_creation: int | None,
        cache_read: int | None,
        output: int,
        reasoning: int | None = None,
    ) -> Usage:
        """The OpenAI shape: ``total`` already includes the cached tokens, ``output`` the
        reasoning tokens."""
        return cls(
            input_tokens=total,
            output_tokens=output,
            cache_creation_input_tokens=cache_creation,
            cache_read_input_tokens=cache_read,
            reasoning_tokens=reasoning,
        )


class LLMResponse(msgspec.Struct, kw_only=True):
    """One model answer: its blocks, why it stopped, what it cost, when it ran.

    ``requested_output_tokens`` is the wire maximum the call was sent with.
    """

    model_id: str
    blocks: list[ContentBlock]
    stop_reason: StopReason = StopReason.END_TURN
    usage: Usage = Usage()
    refusal_category: str | None = None
    refusal_explanation: str | None = None
    requested_output_tokens: int | None = None
    start_time: dt.datetime | None = None
    end_time: dt.datetime | None = None

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.blocks if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.blocks if isinstance(b, ToolUseBlock)]

    @property
    def thinking(self) -> list[ThinkingBlock]:
        return [b for b in self.blocks if isinstance(b, ThinkingBlock)]

    def to_message(self) -> IncomingMessage:
        """The answer as the assistant message to add to the conversation."""
        return IncomingMessage(blocks=self.blocks)

    # -- usage and cache metrics ----------------------------------------------------------------

    @property
    def actual_input_tokens(self) -> int:
        return self.usage.input_tokens

    @property
    def output_tokens(self) -> int:
        return self.usage.output_tokens

    @property
    def cache_creation_input_tokens(self) -> int | None:
        return self.usage.cache_creation_input_tokens

    @property
    def cache_read_input_tokens(self) -> int | None:
        return self.usage.cache_read_input_tokens

    def set_additive_usage(
        self, uncached: int, cache_creation: int | None, cache_read: int | None, output: int
    ) -> None:
        self.usage = Usage.additive(uncached, cache_creation, cache_read, output)

    def set_usage(
        self, total: int, cache_creation: int | None, cache_read: int | None, output: int
    ) -> None:
        self.usage = Usage.subset(total, cache_creation, cache_read, output)

    def has_cache(self) -> bool:
        """True when the call wrote to or read from the provider's cache."""
        return bool(self.cache_creation_input_tokens) or bool(self.cache_read_input_tokens)

    def get_cache_hit_rate(self) -> float:
        """Cache reads over all cache traffic (reads plus writes), 0.0 with none."""
        written = self.cache_creation_input_tokens or 0
        read = self.cache_read_input_tokens or 0
        if written + read == 0:
            return 0.0
        return read / (written + read)


class ResponseStream:
    """An answer's text deltas as they arrive; ``response`` once they are all read.

    Iterate it once. The template's checks (truncation, refusal) run when the last delta
    has been read, so the loop itself raises what ``respond`` would.
    """

    def __init__(
        self,
        chunks: Iterator[str | LLMResponse],
        finish: Callable[[LLMResponse], LLMResponse],
    ) -> None:
        self._chunks = chunks
        self._finish = finish
        self._response: LLMResponse | None = None

    def __iter__(self) -> Iterator[str]:
        for chunk in self._chunks:
            if isinstance(chunk, str):
                yield chunk
            else:
                self._response = self._finish(chunk)

    @property
    def response(self) -> LLMResponse:
        """The complete response.

        Raises:
            IllegalStateError: the stream has not been read to its end.
        """
        if self._response is None:
            raise IllegalStateError("The stream has not been read to its end yet.")
        return self._response

    def get_final_response(self) -> LLMResponse:
        """Read whatever is left of the stream and return the complete response."""
        for _ in self:
            pass
        return self.response
