"""``parlour bench``: durable turns per second through the full path, as rich tables with a
progress bar.

Without ``--case``: C agent chats x T turns on W threads, each turn a whole ``Chat.send``
(obtaining the conversation from its actor, saving the user message, rendering, answering
with the ScriptedClient, saving the answer to LMDB and releasing). With ``--case`` (one of
``default``, ``hot``, ``cold`` or ``all``): the cases of ``benchmarks/turns.py``, each path
(the hand-written floor, the bare service free and in the turn gate, the agent) measured in
the same run, every figure also a ratio to that floor, the service and agent paths also
with every thread on one CPU. With ``--rounds N`` each case runs N times: each path shows
its median round (by its ratio to that round's floor) and the lowest and highest ratio,
and the restore rates their medians. On a shared machine one round's figures move by a
fifth from run to run; a change smaller than the range is not measured.

Ctrl-C stops it between turns (each thread after its current turn or conversation) and
prints no table: ``KeyboardInterrupt`` reaches ``parlour``'s main, status 130.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import msgspec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from parlour.runtime import Depth, OutputSize, ScriptedClient
from parlour.stores import LmdbStore, MemorySessionCache

from .._service import ConversationService
from ..agent._agent import Agent
from ._cases import CASES, CaseResult, Measured, Shape, run_case, text
from ._workload import TurnStats, ctrl_c_stops, drive, stop_point


@contextmanager
def _progress(total: int, what: str) -> Iterator[Progress]:
    """A progress bar on stderr, shown only to a person watching a terminal."""
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not sys.stderr.isatty(),
        transient=True,
    )
    with bar:
        bar.add_task(what, total=total)
        yield bar


def run_bench(
    data_dir: Path | None, conversations: int, turns: int, workers: int, sync: bool
) -> int:
    """The agent path alone on one shape; prints its table. Returns the exit status."""
    total = conversations * turns
    shape = Shape(conversations, turns, workers)
    print(_shape_line(shape, sync), flush=True)  # before the run: the wait has a caption
    with (
        ctrl_c_stops() as stop,
        tempfile.TemporaryDirectory() as tmp,
        _progress(total, "turns") as bar,
        LmdbStore(data_dir or Path(tmp), sync=sync) as store,
        ConversationService(store, MemorySessionCache(), cleanup_interval_s=0) as service,
    ):
        agent = Agent(ScriptedClient(), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
        chats = [agent.chat(service, user_id=f"user-{i % 16}") for i in range(conversations)]
        task = bar.task_ids[0]
        stats = drive(chats, text, turns, workers, on_turn=lambda: bar.advance(task), stop=stop)
    _shape_table(stats)
    return 0


def run_cases(names: list[str], sync: bool, rounds: int = 1) -> int:
    """Every named case ``rounds`` times (floor, service and agent in each round); prints one
    table of the median rounds and their ranges."""
    summaries = []
    for name in names:
        shape = CASES[name]
        paths = 6 * shape.conversations * shape.turns * rounds
        print(f"{name} case: {rounds} round(s), every path", flush=True)  # the wait's caption
        with ctrl_c_stops() as stop, _progress(paths, f"{name} case") as bar:
            advance = _stopping(partial(bar.advance, bar.task_ids[0]), stop)
            done = [run_case(name, shape, sync, advance) for _ in range(rounds)]
        summaries.append(summarize(done))
    _cases_table(summaries, sync)
    return 0


PATHS = (
    ("floor", "floor"),
    ("service", "service"),
    ("service, gated", "service_gated"),
    ("agent", "agent"),
    ("service, 1 CPU", "service_one_cpu"),
    ("agent, 1 CPU", "agent_one_cpu"),
)


class PathFigures(msgspec.Struct, frozen=True):
    """One path of a case over its rounds: its median round and its ratio to the floor of
    each round (the median, the lowest, the highest)."""

    path: str
    median: Measured
    ratio: float
    low: float
    high: float


class CaseSummary(msgspec.Struct, frozen=True):
    """One case over its rounds: every path, and the median of each restore rate."""

    name: str
    shape: Shape
    rounds: int
    paths: list[PathFigures]
    restore: tuple[float, float, float, float]  # on the threads, gated, 1 CPU, one thread


def summarize(rounds: list[CaseResult]) -> CaseSummary:
    """The rounds of one case as its table shows them: each path's round whose ratio to its
    own round's floor is the median (the lower of the middle two for an even count), so a
    drift of the machine between rounds moves the floor and the path together."""
    paths = []
    for path, field in PATHS:
        ratios = []
        for result in rounds:
            floor = result.floor.stats.turns_per_second
            tps = getattr(result, field).stats.turns_per_second
            ratios.append(tps / floor if floor else 0.0)
        middle = statistics.median_low(ratios)
        chosen = getattr(rounds[ratios.index(middle)], field)
        if path == "floor":  # every ratio is 1: the floor's median round is by turns/s
            by_speed = [r.floor.stats.turns_per_second for r in rounds]
            chosen = rounds[by_speed.index(statistics.median_low(by_speed))].floor
        paths.append(PathFigures(path, chosen, middle, min(ratios), max(ratios)))
    restore = (
        statistics.median(r.restore_per_s for r in rounds),
        statistics.median(r.restore_gated_per_s for r in rounds),
        statistics.median(r.restore_one_cpu_per_s for r in rounds),
        statistics.median(r.restore_one_thread_per_s for r in rounds),
    )
    return CaseSummary(rounds[0].name, rounds[0].shape, len(rounds), paths, restore)


def _stopping(progress: Callable[[int], None], stop: threading.Event) -> Callable[[int], None]:
    """``progress``, raising ``KeyboardInterrupt`` in the worker thread that reports once
    ``stop`` is set: the case's threads end there and the first one's error is raised."""

    def report(turns: int) -> None:
        progress(turns)
        stop_point(stop)

    return report


def _durability(sync: bool) -> str:
    return "fsync'd" if sync else "unsynced"


def _shape_line(shape: Shape, sync: bool) -> str:
    return (
        f"{shape.conversations} conversations x {shape.turns} turns, {shape.workers} threads, "
        f"{_durability(sync)} LMDB commits"
    )


def _shape_table(stats: TurnStats) -> None:
    console = Console(highlight=False)
    table = Table(box=None, show_edge=False, pad_edge=False)
    for column in ("turns", "seconds", "turns/s", "p50 ms", "p99 ms"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{stats.turns:,}",
        f"{stats.seconds:.2f}",
        f"{stats.turns_per_second:,.0f}",
        f"{stats.percentile(0.5) * 1e3:.2f}",
        f"{stats.percentile(0.99) * 1e3:.2f}",
    )
    console.print(table)


def _cases_table(summaries: list[CaseSummary], sync: bool) -> None:
    """One table a case (its name and shape in the title), then the cold cases' restores."""
    console = Console(highlight=False)
    for summary in summaries:
        shape = summary.shape
        title = (
            f"{summary.name} {shape.conversations}x{shape.turns} on {shape.workers} threads, "
            f"{_durability(sync)} commits"
        )
        if summary.rounds > 1:
            title += f": median of {summary.rounds} rounds (range)"
        table = Table(title=title)
        for column in ("path", "turns/s", "p50 ms", "p99 ms", "CPU ms/turn", "vs floor"):
            table.add_column(
                column,
                justify="left" if column == "path" else "right",
                no_wrap=column in ("path", "vs floor"),
            )
        for figures in summary.paths:
            stats = figures.median.stats
            ratio = f"{figures.ratio:.2f}x"
            if summary.rounds > 1 and figures.path != "floor":
                ratio += f" ({figures.low:.2f}-{figures.high:.2f})"
            table.add_row(
                figures.path,
                f"{stats.turns_per_second:,.0f}",
                f"{stats.percentile(0.5) * 1e3:.2f}",
                f"{stats.percentile(0.99) * 1e3:.2f}",
                f"{figures.median.cpu_per_turn * 1e3:.3f}",
                ratio,
            )
        console.print(table)
    for summary in summaries:
        if summary.shape.cold:
            free, gated, one_cpu, one_thread = summary.restore
            console.print(
                f"restore ({summary.name}): {free:,.0f} conversations/s on "
                f"{summary.shape.workers} threads ({gated:,.0f} gated), "
                f"{one_cpu:,.0f} on them with 1 CPU, {one_thread:,.0f} on one thread",
                soft_wrap=True,  # one line, whatever the terminal's width
            )
