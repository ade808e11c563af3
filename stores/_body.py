"""A conversation's body encoded once while it stays the same.

The body (``_records.encode_body``: the snapshot without its messages, ledger and stored version)
is the same on almost every save, yet building its bytes meant encoding the whole objective
and every tool definition again: for an agent with twenty tools, most of a turn's encoding.
``body_after`` hands back the previous save's ``Body`` when the new body is provably the
same: its scalar fields and artifacts encode to the same bytes (encoding that part alone is
cheap), and its block lists hold equal blocks, none of them a ``PojoBlock``. Equal blocks of
the other kinds encode alike (frozen, every field a str, a bool or None, each type checked
as the block entered its conversation); a PojoBlock's value is anything (and ``1 == True``
while they encode differently), so a body holding one is encoded every time.

A body encoded anew is decoded once, as a load would: one that would not read back (a flag
set to ``1`` where a bool belongs, say) is refused before anything is written, instead of
leaving a record no load can open. Bodies change rarely, so this costs a save next to
nothing. A body with no block lists (no objective, tools or skills) is its scalars' very
bytes, encoded once. A ``Body`` holds its scalars as a digest (BLAKE2b, 32 bytes: what
tells the next body the same, without keeping a copy of the bytes). ``LmdbStore``
remembers its last ``Body`` per conversation without its bytes (``remembered``: 660 bytes
a conversation for a bare agent, tens of KiB for an agent's objective and tool
definitions), and reads them back from its own record when it needs them;
``PostgresStore`` keeps them (every version row it writes holds its body).
"""

from __future__ import annotations

import hashlib
import operator
from typing import Any

import msgspec

from parlour.runtime.blocks import PojoBlock
from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import (
    ConversationPersistenceSnapshot,
    decode_snapshot,
    encode_snapshot,
)

from ._checked import UNENCODABLE, encode_messages, encode_usage, refused, why
from ._records import encode_body

__all__ = ["Body", "body_after", "readable", "remembered", "whole"]

_block = operator.attrgetter("block")


class Body:
    """A body's bytes (``data``: None once only remembered, see ``remembered``) and what
    they were encoded from: the digest of its scalar fields' and artifacts' bytes, and its
    block lists (copied: a snapshot's lists are its holder's)."""

    __slots__ = ("data", "digest", "lists")

    def __init__(self, data: bytes | None, digest: bytes, lists: _Lists) -> None:
        self.data, self.digest, self.lists = data, digest, lists

    @property
    def size(self) -> int:
        return 0 if self.data is None else len(self.data)


def remembered(body: Body) -> Body:
    """What a store keeps of ``body`` once it is written: all but its bytes (the next
    ``body_after`` still proves a body the same by its digest and lists; the bytes are in
    the store's record)."""
    if body.data is None:
        return body
    return Body(None, body.digest, body.lists)


_Lists = tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]  # objective, tools, skills
_EMPTY: _Lists = ((), (), ())


def body_after(snapshot: ConversationPersistenceSnapshot, previous: Body | None) -> Body:
    """``snapshot``'s body: ``previous`` (the body of an earlier save of the conversation)
    when it is provably the same (see the module docstring), else encoded anew.

    Raises:
        ValueError: the body would not read back (or does not encode); nothing was written.
    """
    cid = str(snapshot.conversation_id)
    try:
        scalars = encode_snapshot(
            msgspec.structs.replace(
                snapshot,
                messages=[],
                usage=[],
                stored_version=0,
                turn=None,
                objective=[],
                legacy_objective=None,
                declared_tools=[],
                skills=[],
            )
        )
        digest = hashlib.blake2b(scalars, digest_size=32).digest()
        objective = tuple(snapshot.objective)
        lists = (objective, tuple(snapshot.declared_tools), tuple(snapshot.skills))
        if (
            previous is not None
            and digest == previous.digest
            and lists == previous.lists
            and snapshot.legacy_objective is None
            and PojoBlock not in map(type, map(_block, objective))
        ):
            return previous
        if lists == _EMPTY and snapshot.legacy_objective is None:
            data = scalars  # no block lists: the body is its scalars' bytes
        else:
            data = encode_body(snapshot)
    except UNENCODABLE as exc:  # an artifact or an objective value changed in place
        raise refused(cid, "body", why(exc)) from None
    return Body(readable(data, cid), digest, lists)


def readable(data: bytes, cid: str) -> bytes:
    """``data`` (an encoded snapshot or body) once it decodes as a load would decode it.

    Raises:
        ValueError: it would not read back; nothing was written.
    """
    try:
        decode_snapshot(data, cid)
    except CorruptSnapshotError as exc:
        raise ValueError(
            f"The snapshot of conversation {cid} would not read back ({exc}); it was refused "
            "and nothing was written."
        ) from exc
    return data


def whole(snapshot: ConversationPersistenceSnapshot) -> bytes:
    """``snapshot`` encoded whole (as MemoryStore keeps a version), once it reads back: its
    messages and ledger entries first through the checked encoders, so a refusal names the
    one at fault as every store's does (a store for tests: it pays one more encode).

    Raises:
        ValueError: it would not read back; nothing was written.
    """
    cid = str(snapshot.conversation_id)
    encode_messages(cid, snapshot.messages, 0, len(snapshot.messages))
    encode_usage(cid, snapshot.usage, 0, len(snapshot.usage))
    try:
        data = encode_snapshot(snapshot)
    except UNENCODABLE as exc:  # an artifact or an objective value changed in place
        raise refused(cid, "body", why(exc)) from None
    return readable(data, cid)
