"""The HTTP host under load: N concurrent SSE chats over loopback against a running server.

The server runs in a child process (this script with ``--child``): ``parlour serve``'s app
and uvicorn over the agent of ``async_host.py`` (the Anthropic SDK on a mock transport that
answers like a real model: 200 ms to the first token, then 20 chunks 10 ms apart; every
third turn calls a tool first), with a 10 ms heartbeat task on the server's loop. The parent
drives N chats (each: create a conversation, then T turns, each a POST answered as SSE),
all at once, and prints turns/s, p50/p99 time to the first streamed text, and the server
loop's p99 and worst heartbeat delay, beside the in-process ``Chat.asend`` figure of the
same chats from this run. Bounded: at most 500 chats, and every request gives up at
``--timeout`` seconds.

    python benchmarks/serve.py [--chats 50] [--turns 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2

sys.path.insert(0, str(Path(__file__).parent))
import async_host  # the shared model-like agent and heartbeat

TOKEN = "bench-token"


# -- the child: the server ---------------------------------------------------------------------


def child(data_dir: Path) -> None:
    """Serve on a free loopback port; print it; on SIGTERM print the heartbeat and exit."""
    import uvicorn

    from parlour.actors import ConversationService, asgi_app
    from parlour.actors.app._serve import _listen, _Server
    from parlour.stores import LmdbStore, MemorySessionCache

    beat = async_host.Heartbeat()

    class Server(_Server):  # type: ignore[misc]
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            self._beat = asyncio.ensure_future(beat.run())

    with LmdbStore(data_dir) as store:
        service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
        app = asgi_app(async_host.make_agent(), service, tokens={TOKEN: "bench"})
        listener = _listen("127.0.0.1", 0)
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on")
        print(listener.getsockname()[1], flush=True)
        gc.collect()
        gc.freeze()
        try:
            Server(config, app.state.host).run(sockets=[listener])
        finally:
            service.stop()
    delays = beat.delays or [0.0]
    print(json.dumps({"p99": beat.p99(), "worst": max(delays)}), flush=True)


# -- the parent: the clients -------------------------------------------------------------------


async def one_chat(client: httpx2.AsyncClient, turns: int, firsts: list[float]) -> None:
    cid = (await client.post("/api/conversations")).json()["conversation_id"]
    for turn in range(turns):
        start = time.perf_counter()
        body = {"text": async_host._text(turn)}
        seen_text = False
        async with client.stream("POST", f"/api/conversations/{cid}/messages", json=body) as r:
            async for line in r.aiter_lines():
                if not seen_text and line.startswith("data: ") and '"text_delta"' in line:
                    firsts.append(time.perf_counter() - start)
                    seen_text = True
                if line.startswith("data: ") and '"type":"done"' in line:
                    break
        if not seen_text:
            raise RuntimeError(f"turn {turn} of {cid} streamed no text")


async def drive(port: int, chats: int, turns: int, timeout: float) -> tuple[float, list[float]]:
    limits = httpx2.Limits(max_connections=chats + 4)
    headers = {"authorization": f"Bearer {TOKEN}"}
    firsts: list[float] = []
    async with httpx2.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=timeout, limits=limits
    ) as client:
        start = time.perf_counter()
        await asyncio.gather(*(one_chat(client, turns, firsts) for _ in range(chats)))
        return time.perf_counter() - start, firsts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values) or [0.0]
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def over_http(chats: int, turns: int, timeout: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, __file__, "--child", "--data-dir", tmp]
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as server:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            try:
                seconds, firsts = asyncio.run(drive(port, chats, turns, timeout))
            finally:
                server.send_signal(signal.SIGTERM)
            beat = json.loads(server.stdout.read().strip().splitlines()[-1])
            server.wait(60)
    return {
        "turns_per_s": chats * turns / seconds,
        "first_p50": percentile(firsts, 0.5),
        "first_p99": percentile(firsts, 0.99),
        "beat_p99": beat["p99"],
        "beat_worst": beat["worst"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.data_dir)
        return
    if not 1 <= args.chats <= 500 or not 1 <= args.turns <= 50:
        parser.error("--chats is 1 to 500 and --turns 1 to 50")
    print(f"{args.chats} chats x {args.turns} turns; every third turn calls a tool")
    http = over_http(args.chats, args.turns, args.timeout)
    with tempfile.TemporaryDirectory() as tmp:
        rate, beat = async_host.run("asend", args.chats, args.turns, Path(tmp))
    print(
        f"{'path':<22}{'turns/s':>9}{'1st text p50':>14}{'p99 ms':>8}"
        f"{'loop p99':>10}{'worst ms':>10}"
    )
    print(
        f"{'HTTP + SSE (loopback)':<22}{http['turns_per_s']:>9.1f}"
        f"{http['first_p50'] * 1e3:>14.0f}{http['first_p99'] * 1e3:>8.0f}"
        f"{http['beat_p99'] * 1e3:>10.1f}{http['beat_worst'] * 1e3:>10.1f}"
    )
    print(
        f"{'in-process asend':<22}{rate:>9.1f}{'':>14}{'':>8}"
        f"{beat.p99() * 1e3:>10.1f}{max(beat.delays) * 1e3:>10.1f}"
    )
    print(f"HTTP / in-process: {http['turns_per_s'] / rate:.2f}x turns/s")


if __name__ == "__main__":
    main()
