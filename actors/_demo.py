"""``parlour demo``: many tool-using conversations, a restart, a restore, one more turn each.

Runs offline on the ScriptedClient and an embedded LMDB directory. Exits non-zero when any
conversation does not come back from the store exactly as it was saved.
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from parlour.actors._service import ConversationService
from parlour.actors._thinker import BasicThinker
from parlour.actors._workload import CURRENT_TIME, drive, run_turn
from parlour.runtime import ConversationContext, Transcript, client_for
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore, MemorySessionCache


class DemoThinker(BasicThinker):
    """The demo's assistant: one tool, a standing objective."""


OBJECTIVE = "You are parlour's demo assistant. Answer briefly; use tools when asked."


def _opening(index: int, turn: int) -> str:
    if turn == 0:
        return f"Conversation {index}: please call get_current_time and tell me the date."
    return f"Thanks. Conversation {index}, turn {turn + 1}: summarise what you found."


def run_demo(data_dir: Path, conversations: int = 20, workers: int = 8) -> int:
    client = client_for("scripted")  # by name: real models never fall back to it
    thinkers = [DemoThinker(f"user-{i % 4}", tools=[CURRENT_TIME]) for i in range(conversations)]
    for t in thinkers:
        t.mint_conversation_id()
    print(
        f"parlour demo: {conversations} conversations on {data_dir.resolve()}, "
        "answered by the offline scripted model"
    )

    store = LmdbStore(data_dir)
    service = ConversationService(store, MemorySessionCache())
    for t in thinkers:  # the objective and the palette go in before the first turn
        context = service.obtain_conversation(None, t).get(timeout=30)
        context.put_main_objective("task", OBJECTIVE)
        context.add_tools(t.tools)
        service.release(t)
    first = drive(service, thinkers, client, _opening, turns=2, workers=workers)
    saved = {t.conversation_id: _snapshot_bytes(service, t) for t in thinkers}
    service.stop()
    store.close()
    print(
        f"  phase 1: {first.turns} turns in {first.seconds:.2f}s "
        f"({first.turns_per_second:,.0f} turns/s), runtime stopped"
    )

    store = LmdbStore(data_dir)
    service = ConversationService(store, MemorySessionCache())
    broken = []
    start = time.perf_counter()
    for t in thinkers:
        resumed = DemoThinker(t.user_id, tools=[CURRENT_TIME])
        resumed.set_conversation_id(t.conversation_id)
        context = service.obtain_conversation(None, resumed).get(timeout=30)
        if _durable_bytes(context) != saved[t.conversation_id]:
            broken.append(t.conversation_id)
        service.release(resumed)
        run_turn(service, resumed, client, "One more thing: what did the tool say?")
    seconds = time.perf_counter() - start
    sample = thinkers[0]
    resumed = DemoThinker(sample.user_id)
    resumed.set_conversation_id(sample.conversation_id)
    context = service.obtain_conversation(None, resumed).get(timeout=30)
    print(
        f"  phase 2: restored {conversations - len(broken)}/{conversations} intact and "
        f"continued each by one turn in {seconds:.2f}s"
    )
    print(
        f"\n--- transcript of {sample.conversation_id} ---\n{Transcript.render(context).rstrip()}\n"
    )
    service.release(resumed)
    service.stop()
    store.close()
    total = first.turns + conversations
    print(
        f"throughput: {total} turns, {first.turns_per_second:,.0f} turns/s concurrent, "
        f"p50 {first.percentile(0.5) * 1000:.1f} ms, p99 {first.percentile(0.99) * 1000:.1f} ms"
    )
    if broken:
        print(f"FAILED: {len(broken)} conversations did not restore intact: {broken}")
        return 1
    return 0


def _snapshot_bytes(service: ConversationService, thinker: BasicThinker) -> bytes:
    context = service.obtain_conversation(None, thinker).get(timeout=30)
    try:
        return _durable_bytes(context)
    finally:
        service.release(thinker)


def _durable_bytes(context: ConversationContext) -> bytes:
    """The snapshot minus the workflow id, which every acquiring turn re-stamps (B207)."""
    return encode_snapshot(msgspec.structs.replace(context.to_snapshot(), workflow_id=None))
