"""``parlour fsck``: what it finds in an LmdbStore (records that do not decode, stored
versions that do not read, tool calls a kill left unanswered), the tables it prints, and
what ``--quarantine`` and ``--repair`` do about each."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from parlour.runtime import dangling_calls
from parlour.runtime.snapshots import repaired_messages
from parlour.stores import LmdbStore


def fsck(store: LmdbStore, args: argparse.Namespace, console: Console) -> int:
    """Check ``store`` as ``args`` ask (``--quarantine``, ``--repair``), print what was
    found on ``console`` (the refusal's line on stderr) and return the exit status."""
    found = store.undecodable()
    for cid, _ in found if args.quarantine else ():
        store.quarantine(cid)
    versions = store.damaged_versions()
    for cid in dict.fromkeys(cid for cid, _, _ in versions) if args.quarantine else ():
        store.quarantine_damaged_versions(cid)
    interrupted = store.interrupted()
    if args.repair:
        interrupted = [(cid, user, _repair(store, cid, user)) for cid, user, _ in interrupted]
    return max(
        _undecodable(found, args, console),
        _damaged_versions(versions, args, console),
        _interrupted(interrupted, args, console),
    )


def _damaged_versions(
    found: list[tuple[str, int, str]], args: argparse.Namespace, console: Console
) -> int:
    if not found:
        return 0
    table = Table(title=f"{len(found)} stored versions that do not read")
    table.add_column("id", no_wrap=True)
    table.add_column("version", justify="right")
    table.add_column("why")
    for cid, version, why in found:
        table.add_row(cid, str(version), why)
    console.print(table)
    if args.quarantine:
        console.print(f"quarantined {len(found)} versions (LmdbStore.quarantined(id) has them)")
        return 0
    print(
        f"parlour fsck: {len(found)} damaged versions; --quarantine moves them away",
        file=sys.stderr,
    )
    return 1


def _undecodable(found: list[tuple[str, str]], args: argparse.Namespace, console: Console) -> int:
    if not found:
        console.print(f"{args.data_dir}: every record decodes.")
        return 0
    table = Table(title=f"{len(found)} records that do not decode")
    table.add_column("id", no_wrap=True)
    table.add_column("why")
    for cid, why in found:
        table.add_row(cid, why)
    console.print(table)
    if args.quarantine:
        console.print(f"quarantined {len(found)} (LmdbStore.quarantined(id) gives them back)")
        return 0
    print(f"parlour fsck: {len(found)} damaged; --quarantine moves them away", file=sys.stderr)
    return 1


def _interrupted(
    found: list[tuple[str, str, int]], args: argparse.Namespace, console: Console
) -> int:
    if not found:
        console.print(f"{args.data_dir}: every tool call has its result.")
        return 0
    what = "repaired" if args.repair else "interrupted"
    table = Table(title=f"{len(found)} conversations {what}: tool calls without a result")
    table.add_column("id", no_wrap=True)
    table.add_column("user", no_wrap=True)
    table.add_column("calls repaired" if args.repair else "calls unanswered", justify="right")
    for cid, user, calls in found:
        table.add_row(cid, user, str(calls))
    console.print(table)
    if args.repair:
        console.print(f"repaired {len(found)} (each call answered as interrupted)")
        return 0
    print(f"parlour fsck: {len(found)} interrupted; --repair answers their calls", file=sys.stderr)
    return 1


def _repair(store: LmdbStore, cid: str, user: str) -> int:
    """Store ``cid`` as a restore reads it, each dangling call answered as interrupted, as a
    new version fenced on the one loaded; how many calls it answered."""
    snapshot = store.load(cid, user)
    if snapshot is None:  # deleted since the scan
        return 0
    parked = snapshot.turn.parked() if snapshot.turn is not None else frozenset[str]()
    calls = len([d for d in dangling_calls(snapshot.messages) if d.call.id not in parked])
    if calls:  # calls parked for a person's approval stay unanswered
        snapshot.messages = repaired_messages(snapshot.messages, parked)
        store.save_context(snapshot, user)
    return calls
