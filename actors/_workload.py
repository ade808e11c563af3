"""Turn workloads shared by ``parlour demo`` and the benchmarks: a turn through the full path.

A turn is: obtain the conversation (an actor hands over the lease), add the user message,
save, ask the model (render + client), add the answer, run any tool calls and ask again,
save, release. Saves are durable LMDB commits.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import msgspec

from parlour.actors._service import ConversationService
from parlour.actors._thinker import BasicThinker
from parlour.runtime import ConversationContext, LLMClient, OutgoingMessage
from parlour.runtime.blocks import ToolDefinitionBlock, ToolResultBlock

Tool = Callable[[dict[str, object]], str]

CURRENT_TIME = ToolDefinitionBlock(
    name="get_current_time",
    description="The current date and time in UTC, as ISO 8601.",
    schema_json='{"type":"object","properties":{},"title":"GetCurrentTimeInput"}',
)


def current_time(_: dict[str, object]) -> str:
    return json.dumps({"now": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})


DEMO_TOOLS: Mapping[str, Tool] = {"get_current_time": current_time}


class TurnStats(msgspec.Struct, frozen=True):
    """What a workload measured: turns, wall time, per-turn latencies (seconds)."""

    turns: int
    seconds: float
    latencies: list[float]

    @property
    def turns_per_second(self) -> float:
        return self.turns / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_turn(
    service: ConversationService,
    thinker: BasicThinker,
    client: LLMClient,
    text: str,
    tools: Mapping[str, Tool] = DEMO_TOOLS,
    *,
    save_user_message: bool = True,
    timeout_s: float = 30.0,
) -> ConversationContext:
    """One user turn, tool calls included, saved at every boundary (the user message in,
    each tool round, the answer out); returns the context. ``save_user_message=False``
    skips the first boundary, for a benchmark of exactly one save per turn."""
    context = service.obtain_conversation(None, thinker).get(timeout=timeout_s)
    try:
        context.add_user_message(text, compactable=False)
        if save_user_message:
            service.save_conversation(context, thinker)
        for _ in range(4):  # a model may chain a few tool calls; bound it
            response = client.respond(context)
            context.add_message(response.to_message())
            calls = response.tool_uses
            if not calls:
                break
            results = [
                ToolResultBlock(tool_use_id=c.id, content=tools[c.name](json.loads(c.input_json)))
                if c.name in tools
                else ToolResultBlock(
                    tool_use_id=c.id, content=f"no such tool {c.name}", is_error=True
                )
                for c in calls
            ]
            context.add_message(OutgoingMessage(blocks=results))
            service.save_conversation(context, thinker)
        service.save_conversation(context, thinker)
        return context
    finally:
        service.release(thinker)


def drive(
    service: ConversationService,
    thinkers: Sequence[BasicThinker],
    client: LLMClient,
    texts: Callable[[int, int], str],
    turns: int,
    workers: int,
    *,
    save_user_message: bool = True,
    on_turn: Callable[[], None] | None = None,
) -> TurnStats:
    """Run ``turns`` turns on every thinker's conversation, ``workers`` threads at once.

    Each conversation's turns run in order on one worker; conversations interleave.
    ``on_turn`` is called (from the worker threads) after every turn.
    """

    def one_conversation(index: int) -> list[float]:
        latencies = []
        for turn in range(turns):
            start = time.perf_counter()
            run_turn(
                service,
                thinkers[index],
                client,
                texts(index, turn),
                save_user_message=save_user_message,
            )
            latencies.append(time.perf_counter() - start)
            if on_turn is not None:
                on_turn()
        return latencies

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        per_conversation = list(pool.map(one_conversation, range(len(thinkers))))
    seconds = time.perf_counter() - start
    latencies = [x for xs in per_conversation for x in xs]
    return TurnStats(turns=len(latencies), seconds=seconds, latencies=latencies)
