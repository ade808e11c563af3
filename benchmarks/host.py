"""A host behind a slow model: C chats at once, each turn waiting L seconds for its answer.

A real model answers in 1-30 s, so a host's throughput is its concurrency divided by the
model's latency: C chats doing back-to-back turns offer C / L turns a second, and what a
host adds is its overhead and its caps. Each path runs in a child process of its own (a
clean heap, its own threads, its own resident memory) on a fresh fsync'd LMDB store:

- ``floor``: a hand-written loop on threads: a dict of message lists, msgspec, one
  fsync'd LMDB commit for the user message and one for the answer, the model's wait a
  ``time.sleep`` in the chat's thread. The baseline of every ratio.
- ``service``: the service API on threads: obtain, add the user message, save (waited),
  wait L, add the answer, save, release.
- ``send``: ``Chat.send`` on threads, the model a scripted one that answers after L.
- ``asend``: ``Chat.asend``, every chat a task on one event loop, the model answering after
  an ``asyncio.sleep(L)``.

Each chat is its own thread (or task) and runs T turns. Printed per path: turns/s, its share
of the offered rate, the added latency (a turn's time minus L) at p50 and p99, the CPU per
turn (the child's user + system time over its turns), resident memory per live
conversation (the child's growth over the run, divided by C), and the path's turns/s as a
ratio to the floor's. Figures move a fifth between runs on a shared machine: compare only
ratios within one run.

The chats' first turns start spread evenly over one latency (``--start spread``, the
default: a host's arrivals are not synchronised; the rate's seconds leave that spread
out), or all at once (``--start together``: a thundering herd, the old shape). Also
printed: context switches per turn (voluntary and not), the mark of threads woken for
nothing.

Every path runs under ``tuning.host_collector`` (the garbage collector's youngest
generation at 50,000 objects, as ``parlour serve`` runs), the floor included;
``--collector interpreter`` keeps the interpreter's thresholds (700, 10, 10).

``--processes P`` runs each path in P processes at once, the chats split evenly, each
process with its own store and event loop (or threads): a measure of a host that spreads
its chats over processes by id (a single process runs Python on one core at a time).

    python benchmarks/host.py [--chats 500] [--latency 1.0] [--turns 3]
                              [--paths floor service send asend]
                              [--start spread|together] [--switch-interval S]
                              [--collector host|interpreter] [--processes P]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PATHS = ("floor", "service", "send", "asend")


def _text(chat: int, turn: int) -> str:
    return f"Chat {chat}, turn {turn}: where is my order?"


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class _Meter:
    """Resident memory and CPU from the start of the chats to their end (set-up and
    tear-down left out)."""

    spread = 0.0  # seconds over which the chats' first turns start (``--start spread``)

    def start(self) -> None:
        self.rss, self.cpu = _rss_kib(), resource.getrusage(resource.RUSAGE_SELF)
        self.begun = time.perf_counter()

    def stop(self) -> None:
        self.seconds = time.perf_counter() - self.begun
        self.rss = _rss_kib() - self.rss
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        self.user = cpu.ru_utime - self.cpu.ru_utime
        self.system = cpu.ru_stime - self.cpu.ru_stime
        self.switches = (cpu.ru_nvcsw - self.cpu.ru_nvcsw) + (cpu.ru_nivcsw - self.cpu.ru_nivcsw)

    def offset(self, chat: int, chats: int) -> float:
        """How long after the start chat ``chat`` begins its first turn."""
        return self.spread * chat / chats


def _on_threads(chats: int, one: Callable[[int], list[float]], meter: _Meter) -> list[float]:
    """``one(i)`` for every chat, each on a thread of its own, all let go at one start.

    Each thread waits for the start on a lock of its own, not on a shared barrier: a
    barrier's waiters all take its one lock again as they leave it, and thousands of threads
    queueing for one lock under the interpreter lock take seconds to get through (each
    hand-off waits for the interpreter), which would weigh on whichever path runs."""
    results: list[list[float]] = [[] for _ in range(chats)]
    starts = [threading.Lock() for _ in range(chats)]
    for start in starts:
        start.acquire()

    def run(i: int) -> None:
        starts[i].acquire()
        time.sleep(meter.offset(i, chats))
        results[i] = one(i)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(chats)]
    for thread in threads:
        thread.start()
    meter.start()
    for start in starts:
        start.release()
    for thread in threads:
        thread.join()
    meter.stop()
    return [x for r in results for x in r]


def run_floor(data: Path, chats: int, turns: int, latency: float, meter: _Meter) -> list[float]:
    """The hand-written loop, with the least a durable host needs: a group commit (one
    writer thread puts whatever is queued in one fsync'd transaction, then wakes its
    waiters), so it is bounded by the disk's commits, not by one fsync per put."""
    import lmdb
    import msgspec

    env = lmdb.open(str(data), map_size=1 << 32, sync=True, metasync=True)
    encode = msgspec.json.Encoder().encode
    logs: dict[str, list[dict[str, str]]] = {f"c{i}": [] for i in range(chats)}
    queue: list[tuple[bytes, bytes, threading.Event]] = []
    ready = threading.Condition()
    closing = [False]

    def writer() -> None:
        while True:
            with ready:
                while not queue and not closing[0]:
                    ready.wait()
                batch = queue[:]
                del queue[:]
            if not batch:
                return
            with env.begin(write=True) as txn:
                for key, value, _ in batch:
                    txn.put(key, value)
            for _, _, done in batch:
                done.set()

    def put(key: str, log: list[dict[str, str]]) -> None:
        done = threading.Event()
        with ready:
            queue.append((key.encode(), encode(log), done))
            ready.notify()
        done.wait()

    def one(i: int) -> list[float]:
        key, taken = f"c{i}", []
        for t in range(turns):
            begun = time.perf_counter()
            log = logs[key]
            log.append({"role": "user", "text": _text(i, t)})
            put(key, log)
            time.sleep(latency)
            log.append({"role": "assistant", "text": "It shipped yesterday."})
            put(key, log)
            taken.append(time.perf_counter() - begun)
        return taken

    committer = threading.Thread(target=writer, daemon=True)
    committer.start()
    try:
        return _on_threads(chats, one, meter)
    finally:
        with ready:
            closing[0] = True
            ready.notify()
        committer.join()
        env.close()


