"""A process killed mid-write loses nothing it acknowledged: every save that returned is in
the store when it is reopened, and the store opens and reads cleanly. (A kill, not a power
cut: it checks that a save returns only after its commit, and that a commit is atomic.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from parlour.stores import LmdbStore

WRITER = """
import sys
from parlour.runtime import ConversationContext
from parlour.stores import LmdbStore

store = LmdbStore(sys.argv[1])
conversations = [ConversationContext(f"c{i}", user_id="alice") for i in range(4)]
for c in conversations:
    c.add_user_message("first")
    c.stored_version = store.create_context(c.to_snapshot(), "alice")
turn = 0
while True:  # saves until killed, acknowledging each one after it returned
    c = conversations[turn % 4]
    c.add_user_message(f"turn {turn}")
    c.stored_version = store.save_context(c.to_snapshot(), "alice")
    print(turn, flush=True)
    turn += 1
"""


def test_a_killed_writer_loses_no_acknowledged_save(tmp_path: Path) -> None:
    acknowledged = _killed_after_200_saves(WRITER, tmp_path)
    with LmdbStore(tmp_path) as store:
        for i in range(4):
            snapshot = store.load(f"c{i}", "alice")
            assert snapshot is not None
            said = [m.raw_content for m in snapshot.messages]
            # every acknowledged turn of this conversation is there, in order
            expected = [f"turn {t}" for t in range(i, acknowledged + 1, 4)]
            assert said[1 : 1 + len(expected)] == expected


LEDGER_WRITER = """
import sys
from parlour.runtime import ConversationContext
from parlour.stores import LmdbStore

store = LmdbStore(sys.argv[1])
conversations = [ConversationContext(f"c{i}", user_id="alice") for i in range(4)]
for c in conversations:
    c.stored_version = store.create_context(c.to_snapshot(), "alice")
turn = 0
while True:  # one message and one ledger entry a save, each acknowledged after it returned
    c = conversations[turn % 4]
    c.add_user_message(f"turn {turn}")
    c.usage_ledger.append({"type": "model_call", "turn": turn})
    if turn % 37 == 36:  # now and then a ledger rewritten whole, shorter
        c.usage_ledger = [dict(e) for e in c.usage_ledger[1:]]
    c.stored_version = store.save_context(c.to_snapshot(), "alice")
    print(turn, flush=True)
    turn += 1
"""


def test_a_writer_killed_mid_save_loses_no_acknowledged_ledger_entry(tmp_path: Path) -> None:
    acknowledged = _killed_after_200_saves(LEDGER_WRITER, tmp_path)
    with LmdbStore(tmp_path) as store:
        assert store.undecodable() == []
        for i in range(4):
            snapshot = store.load(f"c{i}", "alice")
            assert snapshot is not None
            turns = [int(str(m.raw_content).split()[1]) for m in snapshot.messages]
            assert turns[: len(range(i, acknowledged + 1, 4))] == list(
                range(i, acknowledged + 1, 4)
            )
            rewrites = sum(1 for t in turns if t % 37 == 36)
            # the ledger: an entry per saved turn, less the oldest one per rewrite
            assert [e["turn"] for e in snapshot.usage] == turns[rewrites:]


DEFERRED_WRITER = """
import sys
from parlour.runtime import ConversationContext, IncomingMessage
from parlour.stores import LmdbStore

store = LmdbStore(sys.argv[1])
conversations = [ConversationContext(f"c{i}", user_id="alice") for i in range(4)]
for c in conversations:
    c.stored_version = store.create_context(c.to_snapshot(), "alice")
turn = 0
while True:  # a deferred save of the question, then the answer's save, which waits for both
    c = conversations[turn % 4]
    c.add_user_message(f"turn {turn}")
    settle = store.save_context_later(c.to_snapshot(), "alice")
    c.stored_version += 1
    c.add_message(IncomingMessage(f"answer {turn}"))
    c.stored_version = store.save_context(c.to_snapshot(), "alice")
    settle()
    print(turn, flush=True)
    turn += 1
"""


def test_a_writer_killed_between_deferred_and_waited_saves_loses_no_acknowledged_turn(
    tmp_path: Path,
) -> None:
    """Every acknowledged turn (its question and answer) is there exactly once, in order;
    past them at most the last turn's question alone, or it with its answer."""
    acknowledged = _killed_after_200_saves(DEFERRED_WRITER, tmp_path)
    with LmdbStore(tmp_path) as store:
        assert store.undecodable() == []
        for i in range(4):
            snapshot = store.load(f"c{i}", "alice")
            assert snapshot is not None
            said = [str(m.raw_content) for m in snapshot.messages]
            turns = range(i, acknowledged + 1, 4)
            expected = [line for t in turns for line in (f"turn {t}", f"answer {t}")]
            assert said[: len(expected)] == expected
            rest, after = said[len(expected) :], turns[-1] + 4
            assert rest in ([], [f"turn {after}"], [f"turn {after}", f"answer {after}"])


def _killed_after_200_saves(writer: str, path: Path) -> int:
    """Run ``writer`` on ``path`` until it has acknowledged at least 200 saves, kill -9 it
    mid-write, and return the last save it acknowledged."""
    acknowledged = -1
    with subprocess.Popen(
        [sys.executable, "-c", writer, str(path)], stdout=subprocess.PIPE, text=True, cwd=path
    ) as child:
        assert child.stdout is not None
        for line in child.stdout:  # block on the pipe: no sleeping
            acknowledged = int(line)
            if acknowledged >= 200:
                break
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert acknowledged >= 200
    return acknowledged
