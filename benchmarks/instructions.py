"""Instructions per durable turn (callgrind): the floor, the service path and the agent path
(bare, and with tools).

Turns per second on a shared machine move between sittings by more than most changes do;
instruction counts do not (the same binary, inputs and environment give nearly the same
count whatever else the machine runs: the floor's repeats to a few instructions, the
service's and the agent's to about 0.5%, as their actor threads interleave a little
differently). So this compares a change's CPU cost per turn.

Each path is driven by one thread, unsynced (the kernel's fsync work is not counted anyway), over
C conversations: 3 turns of warm-up, then K more turns each, under ``valgrind
--tool=callgrind``, once with K=``--short`` and once with K=``--long``; the difference of the
two totals divided by the turns between them is the cost of one turn, start-up, warm-up and
exit cancelled out. The heap is frozen after warm-up (``gc.freeze``), so a full collection
of the start-up heap does not land in one run and not the other; the young collections the
turns cause are counted. The paths:

- floor: a dict of message lists, msgspec to encode the whole list, one LMDB put and commit;
- service: obtain, add the user message, save it deferred, the scripted model, add the
  answer, save, release (``ConversationService`` on ``LmdbStore``, every conversation live);
- agent: ``Chat.send`` of an ``Agent`` on the scripted model (the same turn, plus the usage
  ledger, the window check before the model call and the turn's followers);
- asend: the agent path through ``Chat.asend`` on one event loop that runs for the whole
  run, as a host's does: each turn a task of its own, awaited to its end (its saves, the
  model call and the obtain as the async driver makes them). Not ``run_until_complete``
  per turn: starting and stopping the loop costs about 73,000 instructions each time,
  which no host pays;
- tools: the agent path with what a real agent carries: twenty function tools (four
  parameters each) and an objective of about 800 characters (the model calls none of them);
- round: the agent path with one tool the model calls: two model calls a turn, and a
  durable boundary before each external call (the user's message, the answer that calls
  the tool, the tool's result), then the final answer.
- request: the agent path as a web handler runs it: a new chat of the conversation for
  every turn (``agent.chat(service, user_id=..., conversation_id=...)``), so each turn also
  takes the lease its last chat kept and builds the chat.

Prints each path's instructions per turn and its ratio to the floor and to the service path.
Needs valgrind (``apt-get install valgrind``); takes about five minutes.

    python benchmarks/instructions.py [--conversations 20] [--short 5] [--long 15]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PATHS = ("floor", "service", "agent", "asend", "tools", "round", "request")
TOOLS, OBJECTIVE = 20, "Answer briefly, and look things up before you answer. " * 15
_TOTAL = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)


Rounds = Callable[[range], None]


@contextlib.contextmanager
def turns_of(path: str, data_dir: Path, conversations: int) -> Iterator[Rounds]:
    """Rounds of turns on ``path``, set up in ``data_dir`` and closed when the block ends:
    called with a range of rounds, every conversation takes its turn of each, in order."""
    with _turn_of(path, data_dir, conversations) as turn:
        if path != "asend":

            def rounds(which: range) -> None:
                for t in which:
                    for i in range(conversations):
                        turn(i, t)

            yield rounds
            return
        with contextlib.closing(asyncio.new_event_loop()) as loop:

            async def each(which: range) -> None:
                for t in which:
                    for i in range(conversations):
                        await asyncio.create_task(turn(i, t))  # a host's request: a task

            yield lambda which: loop.run_until_complete(each(which))


@contextlib.contextmanager
def _turn_of(path: str, data_dir: Path, conversations: int) -> Iterator[Callable[[int, int], Any]]:
    """One turn of conversation ``i`` (its ``t``-th) on ``path`` (a coroutine on the
    ``asend`` path)."""
    import lmdb
    import msgspec

    from parlour.actors import Agent, ConversationService
    from parlour.actors.app._cases import _floor_turn, _service_turn, _thinker, _user, text
    from parlour.runtime import Depth, OutputSize, ScriptedClient
    from parlour.stores import LmdbStore, MemorySessionCache

    if path == "floor":
        encode = msgspec.json.Encoder().encode
        lists: list[list[dict[str, str]]] = [[] for _ in range(conversations)]
        env = lmdb.open(str(data_dir), map_size=1 << 31, sync=False, metasync=False)

        def floor(i: int, t: int) -> None:
            lists[i].extend(_floor_turn(i, t))
            with env.begin(write=True) as txn:
                txn.put(f"c{i}".encode(), encode(lists[i]))

        with contextlib.closing(env):
            yield floor
        return
    with (
        LmdbStore(data_dir, sync=False) as store,
        ConversationService(store, MemorySessionCache(), cleanup_interval_s=0) as service,
    ):
        if path == "service":
            client = ScriptedClient()
            thinkers = [_thinker(i, None) for i in range(conversations)]
            yield lambda i, t: _service_turn(service, client, thinkers[i], i, t)
            return
        if path == "round":
            agent = Agent(
                ScriptedClient(), tools=[lookup], output=OutputSize.STANDARD, depth=Depth.IMMEDIATE
            )
            chats = [agent.chat(service, user_id=_user(i)) for i in range(conversations)]
            yield lambda i, t: chats[i].send(f"{text(i, t)} Use lookup.")
            return
        agent = Agent(
            ScriptedClient(),
            tools=[_tool(n) for n in range(TOOLS)] if path == "tools" else (),
            objective=OBJECTIVE if path == "tools" else None,
            output=OutputSize.STANDARD,
            depth=Depth.IMMEDIATE,
        )
        chats = [agent.chat(service, user_id=_user(i)) for i in range(conversations)]
        if path == "asend":
            yield lambda i, t: chats[i].asend(text(i, t))
            return
        if path == "request":
            cids = [chat.conversation_id for chat in chats]

            def request(i: int, t: int) -> Any:
                if t == 0:  # the request that created it (warm-up)
                    return chats[i].send(text(i, t))
                chat = agent.chat(service, user_id=_user(i), conversation_id=cids[i])
                return chat.send(text(i, t))

            yield request
            return
        yield lambda i, t: chats[i].send(text(i, t))


def lookup(order_id: str = "42") -> str:
    """The status of an order (the scripted model calls it when the message names it)."""
    return f"Order {order_id} shipped yesterday."


def _tool(n: int) -> Callable[..., str]:
    def forecast(city: str, days: int = 3, units: str = "metric", hourly: bool = False) -> str:
        """The weather forecast for a city: the next days, in metric or imperial units, by
        day or by hour (the model calls it with the city as the user wrote it)."""
        return f"Sunny in {city}."

    forecast.__name__ = f"forecast_{n}"
    return forecast


def child(path: str, conversations: int, turns: int) -> None:
    """Run under callgrind: warm up, freeze the heap, run ``turns`` more turns each, exit."""
    tmp = tempfile.mkdtemp(prefix="parlour-instructions-")
    with turns_of(path, Path(tmp), conversations) as rounds:
        rounds(range(3))
        gc.collect()
        gc.freeze()
        rounds(range(3, 3 + turns))
        shutil.rmtree(tmp, ignore_errors=True)  # the same in both runs: it cancels out
        sys.stdout.flush()
        os._exit(0)  # no shutdown of actors and store: both runs would pay it, but it is noise


def _total(path: str, conversations: int, turns: int, out_dir: Path) -> int:
    out = out_dir / f"callgrind.{path}.{turns}"
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--child",
        path,
        "--conversations",
        str(conversations),
        "--turns",
        str(turns),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict and set layouts every run
    done = subprocess.run(command, capture_output=True, check=False, env=env)
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise SystemExit(f"callgrind of the {path} path failed: {' '.join(tail)}")
    found = _TOTAL.search(out.read_bytes())
    if found is None:
        raise SystemExit(f"callgrind wrote no total for the {path} path ({out})")
    return int(found.group(1))


def per_turn(path: str, conversations: int, short: int, long: int) -> float:
    """The instructions of one turn on ``path``: the two runs' difference over their turns."""
    with tempfile.TemporaryDirectory() as tmp:
        low = _total(path, conversations, short, Path(tmp))
        high = _total(path, conversations, long, Path(tmp))
    return (high - low) / ((long - short) * conversations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--short", type=int, default=5, help="turns each in the shorter run")
    parser.add_argument("--long", type=int, default=15, help="turns each in the longer run")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--turns", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.conversations, args.turns)
    if args.conversations < 1 or not 0 <= args.short < args.long:
        parser.error("needs --conversations of at least 1 and 0 <= --short < --long")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    costs = {path: per_turn(path, args.conversations, args.short, args.long) for path in args.paths}
    floor, service = costs.get("floor"), costs.get("service")
    print(f"instructions per turn, one thread, unsynced, {args.conversations} conversations")
    print(f"{'path':<10}{'instructions':>14}{'x floor':>10}{'x service':>11}")
    for path, cost in costs.items():
        to_floor = f"{cost / floor:.2f}x" if floor else "-"
        to_service = f"{cost / service:.2f}x" if service else "-"
        print(f"{path:<10}{cost:>14,.0f}{to_floor:>10}{to_service:>11}")
    if "tools" in costs:
        print(f"(tools: the agent path with {TOOLS} function tools and a long objective)")
    if "round" in costs:
        print("(round: the agent path with one tool call a turn, two model calls)")
    if "request" in costs:
        print("(request: the agent path with a new chat of the conversation every turn)")


if __name__ == "__main__":
    main()
