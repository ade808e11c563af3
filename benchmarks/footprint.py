"""The memory a live idle conversation holds after one turn, measured with tracemalloc.

C chats of an ``Agent`` on the scripted model (``Chat.send``, one short turn each, every
turn durable on LMDB, all from one thread), each kept by the caller as a host would keep
it. First C chats measured by RSS alone (what the process grew by, the allocator's slack
and LMDB's mapped pages included), then C more with the heap traced from before the chats
are made to after their turns, a full collection first: the bytes per conversation in
all, then the allocation sites that hold them (by line, the largest first), so a change
to what a conversation keeps shows up as the line it moved. The RSS is also shown split:
the heap (anonymous pages) and the store's mapped file (LMDB's pages that the saves
touched: the store's records, its history versions included, not objects in memory).
``benchmarks/host.py``'s RSS per chat also counts each chat's own thread (its stack),
which this leaves out. ``--tools`` measures what a real agent carries instead of a bare
one: twenty function tools of four parameters and an objective of about 800 characters
(``instructions.py``'s tools path), which every conversation stores in its body.

    python benchmarks/footprint.py [--chats 2000] [--top 25] [--no-cache] [--tools]
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import tracemalloc
from pathlib import Path


def measure(chats: int, top: int, cache: bool, tools: bool = False) -> None:
    from instructions import OBJECTIVE, TOOLS, _tool

    from parlour.actors import Agent, ConversationService
    from parlour.runtime import Depth, OutputSize, ScriptedClient
    from parlour.stores import LmdbStore, MemorySessionCache

    agent = Agent(
        ScriptedClient(),
        tools=[_tool(n) for n in range(TOOLS)] if tools else (),
        objective=OBJECTIVE if tools else None,
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )
    with tempfile.TemporaryDirectory() as tmp, LmdbStore(Path(tmp), sync=False) as store:
        session = MemorySessionCache(capacity=chats * 2) if cache else None
        service = ConversationService(store, session, cleanup_interval_s=0)
        warm = agent.chat(service, user_id="warm-up")  # the process's one-off costs
        warm.send("Hello there, how are you today?")
        kept = []

        def turns(first: int) -> None:
            for i in range(first, first + chats):
                chat = agent.chat(service, user_id=f"user-{i}")
                chat.send(f"Hello there, this is chat {i}: how are you today?")
                kept.append(chat)
            gc.collect()

        gc.collect()
        start = _rss()
        turns(0)
        rss, heap, mapped = (after - before for after, before in zip(_rss(), start, strict=True))
        tracemalloc.start(1)
        before = tracemalloc.take_snapshot()
        turns(chats)
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        stats = after.compare_to(before, "lineno")
        total = sum(s.size_diff for s in stats)
        kind = "an agent with 20 tools" if tools else "a bare agent"
        print(f"{chats} live idle conversations of {kind} after one turn, session cache {cache}:")
        rows = (
            ("RSS", rss),
            ("  heap", heap),
            ("  store's mapped file", mapped),
            ("objects", total),
        )
        for what, size in rows:
            per = size / chats
            print(f"  {what} {per:,.0f} bytes a conversation ({per / 1024:.1f} KiB)")
        for s in sorted(stats, key=lambda s: -s.size_diff)[:top]:
            frame = s.traceback[0]
            where = f"{'/'.join(Path(frame.filename).parts[-3:])}:{frame.lineno}"
            per = s.size_diff / chats
            print(f"  {per:>8,.0f} B {s.count_diff / chats:>6.1f} objects  {where}")
        service.stop()


def _rss() -> tuple[int, int, int]:
    """The resident set, its anonymous pages (the heap) and its file pages (the maps)."""
    with open(f"/proc/{os.getpid()}/statm") as statm:
        rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    with open(f"/proc/{os.getpid()}/status") as status:
        kib = {
            k: int(v.split()[0])
            for k, v in (line.split(":", 1) for line in status)
            if k in ("RssAnon", "RssFile")
        }
    return rss, kib["RssAnon"] * 1024, kib["RssFile"] * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=2000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-cache", action="store_true", help="no session cache")
    parser.add_argument("--tools", action="store_true", help="an agent with 20 tools")
    args = parser.parse_args()
    measure(args.chats, args.top, not args.no_cache, args.tools)


if __name__ == "__main__":
    main()
