"""The ladder's levels and what a compaction reports: the level, the summary calls it made
(each with its own usage), and, from the window manager, the tokens before and after.

Plain frozen data: safe to hand to any thread, log or encode.
"""

from __future__ import annotations

import enum

import msgspec

from ..providers._response import Usage

__all__ = ["CompactionLevel", "CompactionResult", "CompactionStep", "FitReport", "SummaryCall"]


class CompactionLevel(enum.Enum):
    """How much a compaction summarizes, from least to most.

    ``LIGHT`` summarizes tool results only; ``MODERATE`` turns each earlier exchange into one
    summary; ``AGGRESSIVE`` collapses everything that may be compacted into one summary;
    ``MAXIMUM`` does the same to a much shorter target, a second pass over its own summary
    when that is still too long, and shorter summaries of the tool results it must keep.
    """

    LIGHT = "light"
    MODERATE = "moderate"
    AGGRESSIVE = "aggressive"
    MAXIMUM = "maximum"

    @property
    def collapses(self) -> bool:
        """Whether this level collapses the conversation into one summary."""
        return self in (CompactionLevel.AGGRESSIVE, CompactionLevel.MAXIMUM)


LADDER: tuple[CompactionLevel, ...] = tuple(CompactionLevel)


class SummaryCall(msgspec.Struct, frozen=True, kw_only=True):
    """One summary call: the model that answered and its usage (None when the summarizer
    reported text only, as a plain ``complete(prompt) -> str`` callable does)."""

    model_id: str | None = None
    usage: Usage | None = None


class CompactionResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one compaction at one level did.

    ``replaced`` counts the messages rewritten or removed (0: the messages are exactly as
    before). ``error`` is the message of the failure that left them as before, below
    ``MAXIMUM``; at ``MAXIMUM`` a failure is raised instead.
    """

    level: CompactionLevel
    messages_before: int = 0
    messages_after: int = 0
    replaced: int = 0
    calls: tuple[SummaryCall, ...] = ()
    error: str | None = None

    @property
    def changed(self) -> bool:
        return self.replaced > 0


class CompactionStep(msgspec.Struct, frozen=True, kw_only=True):
    """One rung the window manager climbed: the compaction and the measure around it."""

    result: CompactionResult
    tokens_before: int
    tokens_after: int

    @property
    def level(self) -> CompactionLevel:
        return self.result.level


class FitReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``ContextWindowManager.fit`` found and did: the measure before and after, the
    trigger and absolute limits it applied, and each rung climbed (none when it fitted)."""

    tokens_before: int
    tokens_after: int
    trigger_tokens: int
    absolute_limit: int
    steps: tuple[CompactionStep, ...] = ()

    @property
    def compacted(self) -> bool:
        """Whether any rung changed the messages."""
        return any(step.result.changed for step in self.steps)

    @property
    def levels(self) -> tuple[CompactionLevel, ...]:
        return tuple(step.level for step in self.steps)

    @property
    def calls(self) -> tuple[SummaryCall, ...]:
        """Every summary call of every rung, in order (each with its own usage)."""
        return tuple(call for step in self.steps for call in step.result.calls)
