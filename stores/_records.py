"""How LmdbStore lays a conversation out: a small header, a body, one record per message.

A save rewrites the header and the body (the snapshot without its messages) and writes only
the messages that changed since the store last wrote this conversation, so its cost does
not grow with the conversation's length.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import (
    ConversationPersistenceSnapshot,
    MessageSnapshot,
    decode_snapshot,
    encode_snapshot,
)


class Header(msgspec.Struct, frozen=True, kw_only=True):
    """The per-conversation record read on every write: owner, title, times, message count."""

    user_id: str
    title: str
    created_at: dt.datetime
    updated_at: dt.datetime
    message_count: int = 0
    version: int = 0  # the fencing version: advanced by every save


header_encoder = msgspec.json.Encoder()
header_decoder = msgspec.json.Decoder(Header)
_message_encoder = msgspec.json.Encoder()
_message_decoder = msgspec.json.Decoder(MessageSnapshot)


def conversation_key(conversation_id: str) -> bytes:
    """The key of a conversation's header and body.

    Raises:
        ValueError: the id holds a NUL, which separates it from message indexes.
    """
    if "\x00" in conversation_id:
        raise ValueError(f"A conversation id cannot contain NUL: {conversation_id!r}")
    return conversation_id.encode()


def message_key(key: bytes, index: int) -> bytes:
    """Message ``index`` of conversation ``key``: sorts in order under the conversation."""
    return key + b"\x00" + index.to_bytes(8, "big")


def message_prefix(key: bytes) -> bytes:
    return key + b"\x00"


def encode_body(snapshot: ConversationPersistenceSnapshot) -> bytes:
    """The snapshot without its messages (they are stored one record each)."""
    return encode_snapshot(msgspec.structs.replace(snapshot, messages=[]))


def decode_record(
    conversation_id: str,
    body: bytes | memoryview,
    messages: Sequence[bytes | memoryview],
    expected: int,
) -> ConversationPersistenceSnapshot:
    """Reassemble a snapshot from its body and message records.

    Raises:
        CorruptSnapshotError: a record does not decode, or messages are missing.
    """
    snapshot = decode_snapshot(body, conversation_id)
    if len(messages) != expected:
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} has {len(messages)} of its {expected} messages."
        )
    try:
        snapshot.messages = [_message_decoder.decode(m) for m in messages]
    except msgspec.DecodeError as exc:
        raise CorruptSnapshotError(
            f"A message of stored conversation {conversation_id} does not decode: {exc}"
        ) from exc
    return snapshot


class MessagePlan(NamedTuple):
    """Which messages a save writes: ``messages[start:]``, already encoded.

    ``base`` is what the store believed was written when the plan was made; a plan whose
    base is no longer current is made again under the commit lock.
    """

    base: list[MessageSnapshot] | None
    start: int
    encoded: list[bytes]
    messages: list[MessageSnapshot]

    @property
    def size(self) -> int:
        return sum(len(e) for e in self.encoded)


def plan_messages(
    base: list[MessageSnapshot] | None, messages: list[MessageSnapshot]
) -> MessagePlan:
    """Plan to write the messages from the first one that differs from what the store last
    wrote (memoized message snapshots make unchanged messages the very same objects)."""
    start = 0
    if base is not None:
        common = min(len(base), len(messages))
        if base[:common] == messages[:common]:  # identity short-circuits: C speed
            start = common
        else:
            start = list(map(operator.is_, base, messages)).index(False)
    encoded = [_message_encoder.encode(m) for m in messages[start:]]
    return MessagePlan(base, start, encoded, messages)
