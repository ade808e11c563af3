"""``parlour demo``: the README's agent at scale. Many chats with a tool-using agent, a
restart of the runtime, every conversation restored and resumed, one more turn each.

Runs offline on the ScriptedClient and an embedded LMDB directory. Exits non-zero when any
conversation does not come back from the store exactly as it was saved; Ctrl-C stops it
cleanly between turns (running turns finish and are saved, nothing is left owned, the
store is closed) with status 130.

``parlour demo --long`` (``run_long_demo``) is one conversation that runs far past a small
model window: every turn reads a long tool result, compaction makes room before the model
calls, and the demo prints each compaction's levels and tokens before and after.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import msgspec

from parlour.runtime import (
    ConversationContext,
    Depth,
    LLMClient,
    LLMResponse,
    OutputSize,
    PreparedConversation,
    ScriptedClient,
    Transcript,
    TurnRole,
    client_for,
)
from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.compaction import ContextWindowManager
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore, MemorySessionCache

from .._service import ConversationService
from .._thinker import BasicThinker
from ..agent._agent import Agent
from ..agent._chat import Chat
from ..agent._events import Compacted
from ..agent._ledger import CompactionRecord
from ._workload import TurnStats, ctrl_c_stops, drive, get_current_time, stop_point

MIN_WINDOW = 6_000  # --long: the compact answer's reserve and the tool's reports fit
OBJECTIVE = "You are parlour's demo assistant. Answer briefly; use tools when asked."


def _opening(index: int, turn: int) -> str:
    if turn == 0:
        return f"Conversation {index}: please call get_current_time and tell me the date."
    return f"Thanks. Conversation {index}, turn {turn + 1}: summarise what you found."


def demo_agent(client: LLMClient | None = None) -> Agent:
    """The demo's agent: on ``client``, else the offline scripted model (by name: a real
    model never falls back to it)."""
    return Agent(
        client if client is not None else client_for("scripted"),
        tools=[get_current_time],
        objective=OBJECTIVE,
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )


def run_demo(
    data_dir: Path, conversations: int = 20, workers: int = 8, client: LLMClient | None = None
) -> int:
    """The demo on ``client`` (None: the offline scripted model); returns the exit status
    (0, 1 when a restore broke, 130 on Ctrl-C)."""
    agent = demo_agent(client)
    by = agent.client.model_id
    print(
        f"parlour demo: {conversations} conversations on {data_dir.resolve()}, answered by "
        + ("the offline scripted model" if by == "scripted" else by)
    )
    try:
        with ctrl_c_stops() as stop:
            first, saved = _phase_one(agent, data_dir, conversations, workers, stop)
            broken = _phase_two(agent, data_dir, saved, first, stop)
    except KeyboardInterrupt:
        print("parlour demo: interrupted; every finished turn is saved", file=sys.stderr)
        return 130
    if broken:
        print(f"FAILED: {len(broken)} conversations did not restore intact: {broken}")
        return 1
    return 0


def _phase_one(
    agent: Agent, data_dir: Path, conversations: int, workers: int, stop: threading.Event
) -> tuple[TurnStats, dict[str, tuple[str, bytes]]]:
    with LmdbStore(data_dir) as store, ConversationService(store, MemorySessionCache()) as service:
        chats = [agent.chat(service, user_id=f"user-{i % 4}") for i in range(conversations)]
        first = drive(chats, _opening, turns=2, workers=workers, stop=stop)
        saved = {c.conversation_id: (c.user_id, _stored_bytes(service, c)) for c in chats}
    print(
        f"  phase 1: {first.turns} turns in {first.seconds:.2f}s "
        f"({first.turns_per_second:,.0f} turns/s), runtime stopped",
        flush=True,
    )
    return first, saved


def _phase_two(
    agent: Agent,
    data_dir: Path,
    saved: dict[str, tuple[str, bytes]],
    first: TurnStats,
    stop: threading.Event,
) -> list[str]:
    broken = []
    with LmdbStore(data_dir) as store, ConversationService(store, MemorySessionCache()) as service:
        start = time.perf_counter()
        for cid, (user, stored) in saved.items():
            stop_point(stop)
            resumed = agent.chat(service, user_id=user, conversation_id=cid)
            if _stored_bytes(service, resumed) != stored:
                broken.append(cid)
            resumed.send("One more thing: what did the tool say?")
        seconds = time.perf_counter() - start
        print(
            f"  phase 2: restored {len(saved) - len(broken)}/{len(saved)} intact and "
            f"resumed each by one turn in {seconds:.2f}s"
        )
        cid, (user, _) = next(iter(saved.items()))
        print(f"\n--- transcript of {cid} ---\n{_transcript(service, cid, user).rstrip()}\n")
    print(
        f"throughput: {first.turns + len(saved)} turns, {first.turns_per_second:,.0f} turns/s "
        f"concurrent, p50 {first.percentile(0.5) * 1000:.1f} ms, "
        f"p99 {first.percentile(0.99) * 1000:.1f} ms"
    )
    return broken


def _reader(chat_or_user: Chat | str, cid: str) -> BasicThinker:
    user = chat_or_user if isinstance(chat_or_user, str) else chat_or_user.user_id
    # the agent's declarations: a thinker stamps its own on a conversation it loads
    reader = BasicThinker(user, depth=Depth.IMMEDIATE, output_declaration=OutputSize.STANDARD)
    reader.set_conversation_id(cid)
    return reader


def _stored_bytes(service: ConversationService, chat: Chat) -> bytes:
    reader = _reader(chat, chat.conversation_id)
    context = service.obtain_conversation(None, reader).get(timeout=30)
    try:
        return _durable_bytes(context)
    finally:
        service.release(reader)


def _transcript(service: ConversationService, cid: str, user: str) -> str:
    reader = _reader(user, cid)
    context = service.obtain_conversation(None, reader).get(timeout=30)
    try:
        return Transcript.render(context)
    finally:
        service.release(reader)


def _durable_bytes(context: ConversationContext) -> bytes:
    """The snapshot minus the workflow id, which every acquiring turn re-stamps."""
    return encode_snapshot(msgspec.structs.replace(context.to_snapshot(), workflow_id=None))


# -- the long conversation ----------------------------------------------------------------------

SITE_REPORT = "Station readings stayed above the survey threshold through the week. " * 12


def site_report(site: str) -> str:
    """The week's survey report of one site (long: the commonest overflow is tool output).

    Args:
        site: The site's name.
    """
    return f"Report of {site}: {SITE_REPORT}"


def _surveyor(prepared: PreparedConversation) -> LLMResponse:
    """The scripted model of the long demo: reads each question's site report, then answers."""
    last = prepared.turns[-1]
    if last.role is not TurnRole.USER or any(isinstance(b, ToolResultBlock) for b in last.blocks):
        return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Above the threshold.")])
    turn = sum(1 for t in prepared.turns if t.role is TurnRole.ASSISTANT)
    call = ToolUseBlock(id=f"toolu_{turn:04d}", name="site_report", input_json='{"site": "s"}')
    return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Reading it."), call])