def _slow_client(latency: float) -> Any:
    from parlour.runtime import ScriptedClient

    class SlowModel(ScriptedClient):
        """Answers like the scripted default, after ``latency`` seconds."""

        def _send(self, request: Any) -> Any:
            time.sleep(latency)
            return super()._send(request)

        async def _asend(self, request: Any, on_text: Any) -> Any:
            await asyncio.sleep(latency)
            return ScriptedClient._send(self, request)

    return SlowModel()


def run_service(data: Path, chats: int, turns: int, latency: float, meter: _Meter) -> list[float]:
    from parlour.actors import BasicThinker, ConversationService
    from parlour.runtime import Depth, IncomingMessage, OutputSize
    from parlour.stores import LmdbStore, MemorySessionCache

    client = _slow_client(latency)
    with LmdbStore(data) as store:
        service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)

        def one(i: int) -> list[float]:
            thinker = BasicThinker(
                f"user-{i}", output_declaration=OutputSize.STANDARD, depth=Depth.IMMEDIATE
            )
            thinker.mint_conversation_id()
            taken = []
            for t in range(turns):
                begun = time.perf_counter()
                context = service.obtain_conversation(None, thinker).get()
                try:
                    context.add_user_message(_text(i, t))
                    service.save_conversation(context, thinker)
                    response = client.respond(context)
                    context.add_message(IncomingMessage(blocks=response.blocks))
                    service.save_conversation(context, thinker)
                finally:
                    service.release(thinker)
                taken.append(time.perf_counter() - begun)
            return taken

        try:
            return _on_threads(chats, one, meter)
        finally:
            service.stop()


def _agent(latency: float) -> Any:
    from parlour.actors import Agent
    from parlour.runtime import Depth, OutputSize

    return Agent(_slow_client(latency), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)


def run_send(data: Path, chats: int, turns: int, latency: float, meter: _Meter) -> list[float]:
    from parlour.actors import ConversationService
    from parlour.stores import LmdbStore, MemorySessionCache

    agent = _agent(latency)
    with LmdbStore(data) as store:
        service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)

        def one(i: int) -> list[float]:
            chat, taken = agent.chat(service, user_id=f"user-{i}"), []
            for t in range(turns):
                begun = time.perf_counter()
                chat.send(_text(i, t))
                taken.append(time.perf_counter() - begun)
            return taken

        try:
            return _on_threads(chats, one, meter)
        finally:
            service.stop()


def run_asend(data: Path, chats: int, turns: int, latency: float, meter: _Meter) -> list[float]:
    from parlour.actors import ConversationService
    from parlour.stores import LmdbStore, MemorySessionCache

    agent = _agent(latency)

    async def main(service: Any) -> list[float]:
        async def one(i: int) -> list[float]:
            chat, taken = agent.chat(service, user_id=f"user-{i}"), []
            await asyncio.sleep(meter.offset(i, chats))
            for t in range(turns):
                begun = time.perf_counter()
                await chat.asend(_text(i, t))
                taken.append(time.perf_counter() - begun)
            return taken

        meter.start()
        results = await asyncio.gather(*(one(i) for i in range(chats)))
        meter.stop()
        return [x for r in results for x in r]

    with LmdbStore(data) as store:
        service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
        try:
            return asyncio.run(main(service))
        finally:
            service.stop()


RUNS = {"floor": run_floor, "service": run_service, "send": run_send, "asend": run_asend}


