"""How LmdbStore lays a conversation out: a small header, a body, one record per message.

A save rewrites the header and the body (the snapshot without its messages) and writes only
the messages whose bytes changed since the store last wrote this conversation, so its cost
does not grow with the conversation's length.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Sequence
from typing import Annotated, NamedTuple

import msgspec

from parlour.runtime.blocks import PojoBlock
from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import (
    ConversationPersistenceSnapshot,
    MessageSnapshot,
    decode_message_snapshot,
    decode_snapshot,
    encode_snapshot,
)

Chain = tuple[int, int, int]  # deltas since the last checkpoint, their bytes, the checkpoint's


class Header(msgspec.Struct, frozen=True, kw_only=True):
    """The per-conversation record read on every write: owner, title, times, message count,
    the fencing version advanced by every save, and the version history's chain as that
    version left it (None: that version was not recorded with one, so the next is a
    checkpoint; a parlour that predates the field ignores it and drops it on rewrite)."""

    user_id: Annotated[str, msgspec.Meta(min_length=1)]
    title: str
    created_at: dt.datetime
    updated_at: dt.datetime
    message_count: Annotated[int, msgspec.Meta(ge=0)] = 0
    version: Annotated[int, msgspec.Meta(ge=1)] = 1
    history: Chain | None = None


class LegacyHeader(msgspec.Struct, frozen=True, kw_only=True):
    """A header as layout 1 wrote it: no version, or a version that may be 0."""

    user_id: Annotated[str, msgspec.Meta(min_length=1)]
    title: str
    created_at: dt.datetime
    updated_at: dt.datetime
    message_count: Annotated[int, msgspec.Meta(ge=0)] = 0
    version: Annotated[int, msgspec.Meta(ge=0)] = 0


header_encoder = msgspec.json.Encoder()
header_decoder = msgspec.json.Decoder(Header)
legacy_header_decoder = msgspec.json.Decoder(LegacyHeader)
_message_encoder = msgspec.json.Encoder()
_message_decoder = msgspec.json.Decoder(MessageSnapshot)


def decode_header(conversation_id: str, raw: bytes | memoryview) -> Header:
    """The header of ``conversation_id``.

    Raises:
        CorruptSnapshotError: the bytes are not a valid header.
    """
    try:
        return header_decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise CorruptSnapshotError(
            f"The header of stored conversation {conversation_id} is damaged: {_reason(exc)}"
        ) from exc


def _reason(exc: BaseException) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc)


def message_key(key: bytes, index: int) -> bytes:
    """Message ``index`` of conversation ``key``: sorts in order under the conversation."""
    return key + b"\x00" + index.to_bytes(8, "big")


def message_prefix(key: bytes) -> bytes:
    return key + b"\x00"


def encode_body(snapshot: ConversationPersistenceSnapshot) -> bytes:
    """The snapshot without its messages (they are stored one record each) and without its
    ``stored_version`` (every read stamps the record's own), so that a save that changed
    nothing else writes the body it already has: the same bytes, which a store may skip."""
    return encode_snapshot(msgspec.structs.replace(snapshot, messages=[], stored_version=0))


def decode_record(
    conversation_id: str,
    owner: str,
    count: int,
    body: bytes | memoryview,
    messages: Sequence[bytes | memoryview],
) -> ConversationPersistenceSnapshot:
    """Reassemble a snapshot from its body and message records, checking that the body
    names the conversation and owner its key and header (or row) do, and that all ``count``
    messages are there. Every store reads through this one function.

    Raises:
        CorruptSnapshotError: a record does not decode, messages are missing, or the body's
            identity disagrees with the key or the header.
    """
    snapshot = decode_snapshot(body, conversation_id)  # a too-deep body: CorruptSnapshotError
    if snapshot.conversation_id != conversation_id or snapshot.user_id not in (None, owner):
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} is damaged: its body names another "
            "conversation or user than its key and header."
        )
    if len(messages) != count:
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} has {len(messages)} of its {count} messages."
        )
    snapshot.messages = _decode_messages(conversation_id, messages)
    return snapshot


def _decode_messages(
    conversation_id: str, messages: Sequence[bytes | memoryview]
) -> list[MessageSnapshot]:
    """Every message decoded, as ``decode_message_snapshot`` decodes it, at half its cost:
    the plain decoder first; when any record does not decode, or a message holds a
    ``PojoBlock`` (whose value must pass the nesting check), all go through
    ``decode_message_snapshot``, which raises exactly what it raises.

    Raises:
        CorruptSnapshotError: a record does not decode or nests too deeply.
    """
    decode = _message_decoder.decode
    try:
        decoded = [decode(m) for m in messages]
    except (msgspec.DecodeError, RecursionError):
        decoded = None
    if decoded is None or any(isinstance(b, PojoBlock) for m in decoded for b in m.blocks):
        return [decode_message_snapshot(m, conversation_id) for m in messages]
    return decoded


class MessagePlan(NamedTuple):
    """Which messages a save writes, already encoded: ``writes`` holds (index, bytes) for
    every message whose stored bytes would change, ``size`` their total length.

    ``base`` is what the store believed was written when the plan was made; a plan whose
    base is no longer current is made again under the commit lock.
    """

    base: list[MessageSnapshot] | None
    writes: list[tuple[int, bytes]]
    messages: list[MessageSnapshot]
    size: int


def plan_messages(
    base: list[MessageSnapshot] | None, messages: list[MessageSnapshot]
) -> MessagePlan:
    """Plan to write every message whose encoded bytes differ from what the store last
    wrote (all of them without a ``base``).

    Memoized message snapshots make unchanged messages the very same objects, so one pass
    of identity checks (``map(operator.is_, ...)``, about 20 ns a message) finds the first
    that is not; from there on, a message the store wrote is compared by its encoded bytes,
    never by ``==`` (which takes ``1`` for ``True``, ``0.0`` for ``-0.0``), so a changed
    message is always written.
    """
    if base is None:
        writes = _encode_from(messages, 0)
    else:
        common = min(len(base), len(messages))
        # the usual turn: nothing before the end changed
        same = all(map(operator.is_, base, messages))
        writes = [] if same else _changed(base, messages, common)
        writes += _encode_from(messages, common)
    return MessagePlan(base, writes, messages, sum(len(data) for _, data in writes))


def _changed(
    base: list[MessageSnapshot], messages: list[MessageSnapshot], common: int
) -> list[tuple[int, bytes]]:
    """The messages among the first ``common`` that are not the base's very objects and
    whose encoded bytes differ from the base's."""
    encode = _message_encoder.encode
    start = operator.indexOf(map(operator.is_, base, messages), False)
    writes = []
    for index in range(start, common):
        message = messages[index]
        if base[index] is not message:
            data = encode(message)
            if data != encode(base[index]):
                writes.append((index, data))
    return writes


def _encode_from(messages: list[MessageSnapshot], start: int) -> list[tuple[int, bytes]]:
    encode = _message_encoder.encode
    return [(i, encode(messages[i])) for i in range(start, len(messages))]
