"""What a wait costs the turn after it: CPU per turn back to back, and with a pause after each.

A durable turn waits at least once (its fsync), and a turn among many threads waits more (its
commit's leader, the interpreter lock). On a virtual machine whose idle CPU halts at once
(the guest's ``haltpoll`` with ``guest_halt_poll_ns=0``, as on the machines this project
runs on) the host may run other work on that CPU meanwhile, so the code after a wait finds
its caches cold and runs slower; how much slower grows with what the turn touches: the
floor's turn is a few C calls, the service path's hundreds of Python calls. This measures
that on the same machine in one run, so a figure of ``turns.py`` (CPU per turn, turns/s
against the floor) can be read for what it is.

Each path (the floor and the bare service path of ``instructions.py``) is driven by one
thread, unsynced, over C conversations: 3 turns of warm-up, the heap frozen, then rounds of
K turns each, alternately back to back and with ``time.sleep(pause)`` after every turn. CPU
per turn is ``time.process_time()`` over a round's turns; each figure is the median of its
rounds, and the paused one has the pause's own CPU (its system calls, measured the same way
with no turn) taken off. Prints CPU per turn both ways, what a pause added, and the ratio.

    python benchmarks/wake.py [--conversations 40] [--turns 10] [--rounds 5] [--pause-us 300]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from instructions import turns_of  # the floor's and the service path's turn, one thread

PATHS = ("floor", "service")


def cpu_per_turn(
    turn: Callable[[int, int], object], first: int, args: argparse.Namespace, pause: float
) -> float:
    """CPU seconds per turn over ``args.turns`` turns of each conversation from the
    ``first``-th, with ``pause`` seconds of sleep after each (none: 0)."""
    start = time.process_time()
    for t in range(first, first + args.turns):
        for i in range(args.conversations):
            turn(i, t)
            if pause:
                time.sleep(pause)
    turns: int = args.turns * args.conversations
    return (time.process_time() - start) / turns


def measure(turn: Callable[[int, int], object], args: argparse.Namespace) -> tuple[float, float]:
    """The median CPU per turn back to back and with a pause after each turn, alternating
    round by round (a drift of the machine hits both), after 3 turns of warm-up."""
    for t in range(3):
        for i in range(args.conversations):
            turn(i, t)
    gc.collect()
    gc.freeze()
    solid: list[float] = []
    paused: list[float] = []
    first = 3
    for _ in range(args.rounds):
        for figures, pause in ((solid, 0.0), (paused, args.pause_us / 1e6)):
            figures.append(cpu_per_turn(turn, first, args, pause))
            first += args.turns
    gc.unfreeze()
    return statistics.median(solid), statistics.median(paused)


def measure_path(path: str, args: argparse.Namespace) -> tuple[float, float]:
    """``measure`` of ``path``'s turn."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        turns_of(path, Path(tmp), args.conversations) as turn,
    ):
        return measure(turn, args)


def _nothing(i: int, t: int) -> None:
    """No turn: the pause's own CPU (the sleep's system calls), to set against the rest."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--turns", type=int, default=10, help="turns each, per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pause-us", type=int, default=300, help="the pause after each turn")
    args = parser.parse_args()
    if min(args.conversations, args.turns, args.rounds, args.pause_us) < 1:
        parser.error("--conversations, --turns, --rounds and --pause-us must be at least 1")
    _, own = measure(_nothing, args)  # the sleep's own system calls, taken off below
    print(
        f"CPU per turn, one thread, unsynced, {args.conversations} conversations, medians of "
        f"{args.rounds} rounds; a {args.pause_us} us pause costs {own * 1e6:.1f} us by itself"
    )
    print(f"{'path':<9}{'back to back':>14}{'paused':>12}{'added':>11}{'x back to back':>16}")
    for path in PATHS:
        solid, paused = measure_path(path, args)
        paused -= own
        print(
            f"{path:<9}{solid * 1e6:>11.1f} us{paused * 1e6:>9.1f} us"
            f"{(paused - solid) * 1e6:>8.1f} us{paused / solid:>15.2f}x"
        )


if __name__ == "__main__":
    main()
