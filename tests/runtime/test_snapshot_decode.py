"""Decoding a stored snapshot gives one answer for the same bytes, whatever the stack.

A record nested deeper than MAX_NESTING (which parlour never writes), or deeper than any
stack can decode, is a CorruptSnapshotError naming the conversation, from a shallow call
and from a call made near the recursion limit alike; a record within the cap decodes from
both.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlour.runtime import OutgoingMessage
from parlour.runtime._validation import MAX_NESTING
from parlour.runtime.blocks import PojoBlock
from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import (
    ConversationPersistenceSnapshot,
    MessageSnapshot,
    ObjectiveSlot,
    decode_message_snapshot,
    decode_snapshot,
    encode_snapshot,
)

T = TypeVar("T")
CREATED = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
MARK = b'"@@deep@@"'


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def record(depth: int) -> bytes:
    """A stored snapshot whose objective holds a value ``depth`` lists deep, written the way
    only a foreign or damaged writer could (the encoder is handed the bytes directly)."""
    slot = ObjectiveSlot(key="data", block=PojoBlock(value="@@deep@@"))
    snapshot = ConversationPersistenceSnapshot(
        conversation_id="c-deep", user_id="u", created_at=CREATED, objective=[slot]
    )
    deep = b"[" * depth + b"1" + b"]" * depth
    return encode_snapshot(snapshot).replace(MARK, deep)


def message_record(depth: int) -> bytes:
    snapshot = MessageSnapshot.of(OutgoingMessage(blocks=[PojoBlock(value="@@deep@@")]))
    deep = b"[" * depth + b"1" + b"]" * depth
    return msgspec.json.encode(snapshot).replace(MARK, deep)


def _frames() -> int:
    frame, n = sys._getframe(), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1  # type: ignore[assignment]
    return n


def near_the_limit(fn: Callable[[], T], headroom: int = 30) -> T:
    """``fn()`` called with only ``headroom`` frames left before the recursion limit."""

    def descend(n: int) -> T:
        return fn() if n <= 0 else descend(n - 1)

    return descend(sys.getrecursionlimit() - _frames() - headroom)


def outcome(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except CorruptSnapshotError as exc:
        assert "c-deep" in str(exc)
        return "corrupt"
    return "ok"


def test_the_deep_stack_really_is_too_deep_for_a_plain_decode() -> None:
    """The precondition of the tests below: near the limit, msgspec alone fails."""
    decoder = msgspec.json.Decoder(ConversationPersistenceSnapshot)
    with pytest.raises(RecursionError):
        near_the_limit(lambda: decoder.decode(record(MAX_NESTING)))


def test_a_record_within_the_cap_decodes_from_a_deep_stack_as_from_a_shallow_one() -> None:
    shallow = decode_snapshot(record(MAX_NESTING), "c-deep")
    deep = near_the_limit(lambda: decode_snapshot(record(MAX_NESTING), "c-deep"))
    assert deep == shallow
    block = shallow.objective[0].block
    assert isinstance(block, PojoBlock)
    assert block.value == nested(MAX_NESTING)


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 5_000])
def test_a_record_past_the_cap_is_corrupt_from_any_stack(depth: int) -> None:
    data = record(depth)
    with pytest.raises(CorruptSnapshotError, match="c-deep"):
        decode_snapshot(data, "c-deep")
    with pytest.raises(CorruptSnapshotError, match="c-deep"):
        near_the_limit(lambda: decode_snapshot(data, "c-deep"))


@pytest.mark.parametrize("depth", [MAX_NESTING, MAX_NESTING + 1, 5_000])
def test_a_message_record_decodes_with_the_same_guarantees(depth: int) -> None:
    data = message_record(depth)
    shallow = outcome(lambda: decode_message_snapshot(data, "c-deep"))
    deep = outcome(lambda: near_the_limit(lambda: decode_message_snapshot(data, "c-deep")))
    assert shallow == deep == ("ok" if depth <= MAX_NESTING else "corrupt")


def test_a_deep_artifact_entry_is_corrupt() -> None:
    snapshot = ConversationPersistenceSnapshot(
        conversation_id="c-deep", created_at=CREATED, artifacts=[{"v": "@@deep@@"}]
    )
    data = encode_snapshot(snapshot).replace(MARK, b"[" * MAX_NESTING + b"]" * MAX_NESTING)
    with pytest.raises(CorruptSnapshotError, match=r"c-deep.*artifact 0"):
        decode_snapshot(data, "c-deep")


@settings(max_examples=40, deadline=None)
@given(
    depth=st.integers(MAX_NESTING - 3, MAX_NESTING + 3) | st.integers(0, 1_200),
    headroom=st.integers(20, 400),
)
def test_property_the_answer_depends_on_the_bytes_alone(depth: int, headroom: int) -> None:
    data = record(depth)
    expected = "ok" if depth <= MAX_NESTING else "corrupt"
    assert outcome(lambda: decode_snapshot(data, "c-deep")) == expected
    assert outcome(lambda: near_the_limit(lambda: decode_snapshot(data, "c-deep"), headroom)) == (
        expected
    )
