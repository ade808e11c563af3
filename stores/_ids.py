"""What every store checks at its boundary: ids, the acting user, and ownership.

One function per check, shared by ``MemoryStore`` and ``LmdbStore``, so both refuse the same
input with the same message.
"""

from __future__ import annotations

import datetime as dt

from parlour.runtime.errors import not_owned
from parlour.runtime.snapshots import ConversationPersistenceSnapshot

MAX_KEY_BYTES = 511  # LMDB's key limit (and its limit on a sorted duplicate's value)
MESSAGE_SUFFIX_BYTES = 9  # a message key is the id, a NUL and an 8-byte index
ORDER_PREFIX_BYTES = 8  # an owner-index entry is an 8-byte order then the id
MAX_ID_BYTES = MAX_KEY_BYTES - MESSAGE_SUFFIX_BYTES  # 502: every key of the id fits
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def _encoded(kind: str, value: object, limit: int, why: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"A {kind} must be a str, got {type(value).__name__}.")
    if not value:
        raise ValueError(f"A {kind} cannot be empty.")
    if "\x00" in value:
        raise ValueError(f"A {kind} cannot contain NUL: {value!r}")
    try:
        data = value.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(f"A {kind} must be valid Unicode (no lone surrogates): {value!r}") from exc
    if len(data) > limit:
        raise ValueError(
            f"A {kind} can be at most {limit} bytes of UTF-8 ({why}); {value[:40]!r}... has "
            f"{len(data)}."
        )
    return data


_CHECKED_MOST = 8192  # how many valid ids of each kind are remembered, already encoded
_conversation_keys: dict[str, bytes] = {}
_user_keys: dict[str, bytes] = {}


def _remembered(checked: dict[str, bytes], value: str, key: bytes) -> bytes:
    """Remember ``value``'s key; the memory is dropped whole when full (a dict operation
    each: safe from any thread)."""
    if len(checked) >= _CHECKED_MOST:
        checked.clear()
    checked[value] = key
    return key


def conversation_key(conversation_id: str) -> bytes:
    """The validated UTF-8 key of a conversation id.

    Raises:
        ValueError: the id is empty, holds a NUL or a lone surrogate, or is longer than
            ``MAX_ID_BYTES`` (502) bytes of UTF-8, so that its message keys would not fit
            LMDB's 511-byte key limit.
    """
    if type(conversation_id) is str and (key := _conversation_keys.get(conversation_id)):
        return key  # checked before: a valid id's key never changes
    why = f"LMDB's {MAX_KEY_BYTES}-byte key limit, less the suffix of its message keys"
    key = _encoded("conversation id", conversation_id, MAX_ID_BYTES, why)
    return _remembered(_conversation_keys, conversation_id, key)


def user_key(user_id: str) -> bytes:
    """The validated UTF-8 key of a user id (the key of the user's owner index).

    Raises:
        ValueError: the id is empty, holds a NUL or a lone surrogate, or is longer than
            LMDB's 511-byte key limit.
    """
    if type(user_id) is str and (key := _user_keys.get(user_id)):
        return key
    key = _encoded("user id", user_id, MAX_KEY_BYTES, "LMDB's key limit")
    return _remembered(_user_keys, user_id, key)


def require_id(snapshot: ConversationPersistenceSnapshot, user_id: str) -> bytes:
    """Check a snapshot about to be written by ``user_id``: its id is valid and it names no
    other user. Returns the id's key.

    Raises:
        ValueError: the snapshot has no conversation id, or an invalid one, or the user id
            is invalid.
        PermissionError: the snapshot names a user other than the acting one.
    """
    if snapshot.conversation_id is None:
        raise ValueError("Cannot store a conversation snapshot whose conversation_id is None.")
    key = conversation_key(snapshot.conversation_id)
    user_key(user_id)
    if snapshot.user_id is not None and snapshot.user_id != user_id:
        raise PermissionError(
            f"User {user_id} cannot store conversation {snapshot.conversation_id}: the snapshot "
            "belongs to another user. Nothing was written."
        )
    return key


def check_owner(owner: str, conversation_id: str, user_id: str) -> None:
    """The one ownership check of every conversation-addressed call.

    Raises:
        PermissionError: ``owner`` is not ``user_id``.
    """
    if owner != user_id:
        raise not_owned(conversation_id, user_id)


def order_of(updated_at: dt.datetime, conversation_id: str) -> tuple[int, str]:
    """The listing order, newest first, ties by id: what sorts an owner index's entries."""
    return (-((updated_at - _EPOCH) // _MICROSECOND), conversation_id)


def order_bytes(updated_at: dt.datetime, key: bytes) -> bytes:
    """An owner-index entry: the order as 8 bytes that sort newest first, then the id."""
    micros = (updated_at - _EPOCH) // _MICROSECOND
    return ((1 << 63) - 1 - micros).to_bytes(ORDER_PREFIX_BYTES, "big") + key
