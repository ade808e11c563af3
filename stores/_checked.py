"""What a save encodes anew, refused when a load would not read it back.

Values are checked as they enter a conversation, but a ``PojoBlock``'s value is the
application's own dict and a usage ledger entry is a plain dict: both can change in place
after they entered. So every store encodes the messages and ledger entries it writes
through these functions, which refuse, with ``ValueError`` naming the conversation and the
message (or entry), what the load path would refuse: a value msgspec cannot encode (an
``object()``, a lone surrogate, nesting past the encoder's stack), and nesting deeper than
``MAX_NESTING``. Before, such a save was acknowledged and the conversation then never
loaded (or every later save failed with a raw ``TypeError``).

The check costs the hot path almost nothing: only what a save encodes anew passes here (the
usual turn: one or two messages), the encode is the one the save needs anyway (a run of
records in one comprehension, as before), and the bytes are decoded back as a load decodes
them (``decode_message_snapshot``, ``decode_usage_entry``: the load's own rule, nothing
restated) only when they may nest: a message holding a ``PojoBlock`` (every other block is
frozen, its fields a str, a bool or None, checked as it entered), a ledger entry holding
anything but a str, int, float, bool or None. One C-level scan of types each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from parlour.runtime.blocks import PojoBlock
from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import (
    MessageSnapshot,
    decode_message_snapshot,
    decode_usage_entry,
)

__all__ = ["UNENCODABLE", "Run", "encode_messages", "encode_usage", "refused", "why"]

_message_encoder = msgspec.json.Encoder()
_usage_encoder = msgspec.json.Encoder()
_SCALARS = frozenset({str, int, float, bool, type(None)})  # the values that cannot nest
# what msgspec raises for a value it cannot encode (UnicodeEncodeError is a ValueError)
UNENCODABLE = (TypeError, ValueError, OverflowError, RecursionError)

Run = list[tuple[int, bytes]]


def encode_messages(
    cid: str, messages: Sequence[MessageSnapshot], start: int, stop: int, at: int = 0
) -> Run:
    """Messages ``start`` to ``stop`` of conversation ``cid`` as (index, bytes), once a
    load would read each back; ``messages[0]`` is the conversation's message ``at`` (an
    append's new messages), so an index is ``at`` past its place in ``messages``.

    Raises:
        ValueError: one would not read back; it names the conversation and the message.
    """
    encode = _message_encoder.encode
    try:
        run = [(at + i, encode(messages[i])) for i in range(start, stop)]
    except UNENCODABLE as exc:
        raise _first_refused(cid, "message", encode, messages, start, stop, exc, at) from None
    for index, data in run:
        if PojoBlock in map(type, messages[index - at].blocks):  # the one block that may nest
            _reads_back(decode_message_snapshot, data, cid, f"message {index}")
    return run


def encode_usage(
    cid: str, entries: Sequence[dict[str, Any]], start: int, stop: int, at: int = 0
) -> Run:
    """Ledger entries ``start`` to ``stop`` of conversation ``cid`` as (index, bytes), once a
    load would read each back; ``at`` as for ``encode_messages``.

    Raises:
        ValueError: one would not read back; it names the conversation and the entry.
    """
    encode = _usage_encoder.encode
    for index in range(start, stop):
        if type(entries[index]) is not dict:
            raise refused(cid, f"usage ledger entry {at + index}", "it is not a dict")
    try:
        run = [(at + i, encode(entries[i])) for i in range(start, stop)]
    except UNENCODABLE as exc:
        raise _first_refused(
            cid, "usage ledger entry", encode, entries, start, stop, exc, at
        ) from None
    for index, data in run:
        if not _SCALARS.issuperset(map(type, entries[index - at].values())):  # it may nest
            _reads_back(decode_usage_entry, data, cid, f"usage ledger entry {index}")
    return run


def _first_refused(
    cid: str,
    what: str,
    encode: Callable[[Any], bytes],
    items: Sequence[Any],
    start: int,
    stop: int,
    exc: BaseException,
    at: int = 0,
) -> ValueError:
    """The refusal naming the first of the items that does not encode."""
    for index in range(start, stop):
        try:
            encode(items[index])
        except UNENCODABLE as failed:
            return refused(cid, f"{what} {at + index}", why(failed))
    return refused(cid, f"{what}s {at + start} to {at + stop - 1}", why(exc))


def _reads_back(decode: Callable[[bytes, str], object], data: bytes, cid: str, where: str) -> None:
    """Decode ``data`` as a load does (its own checked decoder: the rule is the load's).

    Raises:
        ValueError: the load would refuse it.
    """
    try:
        decode(data, cid)
    except CorruptSnapshotError as exc:
        raise refused(cid, where, str(exc)) from None


def refused(cid: str, where: str, why: str) -> ValueError:
    """The refusal of a save of ``cid`` whose ``where`` would not read back."""
    return ValueError(
        f"Conversation {cid} was not saved: its {where} would not read back ({why}); it was "
        "refused and nothing was written."
    )


def why(exc: BaseException) -> str:
    """What an encoder's error says, for a refusal."""
    if isinstance(exc, RecursionError):
        return "it nests too deeply to encode"
    return str(exc) or type(exc).__name__
