"""What the usage-ledger tests of both stores share: entries, a conversation holding some,
its snapshot's bytes, and a raw read of one LMDB database."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import lmdb

from parlour.runtime import ConversationContext
from parlour.runtime.snapshots import encode_snapshot

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def call(i: int) -> dict[str, Any]:
    """A model-call ledger entry, distinct for each ``i``."""
    return {"type": "model_call", "model": "m", "input_tokens": i, "latency_s": i / 4}


def with_ledger(cid: str, entries: int, user: str = "alice") -> ConversationContext:
    """A conversation of ``user`` with one message and ``entries`` ledger entries."""
    c = ConversationContext(cid, user_id=user, created_at=T0)
    c.add_user_message(f"{cid} asks")
    c.usage_ledger = [call(i) for i in range(entries)]
    return c


def snapshot_bytes(c: ConversationContext) -> bytes:
    """The conversation's snapshot as a version read returns it, but for its version."""
    snapshot = c.to_snapshot()
    snapshot.stored_version = 0
    return encode_snapshot(snapshot)


def raw_db(path: Path, name: bytes) -> dict[bytes, bytes]:
    """Every record of the named database of the LMDB store at ``path``."""
    env = lmdb.open(str(path), max_dbs=16, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return dict(txn.cursor(db=env.open_db(name, txn=txn, create=False)))
    finally:
        env.close()
