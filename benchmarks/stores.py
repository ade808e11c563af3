"""Store throughput against the hand-written floor, measured in the same run.

LmdbStore (durable: fsync per commit): one conversation growing by a turn per save,
``--saves`` times, with version history and without; loads warm (the store open) and cold
(a fresh open of the directory per load); reads of an old version (a checkpoint and its
chain of deltas replayed). Baseline: raw LMDB, one put of the whole encoded snapshot and a
commit per save (under a key per version: what keeping every version as a full snapshot
costs), one get and decode per load. Also the disk each holds after the saves, and how fast
one user's 100 conversations list among 1,000 and among 100,000 of other users'.

PostgresStore: one conversation growing by a turn (a question and an answer) per save,
``--saves`` times, with ``context.to_snapshot()`` and ``save_context`` (it writes the
conversation row, a version row with the snapshot less its messages, and only the new
messages), then ``--loads`` loads of it. Baseline: raw psycopg on the same server, inserting
the msgspec-encoded whole snapshot as one row per save (autocommit, as the store runs) and
selecting and decoding it per load. Also the disk both hold afterwards: the baseline's rows
are what keeping every version as a full snapshot would cost. Prints a table with parlour's
throughput as a ratio to the baseline's; then how fast one user's 100 conversations list
among 1,000 and among 100,000 of other users' (the owner index: it should not slow down).

The server: ``--dsn``, else ``PARLOUR_TEST_POSTGRES``, else one started for the run with
``.ci/postgres`` (without installing anything). Tables go in a schema of their own, dropped
at the end.

    python benchmarks/stores.py [--store all|lmdb|postgres] [--saves 1000] [--loads 1000]
                                [--dsn DSN]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import lmdb

from parlour.runtime import ConversationContext, IncomingMessage
from parlour.runtime.snapshots import decode_snapshot, encode_snapshot
from parlour.stores import LmdbStore, PostgresStore

with contextlib.suppress(ImportError):  # the PostgreSQL half needs parlour[postgres]
    import psycopg
    from psycopg.conninfo import make_conninfo

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "postgres"
PARLOUR_TABLES = ("parlour_conversations", "parlour_versions", "parlour_messages")


def _turn(c: ConversationContext, i: int) -> None:
    c.add_user_message(f"Question {i}: what is the state of the art in durable actors?")
    c.add_message(IncomingMessage(f"Answer {i}: it depends on what you mean by durable."))


def _conversation() -> ConversationContext:
    c = ConversationContext("bench", user_id="u")
    c.put_main_objective("task", "Answer questions about distributed systems, briefly.")
    for i in range(10):
        _turn(c, i)
    return c


# -- LmdbStore --------------------------------------------------------------------------------


def lmdb_rates(path: Path, saves: int, loads: int, history: bool) -> dict[str, float]:
    """Saves/s of the growing conversation, loads/s warm and cold, version reads/s, and
    the bytes in use afterwards, through LmdbStore."""
    c = _conversation()
    with LmdbStore(path, history=history, keep_versions=None) as store:
        c.stored_version = store.create_context(c.to_snapshot(), "u")
        start = time.perf_counter()
        for i in range(saves):
            _turn(c, 10 + i)
            c.stored_version = store.save_context(c.to_snapshot(), "u")
        rates = {"saves": saves / (time.perf_counter() - start)}
        rates["warm"] = _rate(loads, lambda: store.load("bench", "u"))
        middle = c.stored_version // 2 + 1
        if history:
            rates["version"] = _rate(loads, lambda: store.load_version("bench", middle, "u"))
        rates["disk"] = store.statistics().used_bytes

    def cold() -> None:
        with LmdbStore(path, readonly=True) as fresh:
            fresh.load("bench", "u")

    rates["cold"] = _rate(max(1, loads // 10), cold)
    return rates


def raw_lmdb_rates(path: Path, saves: int, loads: int) -> dict[str, float]:
    """The floor: a put of the whole encoded snapshot (a key per version) and a commit per
    save; a get and decode per load."""
    c = _conversation()
    env = lmdb.open(str(path), map_size=1 << 34, sync=True, metasync=True)
    key = b"bench"
    try:
        start = time.perf_counter()
        for i in range(saves + 1):
            if i:
                _turn(c, 10 + i)
            with env.begin(write=True) as txn:
                txn.put(key + i.to_bytes(8, "big"), encode_snapshot(c.to_snapshot()))
        rates = {"saves": (saves + 1) / (time.perf_counter() - start)}

        def load(version: int) -> None:
            with env.begin(buffers=True) as txn:
                decode_snapshot(txn.get(key + version.to_bytes(8, "big")), "bench")

        rates["warm"] = _rate(loads, lambda: load(saves))
        rates["version"] = _rate(loads, lambda: load(saves // 2))
        rates["disk"] = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    finally:
        env.close()

    def cold() -> None:
        fresh = lmdb.open(str(path), readonly=True, lock=False)
        with fresh.begin(buffers=True) as txn:
            decode_snapshot(txn.get(key + saves.to_bytes(8, "big")), "bench")
        fresh.close()

    rates["cold"] = _rate(max(1, loads // 10), cold)
    return rates


def lmdb_listing_rates(path: Path, others: tuple[int, ...], listings: int) -> list[float]:
    """Listings/s of one user's 100 conversations among ``others`` of other users' (997
    users; created without fsync, which listing does not depend on)."""
    rates, held = [], 0
    with LmdbStore(path, sync=False, history=False) as store:
        for n in range(100):
            store.create_context(ConversationContext(f"mine-{n}").to_snapshot(), "lister")
        for count in others:
            for i in range(held, count):
                snapshot = ConversationContext(f"other-{i}").to_snapshot()
                store.create_context(snapshot, f"user-{i % 997}")
            held = count
            rates.append(_rate(listings, lambda: store.list_conversations("lister", limit=100)))
    return rates


def lmdb_report(saves: int, loads: int) -> None:
    with tempfile.TemporaryDirectory(prefix="parlour-bench-") as base:
        root = Path(base)
        ours = lmdb_rates(root / "history", saves, loads, history=True)
        bare = lmdb_rates(root / "bare", saves, loads, history=False)
        raw = raw_lmdb_rates(root / "raw", saves, loads)
        listing = lmdb_listing_rates(root / "listing", (1_000, 100_000), loads)
    messages = 20 + 2 * saves
    print(f"LmdbStore (fsync per commit): one conversation, 20 messages, then {saves} turns")
    print(f"{'':<34}{'raw LMDB':>12}{'LmdbStore':>12}{'ratio':>8}{'no history':>12}{'ratio':>8}")
    rows = [
        (f"saves/s (20 to {messages} messages)", "saves"),
        (f"loads/s warm ({messages} messages)", "warm"),
        ("loads/s cold (a fresh open each)", "cold"),
        (f"version {saves // 2 + 1} reads/s", "version"),
    ]
    for name, field in rows:
        theirs, mine, plain = raw[field], ours[field], bare.get(field, 0.0)
        without = f"{plain:>12,.0f}{plain / theirs:>8.2f}" if field != "version" else ""
        print(f"{name:<34}{theirs:>12,.0f}{mine:>12,.0f}{mine / theirs:>8.2f}{without}")
    kib = {
        name: rates["disk"] / 1024 for name, rates in (("raw", raw), ("ours", ours), ("bare", bare))
    }
    print(
        f"{f'disk KiB, all {saves + 1} versions':<34}{kib['raw']:>12,.0f}{kib['ours']:>12,.0f}"
        f"{kib['ours'] / kib['raw']:>8.2f}{kib['bare']:>12,.0f}  (no history: current only)"
    )
    print("Listing one user's 100 conversations, listings/s:")
    print(f"  among 1,000 others {listing[0]:,.0f}; among 100,000 others {listing[1]:,.0f}")


# -- PostgresStore ----------------------------------------------------------------------------


def parlour_rates(conninfo: str, saves: int, loads: int) -> tuple[float, float, float]:
    """Saves per second, then loads per second of the short and of the long conversation,
    through PostgresStore."""
    c = _conversation()
    with PostgresStore(conninfo, keep_versions=None) as store:
        c.stored_version = store.create_context(c.to_snapshot(), "u")
        short = _rate(loads, lambda: store.load("bench", "u"))
        start = time.perf_counter()
        for i in range(saves):
            _turn(c, 10 + i)
            c.stored_version = store.save_context(c.to_snapshot(), "u")
        save_rate = saves / (time.perf_counter() - start)
        return save_rate, short, _rate(loads, lambda: store.load("bench", "u"))


def baseline_rates(conninfo: str, saves: int, loads: int) -> tuple[float, float, float]:
    """The floor: one INSERT of the whole encoded snapshot per save, one SELECT per load."""
    c = _conversation()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE TABLE raw_versions (id text, version int, body bytea)")
        conn.execute("CREATE INDEX ON raw_versions (id, version DESC)")
        insert = "INSERT INTO raw_versions VALUES ('bench', %s, %b)"
        select = "SELECT body FROM raw_versions WHERE id = 'bench' ORDER BY version DESC LIMIT 1"

        def load() -> None:
            [(body,)] = conn.execute(select, binary=True).fetchall()
            decode_snapshot(body, "bench")

        conn.execute(insert, (-1, encode_snapshot(c.to_snapshot())))
        short = _rate(loads, load)
        start = time.perf_counter()
        for i in range(saves):
            _turn(c, 10 + i)
            conn.execute(insert, (i, encode_snapshot(c.to_snapshot())))
        save_rate = saves / (time.perf_counter() - start)
        return save_rate, short, _rate(loads, load)


def _rate(times: int, call: Callable[[], object]) -> float:
    start = time.perf_counter()
    for _ in range(times):
        call()
    return times / (time.perf_counter() - start)


def listing_rates(conninfo: str, others: tuple[int, ...], listings: int) -> list[float]:
    """Listings per second of one user's 100 conversations among ``others`` of other users'
    (those rows are inserted directly: listing reads only the conversations table)."""
    rates = []
    with PostgresStore(conninfo) as store, psycopg.connect(conninfo, autocommit=True) as conn:
        for n in range(100):
            store.create_context(
                ConversationContext(f"mine-{n}", user_id="lister").to_snapshot(), "lister"
            )
        held = 0
        for count in others:
            conn.execute(
                "INSERT INTO parlour_conversations SELECT 'other-' || i, 'user-' || (i %% 997),"
                " 'title', now(), now(), 1 FROM generate_series(%s::int, %s::int) AS i",
                (held, count - 1),
            )
            conn.execute("ANALYZE parlour_conversations")
            held = count
            rates.append(_rate(listings, lambda: store.list_conversations("lister", limit=100)))
    return rates


def disk_bytes(conninfo: str, tables: tuple[str, ...]) -> int:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        total = 0
        for table in tables:
            row = conn.execute("SELECT pg_total_relation_size(%s::regclass)", (table,)).fetchone()
            total += int(row[0]) if row else 0
        return total


@contextlib.contextmanager
def _server(dsn: str | None) -> Iterator[str]:
    if dsn:
        yield dsn
        return
    with tempfile.TemporaryDirectory(prefix="parlour-pg-") as base:
        started = subprocess.run(
            ["bash", str(SCRIPT), "start", base, "--no-install"],
            capture_output=True,
            text=True,
            check=True,
        )
        try:
            yield started.stdout.strip()
        finally:
            subprocess.run(["bash", str(SCRIPT), "stop", base], capture_output=True, check=False)


@contextlib.contextmanager
def _schema(dsn: str) -> Iterator[str]:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")  # a fresh hex name
    try:
        yield make_conninfo(dsn, options=f"-c search_path={name}")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--saves", type=int, default=1000)
    parser.add_argument("--loads", type=int, default=1000)
    parser.add_argument("--dsn", default=os.environ.get("PARLOUR_TEST_POSTGRES"))
    parser.add_argument("--store", choices=("all", "lmdb", "postgres"), default="all")
    args = parser.parse_args()
    if args.store in ("all", "lmdb"):
        lmdb_report(args.saves, args.loads)
    if args.store in ("all", "postgres"):
        postgres_report(args.saves, args.loads, args.dsn)


def postgres_report(saves: int, loads: int, given: str | None) -> None:
    with _server(given) as dsn:
        with _schema(dsn) as conninfo:
            ours = parlour_rates(conninfo, saves, loads)
            raw = baseline_rates(conninfo, saves, loads)
            disk = disk_bytes(conninfo, PARLOUR_TABLES) / 1024
            raw_disk = disk_bytes(conninfo, ("raw_versions",)) / 1024
        with _schema(dsn) as conninfo:
            listing = listing_rates(conninfo, (1_000, 100_000), loads)
    messages = 20 + 2 * saves
    print(f"PostgresStore: one conversation, 20 messages, then {saves} turns saved")
    print(f"{'':<34}{'raw psycopg':>12}{'PostgresStore':>15}{'ratio':>8}")
    rows = [
        (f"saves/s (20 to {messages} messages)", raw[0], ours[0]),
        ("loads/s (20 messages)", raw[1], ours[1]),
        (f"loads/s ({messages} messages)", raw[2], ours[2]),
        (f"disk KiB, all {saves + 1} versions", raw_disk, disk),
    ]
    for name, theirs, mine in rows:
        print(f"{name:<34}{theirs:>12,.0f}{mine:>15,.0f}{mine / theirs:>8.2f}")
    print("Listing one user's 100 conversations, listings/s:")
    print(f"  among 1,000 others {listing[0]:,.0f}; among 100,000 others {listing[1]:,.0f}")


if __name__ == "__main__":
    main()
