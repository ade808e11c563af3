"""The compaction check counts only what changed: an unchanged conversation encodes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from parlour.runtime import ContextWindowManager, counter_for
from parlour.runtime.testing import fake_spec

from .conftest import answer, long_chat


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
