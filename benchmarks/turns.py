"""Durable turns per second: parlour's full path against a hand-written floor.

parlour: C agent chats x T turns driven by W threads, each a whole ``Chat.send`` (obtain
from the conversation actor, add the user message, save it deferred, prepare,
ScriptedClient, add the answer, save, release): two LMDB saves per turn, as the save
discipline asks, the deferred one riding in the answer's fsync'd commit (or an earlier one).

floor: the same workload with no actors and no runtime: a dict of conversations (lists of
message dicts), msgspec to encode, and one fsync'd LMDB commit per turn, in W threads.

Prints turns/s, p50 and p99 turn latency for both, and parlour's ratio to the floor.

    python benchmarks/turns.py [--conversations 200] [--turns 10] [--workers 8]

With ``--case default|hot|cold|all`` it runs the named cases of ``parlour.actors.app._cases``
instead (default 200x10, hot 8x200, cold 2,000x3 with every first turn a restore), each
``--rounds`` times (3 by default: each path shows its median round and the range of its
ratios). A round runs the floor, the bare service path (free, and each turn in
``turn_gate``), the agent path (gated by ``send`` itself), and the service and agent again
with every thread on one CPU; every figure is also a ratio to the floor of its round, CPU
per turn comes from ``time.process_time()``, and for the cold case the restore rate
(conversations/s from LMDB: load, decode and the actor it lands in) on the case's threads
(free, and each obtain and release in ``turn_gate``) and on one.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lmdb
import msgspec

from parlour.actors import Agent, ConversationService
from parlour.actors.app._bench import run_cases
from parlour.actors.app._cases import CASES
from parlour.actors.app._workload import TurnStats, drive
from parlour.runtime import Depth, OutputSize, ScriptedClient
from parlour.stores import LmdbStore, MemorySessionCache


def _text(index: int, turn: int) -> str:
    return f"Conversation {index}, turn {turn}: what should I read next about actors?"


def run_parlour(
    data_dir: Path, conversations: int, turns: int, workers: int, sync: bool
) -> TurnStats:
    store = LmdbStore(data_dir, sync=sync)
    service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
    agent = Agent(ScriptedClient(), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
    chats = [agent.chat(service, user_id=f"user-{i % 16}") for i in range(conversations)]
    try:
        return drive(chats, _text, turns, workers)
    finally:
        service.stop()
        store.close()


def run_floor(
    data_dir: Path, conversations: int, turns: int, workers: int, sync: bool
) -> TurnStats:
    env = lmdb.open(str(data_dir), map_size=1 << 30, sync=sync, metasync=sync)
    encoder = msgspec.json.Encoder()
    # Each conversation is driven by one worker, so the floor needs no locking of its own.
    store: dict[str, list[dict[str, str]]] = {f"c{i}": [] for i in range(conversations)}

    def one_conversation(index: int) -> list[float]:
        key = f"c{index}"
        latencies = []
        for turn in range(turns):
            start = time.perf_counter()
            messages = store[key]
            text = _text(index, turn)
            messages.append({"role": "user", "text": text})
            messages.append({"role": "assistant", "text": f"Answer: you said {text!r}."})
            body = encoder.encode(messages)
            with env.begin(write=True) as txn:
                txn.put(key.encode(), body)
            latencies.append(time.perf_counter() - start)
        return latencies

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        per = list(pool.map(one_conversation, range(conversations)))
    seconds = time.perf_counter() - start
    env.close()
    latencies = [x for xs in per for x in xs]
    return TurnStats(turns=len(latencies), seconds=seconds, latencies=latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument(
        "--no-sync",
        dest="sync",
        action="store_false",
        help="skip fsync on both sides: measures CPU cost, not the disk",
    )
    parser.add_argument("--case", choices=[*CASES, "all"], default=None)
    parser.add_argument(
        "--rounds", type=int, default=3, help="--case: rounds of each case, medians shown"
    )
    args = parser.parse_args()
    if args.case is not None:
        run_cases(list(CASES) if args.case == "all" else [args.case], args.sync, args.rounds)
        return
    shape = (args.conversations, args.turns, args.workers, args.sync)
    with tempfile.TemporaryDirectory() as tmp:
        floor = run_floor(Path(tmp) / "floor", *shape)
        parlour = run_parlour(Path(tmp) / "parlour", *shape)
    durability = "fsync'd" if args.sync else "unsynced"
    print(
        f"{args.conversations} conversations x {args.turns} turns, {args.workers} threads, "
        f"{durability} LMDB commits"
    )
    print(f"{'path':<10}{'turns/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'vs floor':>10}")
    for name, stats in (("floor", floor), ("parlour", parlour)):
        ratio = stats.turns_per_second / floor.turns_per_second
        print(
            f"{name:<10}{stats.turns_per_second:>10,.0f}{stats.percentile(0.5) * 1e3:>10.2f}"
            f"{stats.percentile(0.99) * 1e3:>10.2f}{ratio:>10.2f}"
        )


if __name__ == "__main__":
    main()
