"""The window manager: the limits it resolves, when it compacts, and when it refuses."""

from __future__ import annotations

import pytest

from parlour.runtime import (
    ContextWindowManager,
    ConversationContext,
    ModelSpec,
    OutgoingMessage,
    OutputSize,
)
from parlour.runtime.compaction import (
    DEFAULT_COMFORT_CONTEXT_TOKENS,
    CompactionLevel,
    CompactionResult,
)
from parlour.runtime.errors import ContextOverflowError, UncorrectableLLMError
from parlour.runtime.testing import fake_spec

from .conftest import declared, prose

SMALL_RUNGS = {
    OutputSize.VERDICT: 100,
    OutputSize.COMPACT: 200,
    OutputSize.STANDARD: 400,
    OutputSize.EXTENDED: 500,
}


def small_spec(context: int, **overrides: object) -> ModelSpec:
    return fake_spec(
        max_context_tokens=context, max_output_tokens=500, output_budgets=SMALL_RUNGS, **overrides
    )


class ShrinksNothing:
    """A compactor that is asked at every level and changes nothing."""

    def __init__(self) -> None:
        self.levels: list[CompactionLevel] = []

    def compact(
        self, conversation: ConversationContext, level: CompactionLevel
    ) -> CompactionResult:
        self.levels.append(level)
        n = len(conversation.messages)
        return CompactionResult(level=level, messages_before=n, messages_after=n)


def conversation_of(words: int) -> ConversationContext:
    c = declared(ConversationContext("w", user_id="alice"))
    c.add_user_message(prose(words))
    return c


def test_messages_and_conversations_are_compactable_until_marked_otherwise() -> None:
    message = OutgoingMessage("hello")
    assert message.is_compactable()
    message.set_compactable(False)
    assert not message.is_compactable()
    c = conversation_of(5_000)
    manager = ContextWindowManager(small_spec(1_000))
    assert c.is_compactable() and manager.needs_compaction(c)
    c.set_compactable(False)
    assert not manager.needs_compaction(c)


@pytest.mark.parametrize(
    ("context", "entry", "override", "expected"),
    [
        (1_000_000, None, None, DEFAULT_COMFORT_CONTEXT_TOKENS),
        (1_000_000, 300_000, None, 300_000),
        (1_000_000, 300_000, 500_000, 500_000),
        (64_000, 300_000, 500_000, 64_000),
    ],
)
def test_the_effective_limit_is_the_comfort_window_capped_by_the_hard_context(
    context: int, entry: int | None, override: int | None, expected: int
) -> None:
    spec = fake_spec(max_context_tokens=context, comfort_window_tokens=entry)
    assert ContextWindowManager(spec, comfort_override=override).effective_limit() == expected
    assert DEFAULT_COMFORT_CONTEXT_TOKENS == 128_000


@pytest.mark.parametrize(
    ("comfort", "trigger", "named"),
    [
        (0, None, "comfort window"),
        (-5, None, "comfort window"),
        (None, 0.0, "trigger"),
        (None, 1.5, "trigger"),
    ],
)
def test_an_invalid_override_is_a_value_error_naming_it(
    comfort: int | None, trigger: float | None, named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        ContextWindowManager(fake_spec(), comfort_override=comfort, trigger_override=trigger)


def test_an_entry_with_a_non_positive_comfort_window_is_refused_naming_the_model() -> None:
    with pytest.raises(ValueError, match="fake-model"):
        ContextWindowManager(fake_spec(comfort_window_tokens=0))


def test_a_conversation_at_096_of_the_limit_needs_compaction_only_under_the_default_trigger() -> (
    None
):
    c = conversation_of(2_000)
    spec = fake_spec(max_context_tokens=1_000_000)
    tokens = ContextWindowManager(spec).measure(c)
    limit = int(tokens / 0.96)  # the conversation measures 0.96 of this limit
    assert ContextWindowManager(spec, comfort_override=limit).needs_compaction(c)
    at_full = ContextWindowManager(spec, comfort_override=limit, trigger_override=1.0)
    assert not at_full.needs_compaction(c)


def test_the_absolute_limit_is_the_hard_context_minus_the_output_reserve() -> None:
    spec = fake_spec(max_context_tokens=64_000)
    c = conversation_of(10)
    manager = ContextWindowManager(spec)
    assert manager.absolute_limit(c) == 64_000 - spec.get_output_budget(OutputSize.COMPACT)
    assert manager.absolute_limit(c, reserve=1_234) == 64_000 - 1_234


def test_the_absolute_limit_of_a_seat_that_declares_nothing_is_an_uncorrectable_error() -> None:
    c = ConversationContext("bare")
    with pytest.raises(UncorrectableLLMError, match="declares no output size"):
        ContextWindowManager(fake_spec()).absolute_limit(c)


def test_a_conversation_past_the_context_that_nothing_shrinks_overflows_after_all_four_levels() -> (
    None
):
    c = conversation_of(5_000)
    compactor = ShrinksNothing()
    manager = ContextWindowManager(small_spec(3_000), compactor=compactor)
    before = list(c.messages)
    with pytest.raises(ContextOverflowError) as caught:
        manager.ensure_fits(c)
    assert compactor.levels == list(CompactionLevel)
    error = caught.value
    assert isinstance(error, UncorrectableLLMError)
    assert error.tokens == manager.measure(c) and error.tokens > 3_000 - 200
    assert (error.reserve, error.limit) == (200, 3_000)
    assert "Conversation w" in str(error) and "fake-model" in str(error)
    assert c.messages == before


def test_a_conversation_above_the_trigger_but_inside_the_absolute_limit_is_returned_as_it_is() -> (
    None
):
    c = conversation_of(3_000)
    compactor = ShrinksNothing()
    manager = ContextWindowManager(small_spec(10_000), comfort_override=2_000, compactor=compactor)
    before = list(c.messages)
    assert manager.needs_compaction(c)
    assert manager.ensure_fits(c) is c
    assert c.messages == before
    assert compactor.levels == list(CompactionLevel)


def test_a_conversation_under_the_trigger_is_not_compacted_at_all() -> None:
    c = conversation_of(100)
    compactor = ShrinksNothing()
    report = ContextWindowManager(small_spec(10_000), compactor=compactor).fit(c)
    assert compactor.levels == [] and report.steps == ()
    assert report.tokens_before == report.tokens_after


def test_a_non_compactable_conversation_is_never_handed_to_the_compactor_and_overflows_loudly() -> (
    None
):
    c = conversation_of(5_000)
    c.set_compactable(False)
    compactor = ShrinksNothing()
    with pytest.raises(ContextOverflowError):
        ContextWindowManager(small_spec(3_000), compactor=compactor).ensure_fits(c)
    assert compactor.levels == []


def test_without_a_compactor_the_manager_measures_and_refuses_but_never_compacts() -> None:
    c = conversation_of(5_000)
    manager = ContextWindowManager(small_spec(3_000))
    with pytest.raises(ContextOverflowError):
        manager.ensure_fits(c)
    assert ContextWindowManager(small_spec(10_000), comfort_override=2_000).ensure_fits(c) is c


def test_a_warm_measure_equals_a_cold_one() -> None:
    c = conversation_of(3_000)
    manager = ContextWindowManager(fake_spec())
    first = manager.measure(c)
    assert manager.measure(c) == first
    c.add_user_message("one more")
    assert manager.measure(c) > first
