"""What a turn asks its driver to do (the effects ``turn_steps`` yields) and how it backs off.

``_turn.turn_steps`` yields one of these, and the sync or async driver (``_drive.py``)
performs it and sends back its result. They carry data only (frozen structs: several
are made every turn, and a struct is made in C).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from parlour.runtime import ConversationContext
from parlour.runtime.blocks import ToolUseBlock
from parlour.runtime.compaction import ContextWindowManager

from ._tools import ToolRound


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff for retryable provider errors, beyond the SDK's own retries.

    Attempt ``n`` (from 0) waits ``min(base_s * 2**n, max_s)``; a turn retries at most
    ``attempts`` times and waits at most ``budget_s`` seconds in all.
    """

    attempts: int = 3
    base_s: float = 0.5
    max_s: float = 8.0
    budget_s: float = 30.0

    def delay(self, attempt: int, waited: float) -> float | None:
        """The wait before retry ``attempt``, or None when the budget forbids it."""
        wait = min(self.base_s * 2.0**attempt, self.max_s)
        if attempt >= self.attempts or waited + wait > self.budget_s:
            return None
        return wait


class Obtain(msgspec.Struct, frozen=True):
    """Obtain the lease; the result is the context."""


class Save(msgspec.Struct, frozen=True):
    """Save at a boundary; ``wait=False`` where the turn goes on working (the save is
    deferred, and the turn's next waited save or its release waits for it)."""

    context: ConversationContext
    wait: bool = True


class Compact(msgspec.Struct, frozen=True):
    """Fit the conversation to its window (``fit``, ``afit`` on a loop) with the seat's
    reserve; the result is the ``FitReport``."""

    context: ConversationContext
    manager: ContextWindowManager
    reserve: int


class CallModel(msgspec.Struct, frozen=True):
    """One model call; the driver streams its text as events; the result is the response."""

    context: ConversationContext


class RunTools(msgspec.Struct, frozen=True):
    """Start the calls, concurrently; the result is the round (``_tools.ToolRound``) and
    the first results to finish (``_tools.Finished``: at least one)."""

    calls: Sequence[ToolUseBlock]


class NextResults(msgspec.Struct, frozen=True):
    """Wait for the next calls of a started round to finish; the result is their results
    (``_tools.Finished``: at least one)."""

    round: ToolRound


class Pause(msgspec.Struct, frozen=True):
    seconds: float


class Release(msgspec.Struct, frozen=True):
    """Release the lease with the thinker's retention."""


Effect = Obtain | Save | Compact | CallModel | RunTools | NextResults | Pause | Release
