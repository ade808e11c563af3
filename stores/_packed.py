"""A large body stored compressed: an agent's objective and tool definitions are JSON that
zlib takes to a fifth or less, and every conversation of the agent stores them in its body
record and in its first version. LmdbStore packs a body of at least ``PACK_FROM`` bytes
where that saves an eighth (layout 6); every store reads through ``decode_record``, which
unpacks, so a plain body (a small one, every one written before, PostgreSQL's, which its
own TOAST compresses) reads as it is: a JSON body starts with ``{``.
"""

from __future__ import annotations

import zlib

from parlour.runtime.errors import CorruptSnapshotError

__all__ = ["PACK_FROM", "packed_body", "unpacked_body"]

PACK_FROM = 1024
_PACKED = b"\x00z1"  # zlib, level 6, after these three bytes
_MOST_UNPACKED = 1 << 28  # a body that would unpack past 256 MiB is damage, not a body


def packed_body(data: bytes) -> bytes:
    """``data`` (an encoded body) as LmdbStore stores it: compressed when that saves at
    least an eighth, else as it is."""
    if len(data) < PACK_FROM:
        return data
    packed = _PACKED + zlib.compress(data, 6)
    return packed if len(packed) <= len(data) - len(data) // 8 else data


def unpacked_body(stored: bytes | memoryview, conversation_id: str) -> bytes | memoryview:
    """The encoded body a stored body record holds (``packed_body``'s inverse; a record
    that is not packed is returned as it is).

    Raises:
        CorruptSnapshotError: a packed record that does not decompress, or would unpack
            past 256 MiB.
    """
    if bytes(stored[:3]) != _PACKED:
        return stored
    inflate = zlib.decompressobj()
    try:
        data = inflate.decompress(bytes(stored[3:]), _MOST_UNPACKED)
    except zlib.error as exc:
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} is damaged: its body does not "
            f"decompress ({exc})."
        ) from None
    if inflate.unconsumed_tail or not inflate.eof:
        raise CorruptSnapshotError(
            f"Stored conversation {conversation_id} is damaged: its body is cut short or "
            "unpacks past 256 MiB."
        )
    return data
