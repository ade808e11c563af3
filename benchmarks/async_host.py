"""An async host: many agent chats on one asyncio loop, against the same chats in threads.

C chats (50 by default) each run T turns on ONE event loop through ``Chat.asend``, over the
real Anthropic SDK on a mock transport that answers like a real model: 200 ms to the first
token, then 20 text chunks 10 ms apart; every third turn calls a tool first (so that turn
makes two model calls). A heartbeat task asks to wake every 10 ms and records how late it
woke. The baseline drives the same chats through ``asyncio.to_thread(chat.send, ...)`` on
the default executor. Prints turns/s, the heartbeat's p99 and worst delay for both, and the
ratio of turns/s. Saves are fsync'd LMDB commits. Both runs ``gc.freeze()`` after start-up,
as a latency-minded host does: without it a full collection of the SDKs' start-up objects
stalls every thread, the loop included, for about 100 ms a few times a run.

    python benchmarks/async_host.py [--chats 50] [--turns 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2

from parlour.actors import Agent, Chat, ConversationService
from parlour.runtime import Depth, OutputSize
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.testing import anthropic_message, anthropic_sse, fake_spec, mock_anthropic_sdk
from parlour.stores import LmdbStore, MemorySessionCache

FIRST_TOKEN_S = 0.200
CHUNKS, CHUNK_GAP_S = 20, 0.010
ANSWER = "The answer, streamed in twenty chunks!!"  # 40 characters: 20 chunks of 2
TOOL_CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}


def get_time() -> str:
    """The current time."""
    return "12:00"


def _wants_tool(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]["content"]
    texts = [b.get("text", "") for b in last if b.get("type") == "text"]
    results = [b for b in last if b.get("type") == "tool_result"]
    return not results and any("[tool]" in t for t in texts)


def _timed(events: list[bytes]) -> Iterator[bytes]:
    """The first two events after the first-token delay, then one per chunk gap."""
    time.sleep(FIRST_TOKEN_S)
    yield b"".join(events[:2])
    for event in events[2:]:
        yield event
        if b"text_delta" in event:
            time.sleep(CHUNK_GAP_S)


def model_like(request: httpx2.Request) -> httpx2.Response:
    """A mock transport handler answering like a streaming model."""
    body = json.loads(request.content)
    if _wants_tool(body):
        message = anthropic_message(None, content=[TOOL_CALL], stop_reason="tool_use")
    else:
        message = anthropic_message(ANSWER)
    stream = anthropic_sse(message, chunk=len(ANSWER) // CHUNKS)
    events = [e + b"\n\n" for e in stream.split(b"\n\n") if e]
    headers = {"content-type": "text/event-stream"}
    return httpx2.Response(200, content=_timed(events), headers=headers)


def make_agent() -> Agent:
    spec = fake_spec(id="claude-test", provider="anthropic")
    client = AnthropicClient(spec, client=mock_anthropic_sdk(model_like))  # type: ignore[arg-type]
    return Agent(
        client,
        tools=[get_time],
        objective="Answer.",
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
    )


def _text(turn: int) -> str:
    return f"Turn {turn}: what time is it? [tool]" if turn % 3 == 0 else f"Turn {turn}: hello."


class Heartbeat:
    """Wakes every 10 ms and records how late each wake-up was."""

    def __init__(self, interval_s: float = 0.010) -> None:
        self.interval_s = interval_s
        self.delays: list[float] = []

    async def run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            self.delays.append(time.perf_counter() - start - self.interval_s)

    def p99(self) -> float:
        ordered = sorted(self.delays) or [0.0]
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def _drive(
    chats: list[Chat], turns: int, send: Callable[[Chat, str], Awaitable[Any]]
) -> tuple[float, Heartbeat]:
    async def one(chat: Chat) -> None:
        for turn in range(turns):
            await send(chat, _text(turn))

    beat = Heartbeat()
    ticker = asyncio.ensure_future(beat.run())
    start = time.perf_counter()
    await asyncio.gather(*(one(c) for c in chats))
    seconds = time.perf_counter() - start
    ticker.cancel()
    return seconds, beat


async def _asend(chat: Chat, text: str) -> Any:
    return await chat.asend(text)


async def _to_thread(chat: Chat, text: str) -> Any:
    return await asyncio.to_thread(chat.send, text)


def run(mode: str, chats: int, turns: int, data_dir: Path) -> tuple[float, Heartbeat]:
    """turns/s and the heartbeat of one mode ("asend" or "to_thread")."""
    with LmdbStore(data_dir) as store:
        service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
        agent = make_agent()
        all_chats = [agent.chat(service, user_id=f"user-{i % 8}") for i in range(chats)]
        gc.collect()
        gc.freeze()  # as a latency-minded host does after start-up: full collections skip it
        send = _asend if mode == "asend" else _to_thread
        try:
            seconds, beat = asyncio.run(_drive(all_chats, turns, send))
        finally:
            service.stop()
    return chats * turns / seconds, beat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.chats} chats x {args.turns} turns on one loop; every third turn calls a tool")
    print(f"{'path':<12}{'turns/s':>10}{'beat p99 ms':>14}{'beat worst ms':>15}")
    results = {}
    for mode in ("to_thread", "asend"):
        with tempfile.TemporaryDirectory() as tmp:
            rate, beat = run(mode, args.chats, args.turns, Path(tmp))
        results[mode] = rate
        print(f"{mode:<12}{rate:>10.1f}{beat.p99() * 1e3:>14.1f}{max(beat.delays) * 1e3:>15.1f}")
    print(f"asend / to_thread: {results['asend'] / results['to_thread']:.1f}x turns/s")


if __name__ == "__main__":
    main()
