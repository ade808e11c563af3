"""Save and load cost of LmdbStore against raw LMDB, measured in the same run.

Two parts:

- ``lengths``: save cost against conversation length. For conversations of 20, 200 and
  2,000 messages, one new message is added and the conversation saved, many times over
  (``context.to_snapshot()`` and ``LmdbStore.save_context``), against the hand-written
  loop: msgspec-encoding the whole message list and putting it in one LMDB record per save.
  Wall µs per save, fsync'd unless ``--no-sync``.
- ``ledger`` (the agent turn's usage ledger): CPU µs per save of conversations holding 20
  and 200 ledger entries, each save adding a message and an entry (the snapshot taken
  outside the timing); then a 200-turn agent conversation (a question saved, then the
  answer with its model call's entry saved) and the bytes its version records and the
  whole store take on disk, history on.
- ``turns`` (the service turn's store calls): ``--conversations`` conversations growing by a
  turn (a question saved, then the answer saved: two saves per turn) for ``--turns`` turns,
  on ``--threads`` threads, synced and unsynced, history on and off. CPU µs per save is the
  calling threads' CPU (``time.thread_time``) around ``save_context``/``create_context``
  alone (every commit runs in a caller's thread, so the sum is the whole cost; the
  snapshot is taken outside it). Then CPU µs per ``load`` (which decodes) of 2- and
  200-message conversations on the same threads. Baseline, in the same run: raw LMDB, one
  write transaction per save putting the msgspec-encoded whole message list, and one get
  and decode per load.

    python benchmarks/saves.py [--part all|lengths|ledger|turns] [--saves 200] [--no-sync]
                               [--conversations 200] [--turns 10] [--threads 8]
                               [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lmdb
import msgspec

from parlour.runtime import ConversationContext, IncomingMessage
from parlour.stores import LmdbStore

LENGTHS = (20, 200, 2000)
LOAD_LENGTHS = (2, 200)
LEDGER_LENGTHS = (20, 200)


def _conversation(messages: int, cid: str = "bench", user: str = "u") -> ConversationContext:
    c = ConversationContext(cid, user_id=user)
    for i in range(messages // 2):
        c.add_user_message(f"Question {i}: what is the state of the art in durable actors?")
        c.add_message(IncomingMessage(f"Answer {i}: it depends on what you mean by durable."))
    return c


def _log(messages: int) -> list[dict[str, str]]:
    log = []
    for i in range(messages // 2):  # the same texts parlour's conversation holds
        question = f"Question {i}: what is the state of the art in durable actors?"
        log.append({"role": "user", "text": question})
        log.append(
            {"role": "assistant", "text": f"Answer {i}: it depends on what you mean by durable."}
        )
    return log


# -- lengths -----------------------------------------------------------------------------------


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
    log = _log(messages)
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


def lengths(tmp: Path, saves: int, sync: bool) -> None:
    print(f"lengths: {saves} saves per length, {'fsync' if sync else 'no fsync'}")
    print(f"{'messages':>9}{'full rewrite µs':>17}{'parlour µs':>12}{'× baseline':>12}")
    for n in LENGTHS:
        base = baseline_save(tmp / f"b{n}-{sync}", n, saves, sync)
        ours = parlour_save(tmp / f"p{n}-{sync}", n, saves, sync)
        print(f"{n:>9}{base * 1e6:>17.1f}{ours * 1e6:>12.1f}{ours / base:>12.2f}")


# -- ledger ------------------------------------------------------------------------------------


def _entry(i: int) -> dict[str, object]:
    """A model call's ledger entry in its plain form, as the agent appends it."""
    return {
        "type": "model_call",
        "model": "claude-sonnet-4-5",
        "input_tokens": 1200 + i,
        "output_tokens": 300 + i % 50,
        "cache_read_tokens": 1024,
        "cache_write_tokens": 0,
        "latency_s": 0.8 + i % 7 / 10,
        "purpose": "answer",
    }


