"""``parlour bench``: durable turns per second through the full path, with a progress line.

The same workload as ``benchmarks/turns.py`` (which also measures the hand-written floor):
C agent chats x T turns on W threads, each turn a whole ``Chat.send``: obtaining the
conversation from its actor, saving the user message, rendering, answering with the
ScriptedClient, saving the answer to LMDB and releasing.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from pathlib import Path

from parlour.actors._agent import Agent
from parlour.actors._service import ConversationService
from parlour.actors._workload import TurnStats, drive
from parlour.runtime import Depth, OutputSize, ScriptedClient
from parlour.stores import LmdbStore, MemorySessionCache


def run_bench(
    data_dir: Path | None, conversations: int, turns: int, workers: int, sync: bool
) -> int:
    total = conversations * turns
    with tempfile.TemporaryDirectory() as tmp:
        store = LmdbStore(data_dir or Path(tmp), sync=sync)
        service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
        agent = Agent(ScriptedClient(), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
        chats = [agent.chat(service, user_id=f"user-{i % 16}") for i in range(conversations)]
        done = itertools.count(1)  # next() is atomic: workers share it safely
        step = max(total // 50, 1)
        show = sys.stderr.isatty()  # a progress line only for a person watching

        def progress() -> None:
            if not show:
                return
            n = next(done)
            if n % step == 0 or n == total:
                sys.stderr.write(f"\r{n:>8,}/{total:,} turns")
                sys.stderr.flush()

        try:
            stats = drive(chats, _text, turns, workers, on_turn=progress)
        finally:
            service.stop()
            store.close()
    if show:
        sys.stderr.write("\n")
    _table(stats, conversations, turns, workers, sync)
    return 0


def _text(index: int, turn: int) -> str:
    return f"Conversation {index}, turn {turn}: what should I read next about actors?"


def _table(stats: TurnStats, conversations: int, turns: int, workers: int, sync: bool) -> None:
    durability = "fsync'd" if sync else "unsynced"
    print(
        f"{conversations} conversations x {turns} turns, {workers} threads, "
        f"{durability} LMDB commits"
    )
    print(f"{'turns':>8}{'seconds':>10}{'turns/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    print(
        f"{stats.turns:>8,}{stats.seconds:>10.2f}{stats.turns_per_second:>10,.0f}"
        f"{stats.percentile(0.5) * 1e3:>9.2f}{stats.percentile(0.99) * 1e3:>9.2f}"
    )
