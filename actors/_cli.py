"""The ``parlour`` command: ``chat`` with the agent, ``demo`` (the main job), ``bench``, and
``list`` and ``show`` stored conversations."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from loguru import logger

from parlour.actors._bench import run_bench, run_cases
from parlour.actors._cases import CASES
from parlour.actors._chat import run_chat
from parlour.actors._demo import run_demo
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore

DEFAULT_DATA_DIR = Path("parlour-data")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="parlour", description=__doc__)
    parser.add_argument("--verbose", action="store_true", help="log parlour's records to stderr")
    commands = parser.add_subparsers(dest="command", required=True)

    chat = commands.add_parser("chat", help="chat with the agent, streaming its answers")
    chat.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    chat.add_argument("--user", default="me", help="the user id (default: me)")
    chat.add_argument("--resume", metavar="ID", default=None, help="continue a conversation")
    chat.add_argument(
        "--model", default="scripted", help="a catalog model id (default: the offline scripted)"
    )

    demo = commands.add_parser("demo", help="run, restart and restore conversations offline")
    demo.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="the LMDB directory (default: ./parlour-data)",
    )
    demo.add_argument("--conversations", type=int, default=20)
    demo.add_argument("--workers", type=int, default=8)

    bench = commands.add_parser("bench", help="durable turns per second through the full path")
    bench.add_argument("--conversations", type=int, default=200)
    bench.add_argument("--turns", type=int, default=10)
    bench.add_argument("--workers", type=int, default=8)
    bench.add_argument(
        "--data-dir", type=Path, default=None, help="the LMDB directory (default: a temporary one)"
    )
    bench.add_argument(
        "--no-sync",
        dest="sync",
        action="store_false",
        help="skip fsync: measures the CPU path, not the disk",
    )
    bench.add_argument(
        "--case",
        choices=[*CASES, "all"],
        default=None,
        help="run a benchmark case against the hand-written floor (ignores the sizes above)",
    )

    listing = commands.add_parser("list", help="list a user's stored conversations")
    listing.add_argument("user_id")
    listing.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)

    show = commands.add_parser("show", help="print a stored conversation as JSON")
    show.add_argument("user_id")
    show.add_argument("conversation_id")
    show.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)

    args = parser.parse_args(argv)
    logger.remove()
    logger.enable("parlour")
    logger.add(sys.stderr, level="INFO" if args.verbose else "WARNING")
    sizes = (getattr(args, name, 1) for name in ("conversations", "turns", "workers"))
    if min(sizes) < 1:
        parser.error("--conversations, --turns and --workers must be at least 1")
    if args.command == "chat":
        return run_chat(args.data_dir, args.user, args.resume, args.model)
    if args.command == "demo":
        return run_demo(args.data_dir, args.conversations, args.workers)
    if args.command == "bench" and args.case is not None:
        return run_cases(list(CASES) if args.case == "all" else [args.case], args.sync)
    if args.command == "bench":
        return run_bench(args.data_dir, args.conversations, args.turns, args.workers, args.sync)
    with LmdbStore(args.data_dir) as store:
        if args.command == "list":
            for summary in store.list_conversations(args.user_id):
                print(
                    f"{summary.conversation_id}\t{summary.updated_at:%Y-%m-%d %H:%M}\t"
                    f"{summary.title}"
                )
            return 0
        snapshot = store.load(args.conversation_id, args.user_id)
        if snapshot is None:
            print(f"no conversation {args.conversation_id} for {args.user_id}", file=sys.stderr)
            return 1
        print(encode_snapshot(snapshot).decode())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
