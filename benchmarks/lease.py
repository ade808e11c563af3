"""The lease alone: CPU per warm obtain + release, and the cold restore rate.

``warm``: each of W threads obtains and releases its own warm conversation (retention > 0,
so the release is one message and no wait) R times; prints the CPU microseconds per
obtain + release pair (every thread's CPU, ``time.process_time()``) and pairs per second.

``restore``: ``measure_restore`` of ``parlour.actors.app._cases`` (2,000 stored conversations
restored by a fresh service on 8 threads, as in the cold case), with the CPU per restore
and the share of it the store's load and decode take (the same loads, timed alone).

    python benchmarks/lease.py [--rounds 20000] [--threads 1 8] [--restores 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from parlour.actors import BasicThinker, ConversationService
from parlour.actors.app._cases import _seed, _user, measure_restore
from parlour.stores import LmdbStore


def warm_pairs(threads: int, rounds: int) -> tuple[float, float]:
    """(CPU µs per obtain + release pair, pairs per second) on ``threads`` threads."""
    with ConversationService(cleanup_interval_s=0) as service:
        thinkers = []
        for i in range(threads):
            thinker = BasicThinker(f"user-{i}")
            thinker.mint_conversation_id()
            service.obtain_conversation(None, thinker).get()
            service.release(thinker)
            thinkers.append(thinker)
        barrier = threading.Barrier(threads + 1)

        def run(thinker: BasicThinker) -> None:
            barrier.wait()
            for _ in range(rounds):
                service.obtain_conversation(None, thinker).get()
                service.release(thinker)

        workers = [threading.Thread(target=run, args=(t,)) for t in thinkers]
        for worker in workers:
            worker.start()
        barrier.wait()
        cpu, start = time.process_time(), time.perf_counter()
        for worker in workers:
            worker.join()
        pairs = threads * rounds
        cpu_us = (time.process_time() - cpu) / pairs * 1e6
        return cpu_us, pairs / (time.perf_counter() - start)


def restore(count: int) -> tuple[float, float, float]:
    """(restores/s, CPU µs per restore, CPU µs per load + decode alone)."""
    with tempfile.TemporaryDirectory() as tmp, LmdbStore(Path(tmp), sync=False) as store:
        ids = _seed(store, count)
        cpu = time.process_time()
        rate = measure_restore(store, ids)
        per_restore = (time.process_time() - cpu) / count * 1e6
        cpu = time.process_time()
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda i: _load(store, ids[i], _user(i)), range(count)))
        per_load = (time.process_time() - cpu) / count * 1e6
        return rate, per_restore, per_load


def _load(store: LmdbStore, cid: str, user_id: str) -> object:
    snapshot = store.load(cid, user_id, None)
    return None if snapshot is None else snapshot.to_conversation(None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--restores", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for threads in args.threads:
        runs = [warm_pairs(threads, args.rounds // threads) for _ in range(args.runs)]
        cpu = statistics.median(r[0] for r in runs)
        rate = statistics.median(r[1] for r in runs)
        print(f"warm obtain+release, {threads} thread(s): {cpu:7.1f} µs CPU/pair, {rate:9,.0f}/s")
    if args.restores:
        runs = [restore(args.restores) for _ in range(args.runs)]
        rate, per, load = (statistics.median(r[i] for r in runs) for i in range(3))
        print(
            f"restore: {rate:9,.0f} conversations/s, {per:7.1f} µs CPU each, "
            f"load+decode {load:6.1f} µs ({load / per:.0%})"
        )


if __name__ == "__main__":
    main()
