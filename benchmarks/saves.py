"""Save cost against conversation length: parlour's incremental save versus a full rewrite.

For conversations of 20, 200 and 2,000 messages, one new message is added and the
conversation saved, many times over. parlour: ``context.to_snapshot()`` and
``LmdbStore.save_context`` (it writes the header, the body and only the changed messages).
Baseline, measured in the same run: the hand-written loop, msgspec-encoding the whole
message list and putting it in one LMDB record per save. Both commit every save (fsync'd
unless ``--no-sync``). Prints µs per save and parlour's cost as a ratio to the baseline.

    python benchmarks/saves.py [--saves 200] [--no-sync]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import lmdb
import msgspec

from parlour.runtime import ConversationContext, IncomingMessage
from parlour.stores import LmdbStore

LENGTHS = (20, 200, 2000)


def _conversation(messages: int) -> ConversationContext:
    c = ConversationContext("bench", user_id="u")
    for i in range(messages // 2):
        c.add_user_message(f"Question {i}: what is the state of the art in durable actors?")
        c.add_message(IncomingMessage(f"Answer {i}: it depends on what you mean by durable."))
    return c


def parlour_save(path: Path, messages: int, saves: int, sync: bool) -> float:
    c = _conversation(messages)
    with LmdbStore(path, sync=sync) as store:
        c.stored_version = store.create_context(c.to_snapshot(), "u")
        start = time.perf_counter()
        for i in range(saves):
            c.add_user_message(f"follow-up {i}")
            c.stored_version = store.save_context(c.to_snapshot(), "u")
        return (time.perf_counter() - start) / saves


def baseline_save(path: Path, messages: int, saves: int, sync: bool) -> float:
    log = []
    for i in range(messages // 2):  # the same texts parlour's conversation holds
        log.append(
            {
                "role": "user",
                "text": f"Question {i}: what is the state of the art in durable actors?",
            }
        )
        log.append(
            {"role": "assistant", "text": f"Answer {i}: it depends on what you mean by durable."}
        )
    encoder = msgspec.json.Encoder()
    env = lmdb.open(str(path), map_size=1 << 30, sync=sync, metasync=sync)
    start = time.perf_counter()
    for i in range(saves):
        log.append({"role": "user", "text": f"follow-up {i}"})
        with env.begin(write=True) as txn:
            txn.put(b"bench", encoder.encode(log))
    elapsed = (time.perf_counter() - start) / saves
    env.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=200)
    parser.add_argument("--no-sync", dest="sync", action="store_false")
    args = parser.parse_args()
    print(f"{args.saves} saves per length, {'fsync' if args.sync else 'no fsync'}")
    print(f"{'messages':>9}{'full rewrite µs':>17}{'parlour µs':>12}{'× baseline':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in LENGTHS:
            base = baseline_save(Path(tmp) / f"b{n}", n, args.saves, args.sync)
            ours = parlour_save(Path(tmp) / f"p{n}", n, args.saves, args.sync)
            print(f"{n:>9}{base * 1e6:>17.1f}{ours * 1e6:>12.1f}{ours / base:>12.2f}")


if __name__ == "__main__":
    main()
