"""``parlour bench``: durable turns per second through the full path, as rich tables with a
progress bar.

Without ``--case``: C agent chats x T turns on W threads, each turn a whole ``Chat.send``
(obtaining the conversation from its actor, saving the user message, rendering, answering
with the ScriptedClient, saving the answer to LMDB and releasing). With ``--case`` (one of
``default``, ``hot``, ``cold`` or ``all``): the cases of ``benchmarks/turns.py``, each path
(the hand-written floor, the bare service free and in the turn gate, the agent) measured in
the same run, every figure also a ratio to that floor, the service and agent paths also
with every thread on one CPU.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from parlour.actors._agent import Agent
from parlour.actors._cases import CASES, CaseResult, Shape, run_case, text
from parlour.actors._service import ConversationService
from parlour.actors._workload import TurnStats, drive
from parlour.runtime import Depth, OutputSize, ScriptedClient
from parlour.stores import LmdbStore, MemorySessionCache


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
    with (
        tempfile.TemporaryDirectory() as tmp,
        _progress(total, "turns") as bar,
        LmdbStore(data_dir or Path(tmp), sync=sync) as store,
        ConversationService(store, MemorySessionCache(), cleanup_interval_s=0) as service,
    ):
        agent = Agent(ScriptedClient(), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
        chats = [agent.chat(service, user_id=f"user-{i % 16}") for i in range(conversations)]
        task = bar.task_ids[0]
        stats = drive(chats, text, turns, workers, on_turn=lambda: bar.advance(task))
    _shape_table(stats, Shape(conversations, turns, workers), sync)
    return 0


def run_cases(names: list[str], sync: bool) -> int:
    """Every named case, floor, service and agent in one run each; prints one table."""
    results = []
    for name in names:
        shape = CASES[name]
        paths = 6 * shape.conversations * shape.turns
        with _progress(paths, f"{name} case") as bar:
            task = bar.task_ids[0]
            results.append(run_case(name, shape, sync, partial(bar.advance, task)))
    _cases_table(results, sync)
    return 0


def _durability(sync: bool) -> str:
    return "fsync'd" if sync else "unsynced"


def _shape_table(stats: TurnStats, shape: Shape, sync: bool) -> None:
    console = Console(highlight=False)
    console.print(
        f"{shape.conversations} conversations x {shape.turns} turns, {shape.workers} threads, "
        f"{_durability(sync)} LMDB commits"
    )
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


def _cases_table(results: list[CaseResult], sync: bool) -> None:
    console = Console(highlight=False)
    table = Table(title=f"durable turns, {_durability(sync)} LMDB commits")
    for column in ("case", "path", "turns/s", "p50 ms", "p99 ms", "CPU ms/turn", "vs floor"):
        table.add_column(
            column,
            justify="left" if column in ("case", "path") else "right",
            no_wrap=column == "path",
        )
    for result in results:
        floor = result.floor.stats.turns_per_second
        for path, measured in (
            ("floor", result.floor),
            ("service", result.service),
            ("service, gated", result.service_gated),
            ("agent", result.agent),
            ("service, 1 CPU", result.service_one_cpu),
            ("agent, 1 CPU", result.agent_one_cpu),
        ):
            stats = measured.stats
            table.add_row(
                f"{result.name} {result.shape.conversations}x{result.shape.turns}",
                path,
                f"{stats.turns_per_second:,.0f}",
                f"{stats.percentile(0.5) * 1e3:.2f}",
                f"{stats.percentile(0.99) * 1e3:.2f}",
                f"{measured.cpu_per_turn * 1e3:.3f}",
                f"{stats.turns_per_second / floor:.2f}x" if floor else "-",
            )
    console.print(table)
    for result in results:
        if result.shape.cold:
            console.print(
                f"restore ({result.name}): {result.restore_per_s:,.0f} conversations/s on "
                f"{result.shape.workers} threads ({result.restore_gated_per_s:,.0f} gated), "
                f"{result.restore_one_cpu_per_s:,.0f} on them with 1 CPU, "
                f"{result.restore_one_thread_per_s:,.0f} on one thread",
                soft_wrap=True,  # one line, whatever the terminal's width
            )