def ledger_saves(path: Path, entries: int, sync: bool) -> float:
    """CPU µs per save of 50 conversations of 20 messages and ``entries`` ledger entries,
    each saved 4 times, every save adding a message and an entry."""
    spent, calls = 0.0, 0
    with LmdbStore(path, sync=sync) as store:
        for k in range(50):
            c = _conversation(20, f"c-{k}")
            c.usage_ledger = [_entry(i) for i in range(entries)]
            c.stored_version = store.create_context(c.to_snapshot(), "u")
            for i in range(4):
                c.add_user_message(f"follow-up {i}")
                c.usage_ledger.append(_entry(entries + i))
                snapshot = c.to_snapshot()
                start = time.thread_time()
                c.stored_version = store.save_context(snapshot, "u")
                spent += time.thread_time() - start
                calls += 1
    return spent / calls * 1e6


def agent_history_bytes(path: Path, turns: int) -> tuple[int, int]:
    """The version records' bytes and the store's used bytes after a ``turns``-turn agent
    conversation (two saves a turn, one ledger entry a turn), history on, every version
    kept."""
    with LmdbStore(path, sync=False, keep_versions=None) as store:
        c = ConversationContext("agent", user_id="u")
        c.stored_version = store.create_context(c.to_snapshot(), "u")
        for t in range(turns):
            c.add_user_message(_question(0, t))
            c.stored_version = store.save_context(c.to_snapshot(), "u")
            c.add_message(IncomingMessage(f"Answer: {_question(0, t)!r}."))
            c.usage_ledger.append(_entry(t))
            c.stored_version = store.save_context(c.to_snapshot(), "u")
        used = store.statistics().used_bytes
    env = lmdb.open(str(path), max_dbs=16, readonly=True, lock=False)
    with env.begin() as txn:
        versions = env.open_db(b"versions", txn=txn, create=False)
        recorded = sum(len(value) for _, value in txn.cursor(db=versions))
    env.close()
    return recorded, used


def ledger(tmp: Path, args: argparse.Namespace) -> None:
    print(
        f"ledger: CPU µs per save, median of {args.repeat}, {'fsync' if args.sync else 'no fsync'}"
    )
    for n in LEDGER_LENGTHS:
        ours = _median(args.repeat, ledger_saves, tmp, n, args.sync)
        print(f"{'save, ' + str(n) + ' entries':<24}{ours:>10.1f}")
    recorded, used = agent_history_bytes(Path(tempfile.mkdtemp(dir=tmp)), 200)
    print(
        f"200-turn agent conversation: versions {recorded / 1024:.0f} KiB, "
        f"store {used / 1024:.0f} KiB"
    )


# -- turns -------------------------------------------------------------------------------------


class _Cpu:
    """The CPU seconds spent inside timed calls, summed over every thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds = 0.0
        self.calls = 0

    def time(self, call: Callable[[], object]) -> object:
        start = time.thread_time()
        value = call()
        spent = time.thread_time() - start
        with self._lock:
            self.seconds += spent
            self.calls += 1
        return value

    @property
    def micros(self) -> float:
        return self.seconds / max(self.calls, 1) * 1e6


def _question(i: int, t: int) -> str:
    return f"Conversation {i}, turn {t}: what should I read next about actors?"


def _on_threads(run: Callable[[int], None], count: int, threads: int) -> None:
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(run, range(count)))


def parlour_turns(path: Path, args: argparse.Namespace, sync: bool, history: bool) -> float:
    """CPU µs per save of the service turn's two saves (the first one a create)."""
    cpu = _Cpu()
    with LmdbStore(path, sync=sync, history=history) as store:
        contexts = [
            ConversationContext(f"c-{i}", user_id=f"user-{i % 16}")
            for i in range(args.conversations)
        ]

        def save(c: ConversationContext) -> None:
            snapshot = c.to_snapshot()
            call = store.create_context if c.stored_version == 0 else store.save_context
            c.stored_version = int(cpu.time(lambda: call(snapshot, str(c.user_id))))  # type: ignore[arg-type]

        def one(i: int) -> None:
            c = contexts[i]
            for t in range(args.turns):
                c.add_user_message(_question(i, t))
                save(c)
                c.add_message(IncomingMessage(f"Answer: {_question(i, t)!r}."))
                save(c)

        _on_threads(one, args.conversations, args.threads)
    return cpu.micros