def child(
    path: str, chats: int, turns: int, latency: float, start: str, collector: str = "host"
) -> None:
    """Run one path and print what it measured as one JSON line (``_figures`` merges
    the lines of the processes that ran it at once)."""
    from parlour.actors.tuning import host_collector

    meter = _Meter()
    meter.spread = latency if start == "spread" else 0.0
    tuned = host_collector() if collector == "host" else contextlib.nullcontext()
    with tempfile.TemporaryDirectory() as tmp, tuned:
        taken = RUNS[path](Path(tmp) / "db", chats, turns, latency, meter)
    measured = {
        "added": [round(t - latency, 6) for t in taken],
        "seconds": meter.seconds - meter.spread,  # the time the chats were all running
        "user": meter.user,
        "system": meter.system,
        "switches": meter.switches,
        "rss_kib": meter.rss,
    }
    print(json.dumps(measured))


def _figures(runs: list[dict[str, Any]], chats: int) -> dict[str, float]:
    """One path's figures from its processes' runs (run at once, each its share of the
    chats): turns over the longest run's seconds, percentiles over every turn."""
    added = sorted(a for run in runs for a in run["added"])
    user = sum(run["user"] for run in runs)
    system = sum(run["system"] for run in runs)
    return {
        "rate": len(added) / max(run["seconds"] for run in runs),
        "p50": added[len(added) // 2],
        "p99": added[min(len(added) - 1, int(len(added) * 0.99))],
        "cpu_per_turn": (user + system) / max(1, len(added)),
        "kernel_share": system / max(user + system, 1e-9),
        "switches_per_turn": sum(run["switches"] for run in runs) / max(1, len(added)),
        "rss_per_chat_kib": sum(run["rss_kib"] for run in runs) / chats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=500)
    parser.add_argument("--latency", type=float, default=1.0, help="the model's seconds")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument(
        "--switch-interval",
        type=float,
        help="sys.setswitchinterval in every path's process (default: the interpreter's)",
    )
    parser.add_argument(
        "--start",
        choices=("spread", "together"),
        default="spread",
        help="the chats' first turns spread evenly over one model latency (as a host's "
        "arrivals come), or all at once (a thundering herd)",
    )
    parser.add_argument(
        "--collector",
        choices=("host", "interpreter"),
        default="host",
        help="the garbage collector's thresholds: tuning.host_collector's (as parlour serve "
        "runs), or the interpreter's",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="run each path in this many processes at once, the chats split evenly, each "
        "with its own store: what a host spreading its chats over processes would get",
    )
    parser.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    if args.child:
        child(args.child, args.chats, args.turns, args.latency, args.start, args.collector)
        return
    paths = ["floor", *(p for p in args.paths if p != "floor")]
    if args.processes < 1 or args.chats % args.processes:
        parser.error("--processes must be at least 1 and divide --chats")
    offered = args.chats / args.latency
    spread = f" over {args.processes} processes" if args.processes > 1 else ""
    print(
        f"{args.chats} chats{spread} x {args.turns} turns, the model answering after "
        f"{args.latency:g} s, started {args.start}: {offered:,.0f} turns/s offered "
        f"(collector: {args.collector})"
    )
    print(
        f"{'path':<8} {'turns/s':>9} {'offered':>8} {'p50 +ms':>8} {'p99 +ms':>8} "
        f"{'CPU/turn':>9} {'kernel':>7} {'csw/turn':>9} {'RSS/chat':>9} {'x floor':>8}"
    )
    floor_rate = None
    for path in paths:
        command = [sys.executable, __file__, "--child", path]
        command += ["--chats", str(args.chats // args.processes), "--turns", str(args.turns)]
        command += ["--latency", str(args.latency), "--start", args.start]
        command += ["--collector", args.collector]
        if args.switch_interval:
            command += ["--switch-interval", str(args.switch_interval)]
        children = [
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(args.processes)
        ]
        outputs = [process.communicate() for process in children]
        failed = [e for run, (_, e) in zip(children, outputs, strict=True) if run.returncode]
        if failed:
            tail = failed[0].strip().splitlines()[-1:] or ["no output"]
            print(f"{path:<8} failed: {tail[0]}")
            continue
        runs = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
        figures = _figures(runs, args.chats)
        rate = figures["rate"]
        floor_rate = floor_rate or rate
        print(
            f"{path:<8} {rate:>9,.0f} {rate / offered:>8.0%} {figures['p50'] * 1e3:>8,.0f} "
            f"{figures['p99'] * 1e3:>8,.0f} {figures['cpu_per_turn'] * 1e3:>7.2f}ms "
            f"{figures['kernel_share']:>7.0%} {figures['switches_per_turn']:>9.1f} "
            f"{figures['rss_per_chat_kib']:>7.1f}KiB "
            f"{rate / floor_rate:>7.2f}x"
        )


if __name__ == "__main__":
    main()
