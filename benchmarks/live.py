"""Many live conversations in one process: memory, threads, and what each costs to reach.

For each count (default 100 and 10,000) it makes that many warm idle conversations in one
service (each obtained, given a message and released with a long retention), then prints
the process's RSS and thread count, the median and p99 latency of a warm obtain plus
release, how long ``get_stats()`` and ``sweep_expired()`` take (each after a collection of
the heap, so that none pays for one it happens to trigger), and how many spawns (each the
obtain of a new conversation) are made one after another while a ``get_stats()``, then a
sweep, runs in another thread, and the longest of them: neither may hold a spawn up for
more than a few milliseconds.

    python benchmarks/live.py [--counts 100 10000] [--samples 1000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import random
import statistics
import threading
import time
from collections.abc import Callable

from parlour.actors import BasicThinker, ConversationService

_RETAIN = dt.timedelta(hours=1)


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _warm(service: ConversationService, count: int) -> list[BasicThinker]:
    thinkers = []
    for i in range(count):
        thinker = BasicThinker(f"user-{i % 16}", retain_duration=_RETAIN)
        thinker.mint_conversation_id()
        context = service.obtain_conversation(None, thinker).get()
        context.add_user_message(f"conversation {i}")
        service.release(thinker)
        thinkers.append(thinker)
    return thinkers


def _timed(call: Callable[[], object]) -> float:
    """How long ``call`` takes, the heap collected first: a full collection the process
    owes (10,000 conversations' objects, about 100 ms) would otherwise land in whichever
    call its allocations happen to trigger it in, and be timed as that call's."""
    gc.collect()
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _obtain_latencies(
    service: ConversationService, thinkers: list[BasicThinker], samples: int
) -> list[float]:
    chosen = random.Random(7).choices(thinkers, k=samples)
    latencies = []
    for thinker in chosen:
        start = time.perf_counter()
        service.obtain_conversation(None, thinker).get()
        service.release(thinker)
        latencies.append(time.perf_counter() - start)
    return sorted(latencies)


def _spawns_beside(service: ConversationService, call: Callable[[], object]) -> tuple[float, int]:
    """The longest of the spawns (each the obtain of a new conversation) made one after
    another while ``call`` runs in another thread, and how many there were (at least one).
    The collector is off meanwhile: what is timed is whether ``call`` holds a spawn up."""
    gc.collect()
    gc.disable()
    started = threading.Event()

    def beside() -> None:
        started.set()
        call()

    thread = threading.Thread(target=beside)
    try:
        thread.start()
        started.wait()
        longest, spawns = 0.0, 0
        while thread.is_alive() or not spawns:
            start = time.perf_counter()
            _warm(service, 1)
            longest, spawns = max(longest, time.perf_counter() - start), spawns + 1
        thread.join()
    finally:
        gc.enable()
    return longest, spawns


def measure(count: int, samples: int) -> dict[str, float]:
    # room for the spawns made beside get_stats and the sweep: no eviction among them
    with ConversationService(cleanup_interval_s=0, max_live=2 * count + 10_000) as service:
        thinkers = _warm(service, count)
        latencies = _obtain_latencies(service, thinkers, samples)
        figures = {
            "live": service.get_stats().total,
            "rss MiB": _rss_mib(),
            "threads": threading.active_count(),
            "obtain p50 us": statistics.median(latencies) * 1e6,
            "obtain p99 us": latencies[int(0.99 * (len(latencies) - 1))] * 1e6,
            "get_stats ms": _timed(service.get_stats) * 1e3,
            "sweep ms": _timed(service.sweep_expired) * 1e3,
        }
        for name, call in (("get_stats", service.get_stats), ("the sweep", service.sweep_expired)):
            longest, spawns = _spawns_beside(service, call)
            figures[f"spawns beside {name}"] = spawns
            figures[f"  the longest ms ({name})"] = longest * 1e3
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[100, 10_000])
    parser.add_argument("--samples", type=int, default=1000)
    args = parser.parse_args()
    rows = [measure(count, args.samples) for count in args.counts]
    names = list(rows[0])
    print(f"{'':<28}" + "".join(f"{c:>12,}" for c in args.counts))
    for name in names:
        print(f"{name:<28}" + "".join(f"{row[name]:>12,.1f}" for row in rows))
    if len(rows) > 1:
        ratio = rows[-1]["obtain p50 us"] / rows[0]["obtain p50 us"]
        print(f"warm obtain p50 at {args.counts[-1]:,} live vs {args.counts[0]:,}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
