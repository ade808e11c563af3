"""What PostgresStore needs around its statements: the row codec, id checks, the pool.

psycopg is imported only when a pool is opened, so these import without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from parlour.runtime.snapshots import ConversationPersistenceSnapshot, MessageSnapshot
from parlour.stores._ids import conversation_key, user_key
from parlour.stores._records import decode_record, encode_body

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["checked", "decode_row", "encode_body", "encode_messages", "open_pool", "redacted"]

_message_encoder = msgspec.json.Encoder()


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
    snapshot = decode_record(cid, owner, count, body, messages)
    snapshot.stored_version = version
    return snapshot


def checked(conversation_id: str, user_id: str) -> str:
    """The conversation id, once it and the user id pass every store's id rules.

    Raises:
        ValueError: either id is empty, holds a NUL or a lone surrogate, or is too long.
    """
    conversation_key(conversation_id)
    user_key(user_id)
    return conversation_id


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