def long_agent(window: int, turns: int) -> Agent:
    """The long demo's agent: the scripted model with a ``window``-token context, a comfort
    window of half that, and the offline compactor; scripted for ``turns`` turns."""
    base = ScriptedClient().spec
    spec = msgspec.structs.replace(base, max_context_tokens=window)
    return Agent(
        ScriptedClient([_surveyor] * (2 * turns), spec=spec),
        tools=[site_report],
        objective="You answer questions about the site survey.",
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
        comfort_tokens=window // 2,
    )


def run_long_demo(data_dir: Path, turns: int = 100, window: int = 8_000) -> int:
    """One conversation far past a ``window``-token model; returns the exit status (1 when
    it never compacted or does not restore intact)."""
    agent = long_agent(window, turns)
    print(f"parlour demo --long: {turns} turns on a {window:,}-token model window, offline")
    with (
        ctrl_c_stops() as stop,
        LmdbStore(data_dir) as store,
        ConversationService(store, MemorySessionCache()) as service,
    ):
        chat = agent.chat(service, user_id="long-user")
        added = _long_turns(chat, turns, stop)
        stored = _stored_bytes(service, chat)
        context = _restore(service, chat)
    return _long_summary(agent, chat, context, stored, added)


def _long_turns(chat: Chat, turns: int, stop: threading.Event) -> int:
    added = 0
    for turn in range(turns):
        stop_point(stop)
        for event in chat.stream(f"Question {turn + 1}: which stations were above it?"):
            if isinstance(event, Compacted):
                print(
                    f"  turn {turn + 1}: {', '.join(event.levels)}: "
                    f"{event.tokens_before:,} -> {event.tokens_after:,} tokens"
                )
        added += len(site_report("s")) // 4  # about four characters a token
    return added


def _restore(service: ConversationService, chat: Chat) -> ConversationContext:
    reader = _reader(chat, chat.conversation_id)
    context = service.obtain_conversation(None, reader).get(timeout=30)
    service.release(reader)
    return context


def _long_summary(
    agent: Agent, chat: Chat, context: ConversationContext, stored: bytes, added: int
) -> int:
    rungs = [e for e in chat.usage() if isinstance(e, CompactionRecord)]
    levels = sorted({r.level for r in rungs})
    manager = ContextWindowManager(agent.client.spec, comfort_override=agent.window_comfort())
    print(
        f"  {len(rungs)} compaction levels climbed ({', '.join(levels) or 'none'}); tool output "
        f"read: about {added:,} tokens; the conversation now: {manager.measure(context):,} "
        f"tokens in {len(context.messages)} messages"
    )
    if not rungs or _durable_bytes(context) != stored:
        print("FAILED: the conversation never compacted or did not restore intact")
        return 1
    return 0
