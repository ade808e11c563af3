"""The ownership stress test, long form: prints what it ran and whether every guarantee held.

Many threads on few conversations, zero and short retentions, a sweeper, explicit
evictions, a live cap below the conversation count, force releases, same-job re-obtains;
an overlap detector, a stale-grant detector, and at the end a reopened store that must hold
every acknowledged turn exactly once, in order. Exits 1 when a guarantee broke.

    python benchmarks/ownership.py [--threads 64] [--conversations 16] [--turns 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the driver lives in tests/
from tests.actors.stress import run_stress


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--turns", type=int, default=200, help="turns per thread")
    parser.add_argument("--rounds", type=int, default=3, help="runs, each with its own seed")
    parser.add_argument("--sync", action="store_true", help="fsync every commit")
    args = parser.parse_args()
    print(
        f"{args.threads} threads x {args.conversations} conversations x {args.turns} turns "
        f"per thread, {args.rounds} rounds"
    )
    print(
        f"{'round':<7}{'turns':>8}{'acked':>8}{'evicted':>9}{'forced':>8}{'re-obt':>8}"
        f"{'turns/s':>9}{'broken':>8}"
    )
    broken = 0
    for seed in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            r = run_stress(
                Path(tmp) / "db",
                threads=args.threads,
                conversations=args.conversations,
                turns_per_thread=args.turns,
                seed=seed,
                sync=args.sync,
            )
        broken += len(r.violations)
        rate = r.turns / r.seconds if r.seconds else 0.0
        print(
            f"{seed:<7}{r.turns:>8}{r.acknowledged:>8}{r.evictions:>9}{r.force_releases:>8}"
            f"{r.reobtains:>8}{rate:>9,.0f}{len(r.violations):>8}"
        )
        for violation in r.violations[:10]:
            print(f"    {violation}")
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
