"""The compaction check counts only what changed: an unchanged conversation encodes nothing,
a changed message is recounted alone, and one far below its window is not encoded at all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from parlour.runtime import ContextWindowManager, counter_for
from parlour.runtime.testing import fake_spec

from .conftest import answer, declared, long_chat


class CountingEncoding:
    """Stands in for the tiktoken encoding, counting the texts it is asked to encode."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.encoded: list[str] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.encoded.append(text)
        return self.real.encode_ordinary(text)  # type: ignore[attr-defined,no-any-return]

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


@pytest.fixture
def encoding() -> Iterator[CountingEncoding]:
    counter = counter_for(fake_spec().encoding)
    real = counter.encoding
    counting = CountingEncoding(real)
    counter.encoding = counting  # type: ignore[assignment]
    counter.clear_memo()
    try:
        yield counting
    finally:
        counter.encoding = real


def test_a_warm_check_encodes_nothing_and_a_new_message_encodes_only_itself(
    encoding: CountingEncoding,
) -> None:
    c = long_chat(10)
    manager = ContextWindowManager(fake_spec())
    cold = manager.measure(c)
    assert len(encoding.encoded) > 20  # the cold check encoded each distinct piece
    assert len(set(encoding.encoded)) == len(encoding.encoded)  # and none twice
    encoding.encoded.clear()
    assert not manager.needs_compaction(c) and manager.measure(c) == cold
    assert encoding.encoded == []
    c.add_message(answer("A new answer nobody has counted yet."))
    assert manager.measure(c) > cold
    assert encoding.encoded == ["A new answer nobody has counted yet."]


def test_a_warm_count_of_a_message_is_its_memo_until_the_message_changes(
    encoding: CountingEncoding,
) -> None:
    c = long_chat(3)
    manager = ContextWindowManager(fake_spec())
    before = manager.measure(c)
    encoding.encoded.clear()
    message = next(m for m in c.messages if not m.has_raw_text)  # counted block by block
    message.add_text("A line added in place.")
    after = manager.measure(c)
    assert encoding.encoded == ["A line added in place."]  # the changed message alone
    fresh = long_chat(3)
    next(m for m in fresh.messages if not m.has_raw_text).add_text("A line added in place.")
    counter_for(fake_spec().encoding).clear_memo()
    assert manager.measure(fresh) == after > before  # the same answer as a cold count


def test_a_check_far_below_the_window_encodes_nothing_and_fit_agrees(
    encoding: CountingEncoding,
) -> None:
    c = declared(long_chat(3))
    manager = ContextWindowManager(fake_spec())
    assert manager.surely_fits(c, 4_000)
    assert encoding.encoded == []  # nothing was encoded to prove it
    report = manager.fit(c, 4_000)
    assert report.steps == () and report.tokens_after == manager.measure(c)
    assert c.get_token_bound(fake_spec()) >= report.tokens_after


def test_a_conversation_near_its_trigger_is_never_surely_fitting() -> None:
    c = declared(long_chat(10))
    exact = ContextWindowManager(fake_spec()).measure(c)
    tight = ContextWindowManager(fake_spec(), comfort_override=exact + 1, trigger_override=1.0)
    assert not tight.surely_fits(c, 4_000)  # the bound is above the exact measure
    assert tight.fit(c, 4_000).steps == ()  # and the exact measure says it fits
    assert not tight.needs_compaction(c)
    under = ContextWindowManager(fake_spec(), comfort_override=exact - 1, trigger_override=1.0)
    assert not under.surely_fits(c, 4_000) and under.needs_compaction(c)


def test_another_counter_is_never_bounded_so_fit_decides() -> None:
    class Exact:
        def count_tokens(self, conversation: object) -> int:
            return 10

    manager = ContextWindowManager(fake_spec(), counter=Exact())
    assert not manager.surely_fits(declared(long_chat(1)), 4_000)
    assert manager.fit(declared(long_chat(1)), 4_000).tokens_after == 10
