"""``ContextWindowManager``: the comfort window, the compaction trigger, the hard limit, and
the ladder climbed between them before a model call.

The comfort window resolves in three levels (the default, the catalog entry's
``comfort_window_tokens``, the seat's override), capped by the model's hard context; the
trigger is a share of it. ``fit`` climbs LIGHT, MODERATE, AGGRESSIVE, MAXIMUM only as far as
needed and raises ``ContextOverflowError`` only when, after the last rung, input plus the
output reserve still exceeds the hard context.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeGuard

import msgspec
from loguru import logger

from .._context import ConversationContext
from .._messages import Message
from ..errors import ContextOverflowError
from ..models._budget import ModelBinding
from ..models._spec import ModelSpec
from ._compactor import (
    AsyncContextCompactor,
    ContextCompactor,
    LLMContextCompactor,
)
from ._counters import LocalTokenCounter, TokenCounter
from ._levels import (
    LADDER,
    CompactionLevel,
    CompactionResult,
    CompactionStep,
    FitReport,
)

__all__ = ["DEFAULT_COMFORT_CONTEXT_TOKENS", "DEFAULT_COMPACTION_TRIGGER", "ContextWindowManager"]

DEFAULT_COMFORT_CONTEXT_TOKENS = 128_000
DEFAULT_COMPACTION_TRIGGER = 0.92


def _positive_tokens(value: int | None, what: str) -> int | None:
    if value is not None and (isinstance(value, bool) or value <= 0):
        raise ValueError(f"{what} must be a positive number of tokens, not {value!r}.")
    return value


def _trigger(value: float | None) -> float:
    if value is None:
        return DEFAULT_COMPACTION_TRIGGER
    if not 0.0 < value <= 1.0:
        raise ValueError(f"The compaction trigger must be in (0, 1], not {value!r}.")
    return float(value)


class ContextWindowManager:
    """Keeps one model's conversations inside its window.

    Args:
        spec: the model the next call goes to (its hard context, comfort window, tokenizer).
        comfort_override: the seat's own comfort window, in tokens.
        trigger_override: the share of the effective limit at which compaction starts.
        compactor: climbs the ladder; with None the manager only measures and refuses.
        counter: how a conversation is measured; the local tiktoken estimate by default.

    Raises:
        ValueError: an override (or the entry's comfort window) is not a positive token
            count, or the trigger is outside (0, 1].

    Thread-safety: immutable after construction; ``fit`` mutates only the conversation it
    is given, which its owner alone may touch.
    """

    def __init__(
        self,
        spec: ModelSpec,
        comfort_override: int | None = None,
        trigger_override: float | None = None,
        compactor: ContextCompactor | None = None,
        *,
        counter: TokenCounter | None = None,
    ) -> None:
        self.spec = spec
        self._override = _positive_tokens(comfort_override, "A comfort window override")
        entry = f"Model {spec.id}'s comfort_window_tokens"
        self._entry = _positive_tokens(spec.comfort_window_tokens, entry)
        self.trigger = _trigger(trigger_override)
        self.compactor = compactor
        self._counter = counter or LocalTokenCounter(spec)
        self._trigger_at = self.trigger_tokens()  # the check before every call reads it

    # -- the numbers ----------------------------------------------------------------------------

    def comfort_tokens(self) -> int:
        """The comfort window: the override, else the entry's, else the default."""
        return self._override or self._entry or DEFAULT_COMFORT_CONTEXT_TOKENS

    def effective_limit(self) -> int:
        """The comfort window, capped by the model's hard context."""
        return min(self.comfort_tokens(), self.spec.max_context_tokens)

    def trigger_tokens(self) -> float:
        """The measure above which compaction starts: trigger x effective limit."""
        return self.trigger * self.effective_limit()

    def absolute_limit(self, conversation: ConversationContext, reserve: int | None = None) -> int:
        """The most input the call may carry: the hard context minus the output reserve
        (``reserve``, else its binding's ``output_reserve(spec)``, ``ModelBinding.of``).

        Raises:
            UncorrectableLLMError: no reserve is given and the conversation declares no
                output size or depth.
        """
        if reserve is None:
            reserve = ModelBinding.of(conversation).output_reserve(self.spec)
        return self.spec.max_context_tokens - reserve

    def measure(self, conversation: ConversationContext) -> int:
        """The conversation's input tokens (cheap when little changed: counts are memoized)."""
        return self._counter.count_tokens(conversation)

    def needs_compaction(self, conversation: ConversationContext) -> bool:
        """Whether the conversation is compactable and measures above the trigger."""
        if not conversation.is_compactable():
            return False
        trigger = self.trigger_tokens()
        return (
            not self._bounded_under(conversation, trigger) and self.measure(conversation) > trigger
        )

    def surely_fits(self, conversation: ConversationContext, reserve: int | None = None) -> bool:
        """True when a cheap upper bound of the measure (the local estimate's, which encodes
        nothing new) is under both the trigger and the absolute limit: ``fit`` would then
        climb no rung and raise nothing. False means only that ``fit`` must measure.

        Raises:
            UncorrectableLLMError: as ``absolute_limit``.
        """
        if reserve is None:
            reserve = ModelBinding.of(conversation).output_reserve(self.spec)
        return self._bounded_under(
            conversation, min(self._trigger_at, self.spec.max_context_tokens - reserve)
        )

    def _bounded_under(self, conversation: ConversationContext, limit: float) -> bool:
        counter = self._counter
        if not isinstance(counter, LocalTokenCounter):
            return False  # another counter's measure has no bound here
        return counter.bound_tokens(conversation) <= limit

    # -- the ladder -----------------------------------------------------------------------------

    def ensure_fits(
        self, conversation: ConversationContext, reserve: int | None = None
    ) -> ConversationContext:
        """``fit``, returning the conversation itself (compacted in place or unchanged).

        Raises:
            ContextOverflowError: as ``fit``.
        """
        self.fit(conversation, reserve)
        return conversation

    def fit(self, conversation: ConversationContext, reserve: int | None = None) -> FitReport:
        """Climb the ladder while the conversation measures above the trigger or above the
        absolute limit, stopping at the first rung after which it is under both.

        Raises:
            ContextOverflowError: input plus ``reserve`` still exceeds the hard context
                after the last rung (or with no compactor, or a non-compactable
                conversation); it carries the measure, the reserve and the limit.
            UncorrectableLLMError: no ``reserve`` is given and the conversation declares no
                output size or depth.
            Exception: a failure at MAXIMUM, as the compactor raised it.
        """
        ladder = self._ladder(conversation, reserve)
        for level in ladder:
            assert self.compactor is not None  # the ladder yields nothing without one
            before = list(conversation.messages)
            ladder.record(self.compactor.compact(conversation, level), before)
        return ladder.report()

    async def afit(
        self, conversation: ConversationContext, reserve: int | None = None
    ) -> FitReport:
        """``fit`` with each rung's summaries made concurrently when the compactor can be
        awaited (an ``AsyncContextCompactor``, or an ``LLMContextCompactor`` given
        ``acomplete``); otherwise its sync ``compact`` runs inline.

        Raises:
            ContextOverflowError: as ``fit``.
        """
        ladder = self._ladder(conversation, reserve)
        for level in ladder:
            compactor, before = self.compactor, list(conversation.messages)
            assert compactor is not None  # the ladder yields nothing without one
            if _awaitable(compactor):
                ladder.record(await compactor.acompact(conversation, level), before)
            else:
                ladder.record(compactor.compact(conversation, level), before)
        return ladder.report()

    async def aensure_fits(
        self, conversation: ConversationContext, reserve: int | None = None
    ) -> ConversationContext:
        """``afit``, returning the conversation itself."""
        await self.afit(conversation, reserve)
        return conversation

    def _ladder(self, conversation: ConversationContext, reserve: int | None) -> _Ladder:
        if reserve is None:
            reserve = ModelBinding.of(conversation).output_reserve(self.spec)
        return _Ladder(self, conversation, reserve)


def _awaitable(compactor: ContextCompactor) -> TypeGuard[AsyncContextCompactor]:
    if isinstance(compactor, LLMContextCompactor):
        return compactor.can_await
    return isinstance(compactor, AsyncContextCompactor)


class _Ladder:
    """One climb: which rung comes next, the measure after each, and the verdict."""

    def __init__(
        self, manager: ContextWindowManager, conversation: ConversationContext, reserve: int
    ) -> None:
        self._manager = manager
        self._conversation = conversation
        self._reserve = reserve
        self._absolute = manager.spec.max_context_tokens - reserve
        self._before = self._tokens = manager.measure(conversation)
        self._steps: list[CompactionStep] = []

    def _fits(self) -> bool:
        return self._tokens <= self._manager.trigger_tokens() and self._tokens <= self._absolute

    def __iter__(self) -> Iterator[CompactionLevel]:
        if self._manager.compactor is None or not self._conversation.is_compactable():
            return
        for level in LADDER:
            if self._fits():
                return
            yield level

    def record(self, result: CompactionResult, before: list[Message]) -> None:
        """Measure after a rung; a rung that made the conversation larger is undone."""
        tokens = self._tokens
        if result.changed:
            self._tokens = self._manager.measure(self._conversation)
            if self._tokens > tokens:
                self._conversation.messages[:] = before
                self._tokens = tokens
                result = msgspec.structs.replace(
                    result,
                    replaced=0,
                    messages_after=len(before),
                    error="the summaries weighed more than what they replaced; undone",
                )
        self._steps.append(
            CompactionStep(result=result, tokens_before=tokens, tokens_after=self._tokens)
        )
        logger.bind(conversation_id=self._conversation.conversation_id).info(
            "Compaction at {}: {} -> {} tokens ({} of {} messages replaced, {} summary calls)",
            result.level.value,
            tokens,
            self._tokens,
            result.replaced,
            result.messages_before,
            len(result.calls),
        )

    def report(self) -> FitReport:
        """The climb's report.

        Raises:
            ContextOverflowError: the input still exceeds the absolute limit.
        """
        if self._tokens > self._absolute:
            raise self._overflow()
        return FitReport(
            tokens_before=self._before,
            tokens_after=self._tokens,
            trigger_tokens=int(self._manager.trigger_tokens()),
            absolute_limit=self._absolute,
            steps=tuple(self._steps),
        )

    def _overflow(self) -> ContextOverflowError:
        spec = self._manager.spec
        climbed = f" after compaction at {len(self._steps)} levels" if self._steps else ""
        return ContextOverflowError(
            f"Conversation {self._conversation.conversation_id} needs {self._tokens} input "
            f"tokens{climbed} plus {self._reserve} reserved for the answer, more than model "
            f"{spec.id}'s context of {spec.max_context_tokens}: shorten what may not be "
            "compacted, ask for a smaller answer, or choose a model with a larger context.",
            tokens=self._tokens,
            reserve=self._reserve,
            limit=spec.max_context_tokens,
        )
