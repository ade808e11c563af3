"""``parlour demo``: the README's agent at scale. Many chats with a tool-using agent, a
restart of the runtime, every conversation restored and resumed, one more turn each.

Runs offline on the ScriptedClient and an embedded LMDB directory. Exits non-zero when any
conversation does not come back from the store exactly as it was saved; Ctrl-C stops it
cleanly (running turns finish and are saved, nothing is left owned) with status 130.
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from parlour.actors._agent import Agent, Chat
from parlour.actors._service import ConversationService
from parlour.actors._thinker import BasicThinker
from parlour.actors._workload import TurnStats, drive, get_current_time
from parlour.runtime import ConversationContext, Depth, OutputSize, Transcript, client_for
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore, MemorySessionCache

OBJECTIVE = "You are parlour's demo assistant. Answer briefly; use tools when asked."


def _opening(index: int, turn: int) -> str:
    if turn == 0:
        return f"Conversation {index}: please call get_current_time and tell me the date."
    return f"Thanks. Conversation {index}, turn {turn + 1}: summarise what you found."


def demo_agent() -> Agent:
    return Agent(
        client_for("scripted"),  # by name: a real model never falls back to it
        tools=[get_current_time],
        objective=OBJECTIVE,
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )


def run_demo(data_dir: Path, conversations: int = 20, workers: int = 8) -> int:
    """The demo; returns the exit status (0, 1 when a restore broke, 130 on Ctrl-C)."""
    print(
        f"parlour demo: {conversations} conversations on {data_dir.resolve()}, "
        "answered by the offline scripted model"
    )
    agent = demo_agent()
    try:
        first, saved = _phase_one(agent, data_dir, conversations, workers)
        broken = _phase_two(agent, data_dir, saved, first)
    except KeyboardInterrupt:
        print("\ninterrupted: running turns finished and were saved; stopped")
        return 130
    if broken:
        print(f"FAILED: {len(broken)} conversations did not restore intact: {broken}")
        return 1
    return 0


def _phase_one(
    agent: Agent, data_dir: Path, conversations: int, workers: int
) -> tuple[TurnStats, dict[str, tuple[str, bytes]]]:
    with LmdbStore(data_dir) as store:
        service = ConversationService(store, MemorySessionCache())
        try:
            chats = [agent.chat(service, user_id=f"user-{i % 4}") for i in range(conversations)]
            first = drive(chats, _opening, turns=2, workers=workers)
            saved = {c.conversation_id: (c.user_id, _stored_bytes(service, c)) for c in chats}
        finally:
            service.stop()
    print(
        f"  phase 1: {first.turns} turns in {first.seconds:.2f}s "
        f"({first.turns_per_second:,.0f} turns/s), runtime stopped"
    )
    return first, saved


def _phase_two(
    agent: Agent, data_dir: Path, saved: dict[str, tuple[str, bytes]], first: TurnStats
) -> list[str]:
    broken = []
    with LmdbStore(data_dir) as store:
        service = ConversationService(store, MemorySessionCache())
        try:
            start = time.perf_counter()
            for cid, (user, stored) in saved.items():
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
        finally:
            service.stop()
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
