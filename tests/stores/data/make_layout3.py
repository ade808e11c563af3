"""Writes tests/stores/data/layout3: a store as parlour wrote it with layout 3, the usage
ledger inside each body, version history on.

Run it against the code at commit 5377bfa (layout 3), never against today's code:

    git worktree add /tmp/old 5377bfa
    (cd /tmp/old && python3 -m venv .venv && .venv/bin/pip install -e .)
    /tmp/old/.venv/bin/python tests/stores/data/make_layout3.py tests/stores/data/layout3

What it holds (``test_lmdb_upgrade.py`` reads it back):

- alice-0: five versions; the ledger grows by a model call a version, then version 5
  replaces it with a shorter one (entries 0 and 2 of version 4).
- alice-1: two versions, never a ledger.
- bob-0: three versions; a compaction entry and two model calls, one with a float latency.
- bob-1: created and deleted (a tombstone at version 2).
"""

import datetime as dt
import sys
import tempfile
from pathlib import Path

import lmdb

from parlour.runtime import ConversationContext, IncomingMessage
from parlour.stores import LmdbStore

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def call(i: int, latency: float = 0.0) -> dict[str, object]:
    return {
        "type": "model_call",
        "model": "m",
        "input_tokens": 10 * i,
        "output_tokens": i,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "latency_s": latency,
        "purpose": "answer",
    }


ticks = iter(range(1000))
work = tempfile.mkdtemp()
store = LmdbStore(work, map_size=1 << 20, now=lambda: T0 + dt.timedelta(seconds=next(ticks)))

a = ConversationContext("alice-0", user_id="alice", created_at=T0)
a.add_user_message("alice asks 0")
a.stored_version = store.create_context(a.to_snapshot(), "alice")
for i in range(1, 4):
    a.add_message(IncomingMessage(f"answer {i}"))
    a.usage_ledger.append(call(i))
    a.stored_version = store.save_context(a.to_snapshot(), "alice")
a.usage_ledger = [a.usage_ledger[0], a.usage_ledger[2]]
a.add_user_message("alice asks again")
a.stored_version = store.save_context(a.to_snapshot(), "alice")

b = ConversationContext("alice-1", user_id="alice", created_at=T0)
b.add_user_message("no ledger here")
b.stored_version = store.create_context(b.to_snapshot(), "alice")
b.add_message(IncomingMessage("fine"))
store.save_context(b.to_snapshot(), "alice")

c = ConversationContext("bob-0", user_id="bob", created_at=T0)
c.add_user_message("bob asks")
c.usage_ledger.append(
    {"type": "compaction", "level": "trim", "tokens_before": 9, "tokens_after": 4}
)
c.stored_version = store.create_context(c.to_snapshot(), "bob")
c.usage_ledger.append(call(1, 0.25))
c.stored_version = store.save_context(c.to_snapshot(), "bob")
c.add_message(IncomingMessage("bob's answer"))
c.usage_ledger.append(call(2, 1.5))
store.save_context(c.to_snapshot(), "bob")

d = ConversationContext("bob-1", user_id="bob", created_at=T0)
d.usage_ledger.append(call(7))
d.stored_version = store.create_context(d.to_snapshot(), "bob")
store.save_context(d.to_snapshot(), "bob")
store.delete("bob-1", "bob")
store.close()
Path(sys.argv[1]).mkdir(parents=True)
env = lmdb.open(work, max_dbs=16, readonly=True, lock=False)
env.copy(sys.argv[1], compact=True)  # data.mdb alone, without free pages
env.close()
