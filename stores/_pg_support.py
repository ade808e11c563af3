"""What PostgresStore needs around its statements: the row codec, id checks, the pool.

psycopg is imported only when a pool is opened, so these import without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import (
    ConversationPersistenceSnapshot,
    MessageSnapshot,
    decode_snapshot,
    encode_snapshot,
)

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

_message_encoder = msgspec.json.Encoder()
_message_decoder = msgspec.json.Decoder(MessageSnapshot)


def encode_body(snapshot: ConversationPersistenceSnapshot) -> bytes:
    """The snapshot without its messages (they are stored one row each)."""
    return encode_snapshot(msgspec.structs.replace(snapshot, messages=[]))


def encode_messages(messages: list[MessageSnapshot]) -> list[bytes]:
    return [_message_encoder.encode(m) for m in messages]


def decode_row(
    cid: str,
    owner: str,
    version: int,
    body: bytes,
    messages: list[bytes],
    count: int,
) -> ConversationPersistenceSnapshot:
    """A stored version reassembled, its identity checked against its row.

    Raises:
        CorruptSnapshotError: it does not decode, misses messages, or names another
            conversation or owner.
    """
    snapshot = decode_snapshot(body, cid)
    if snapshot.conversation_id != cid or snapshot.user_id not in (None, owner):
        raise CorruptSnapshotError(
            f"Stored conversation {cid} holds the snapshot of conversation "
            f"{snapshot.conversation_id} of user {snapshot.user_id}; it was not loaded."
        )
    if len(messages) != count:
        raise CorruptSnapshotError(
            f"Stored conversation {cid} has {len(messages)} of its {count} messages."
        )
    try:
        snapshot.messages = [_message_decoder.decode(m) for m in messages]
    except msgspec.DecodeError as exc:
        raise CorruptSnapshotError(
            f"A message of stored conversation {cid} does not decode: {exc}"
        ) from exc
    snapshot.stored_version = version
    return snapshot


def checked(conversation_id: str, user_id: str) -> str:
    """The conversation id, once it and the user id are known to fit PostgreSQL text.

    Raises:
        ValueError: the conversation id is empty, or either id holds NUL.
    """
    if not conversation_id or "\x00" in conversation_id:
        raise ValueError(
            f"A conversation id must be non-empty and hold no NUL, got {conversation_id!r}."
        )
    check_user(user_id)
    return conversation_id


def snapshot_id(snapshot: ConversationPersistenceSnapshot) -> str:
    """The id of a snapshot about to be written.

    Raises:
        ValueError: the snapshot has no conversation id.
    """
    if snapshot.conversation_id is None:
        raise ValueError("Cannot store a conversation snapshot whose conversation_id is None.")
    return snapshot.conversation_id


def foreign(conversation_id: str, user_id: str) -> PermissionError:
    """The one refusal of another user's conversation, the same sentence everywhere."""
    return PermissionError(f"User {user_id} does not own conversation {conversation_id}")


def check_user(user_id: str) -> None:
    if "\x00" in user_id:
        raise ValueError(f"A user id cannot hold NUL, got {user_id!r}.")


def open_pool(conninfo: str, size: int, timeout: float) -> ConnectionPool[Any]:
    try:
        from psycopg_pool import ConnectionPool
    except ImportError as exc:
        raise ImportError(
            "PostgresStore needs psycopg 3 and its pool: pip install 'parlour[postgres]'."
        ) from exc
    pool: ConnectionPool[Any] = ConnectionPool(
        conninfo,
        min_size=1,
        max_size=size,
        kwargs={"autocommit": True},
        timeout=timeout,
        open=False,
        name="parlour",
    )
    try:
        pool.open(wait=True, timeout=timeout)
    except BaseException:
        pool.close()
        raise
    return pool


def redacted(conninfo: str) -> str:
    """The connection string without its password, to name the database in errors."""
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo
    except ImportError:  # pragma: no cover - the pool import above already needs psycopg
        return "(PostgreSQL)"
    parts = conninfo_to_dict(conninfo)
    parts.pop("password", None)
    return make_conninfo(**parts)  # type: ignore[arg-type]