def baseline_turns(path: Path, args: argparse.Namespace, sync: bool) -> float:
    """CPU µs per save of raw LMDB: encode the whole message list, one put and commit."""
    cpu = _Cpu()
    encoder = msgspec.json.Encoder()
    env = lmdb.open(str(path), map_size=1 << 30, sync=sync, metasync=sync)

    def save(key: bytes, log: list[dict[str, str]]) -> None:
        def put() -> None:
            body = encoder.encode(log)
            with env.begin(write=True) as txn:
                txn.put(key, body)

        cpu.time(put)

    def one(i: int) -> None:
        key, log = f"c-{i}".encode(), list[dict[str, str]]()
        for t in range(args.turns):
            log.append({"role": "user", "text": _question(i, t)})
            save(key, log)
            log.append({"role": "assistant", "text": f"Answer: {_question(i, t)!r}."})
            save(key, log)

    try:
        _on_threads(one, args.conversations, args.threads)
    finally:
        env.close()
    return cpu.micros


def parlour_loads(path: Path, args: argparse.Namespace, messages: int) -> float:
    """CPU µs per ``load`` (read and decode) of a ``messages``-long conversation."""
    cpu = _Cpu()
    with LmdbStore(path, sync=False) as store:
        for i in range(args.conversations):
            c = _conversation(messages, f"c-{i}", f"user-{i % 16}")
            store.create_context(c.to_snapshot(), f"user-{i % 16}")

        def one(i: int) -> None:
            for _ in range(args.turns):
                cpu.time(lambda: store.load(f"c-{i}", f"user-{i % 16}"))

        _on_threads(one, args.conversations, args.threads)
    return cpu.micros


def baseline_loads(path: Path, args: argparse.Namespace, messages: int) -> float:
    cpu = _Cpu()
    encoder, decoder = msgspec.json.Encoder(), msgspec.json.Decoder(list[dict[str, str]])
    env = lmdb.open(str(path), map_size=1 << 30, sync=False, metasync=False)
    with env.begin(write=True) as txn:
        for i in range(args.conversations):
            txn.put(f"c-{i}".encode(), encoder.encode(_log(messages)))

    def load(key: bytes) -> object:
        with env.begin() as txn:
            return decoder.decode(txn.get(key))

    def one(i: int) -> None:
        key = f"c-{i}".encode()
        for _ in range(args.turns):
            cpu.time(lambda: load(key))

    try:
        _on_threads(one, args.conversations, args.threads)
    finally:
        env.close()
    return cpu.micros


def _median(repeat: int, run: Callable[..., float], tmp: Path, *args: object) -> float:
    """The median of ``repeat`` runs, each in a fresh directory under ``tmp``."""
    return statistics.median(run(Path(tempfile.mkdtemp(dir=tmp)), *args) for _ in range(repeat))


def turns(tmp: Path, args: argparse.Namespace) -> None:
    print(
        f"turns: {args.conversations} conversations x {args.turns} turns (two saves each) on "
        f"{args.threads} threads; CPU µs per call, median of {args.repeat}"
    )
    print(f"{'call':<24}{'raw LMDB':>10}{'parlour':>10}{'× raw':>8}")
    for sync in (True, False):
        base = _median(args.repeat, baseline_turns, tmp, args, sync)
        for history in (True, False):
            ours = _median(args.repeat, parlour_turns, tmp, args, sync, history)
            name = f"save {'sync' if sync else 'no-sync'} hist {'on' if history else 'off'}"
            print(f"{name:<24}{base:>10.1f}{ours:>10.1f}{ours / base:>8.2f}")
    for n in LOAD_LENGTHS:
        base = _median(args.repeat, baseline_loads, tmp, args, n)
        ours = _median(args.repeat, parlour_loads, tmp, args, n)
        name = f"load {n} messages"
        print(f"{name:<24}{base:>10.1f}{ours:>10.1f}{ours / base:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("all", "lengths", "ledger", "turns"), default="all")
    parser.add_argument("--saves", type=int, default=200)
    parser.add_argument("--no-sync", dest="sync", action="store_false")
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.part in ("all", "lengths"):
            lengths(Path(tmp), args.saves, args.sync)
        if args.part in ("all", "ledger"):
            ledger(Path(tmp), args)
        if args.part in ("all", "turns"):
            turns(Path(tmp), args)


if __name__ == "__main__":
    main()
