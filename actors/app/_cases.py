"""The benchmark cases behind ``benchmarks/turns.py`` and ``parlour bench``.

Each case runs C conversations x T turns on W threads four ways in one process, so every
figure can be read as a ratio to the floor measured in the same run:

- ``floor``: no actors, no runtime: a dict of conversations (lists of message dicts),
  msgspec to encode, one LMDB commit per turn. In a cold case the first turn of each
  conversation reads and decodes its stored body first.
- ``service``: the bare service path: obtain, add the user message, save it deferred (no
  wait), render and answer
  with the ``ScriptedClient``, add the answer, save, release.
- ``service, gated``: the same turn held in ``turn_gate`` (one turn's own work at a time,
  let go while it waits for its commit), as a thread-per-request server would hold it.
- ``agent``: the same turn through ``Chat.send`` (the scripted model answers inline, in the
  turn's thread, as on the service path; a provider's client would be asked on a model
  worker, a hop this benchmark does not measure). ``send`` holds the turn gate itself.
- ``service, 1 CPU`` and ``agent, 1 CPU``: the same two with every thread of the process
  on one CPU (``one_core``: the interpreter lock then changes hands without waking another
  CPU). The floor is measured on both CPUs only: its turns are mostly the kernel's fsync
  work, which one CPU slows (measured pinned: 1,900-2,300 turns/s against 3,300).
- ``restore``: conversations/s that a fresh service restores from LMDB (load, decode and the
  actor it lands in), for the cold case: on the case's threads, on them with one CPU, and
  on one thread.

CPU per turn is ``time.process_time()`` over the run divided by its turns (every thread's
CPU; with ``sync=False`` it is the CPU cost alone).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import lmdb
import msgspec

from parlour.runtime import Depth, IncomingMessage, OutputSize, ScriptedClient
from parlour.stores import LmdbStore, MemorySessionCache

from .._gate import turn_gate
from .._service import ConversationService
from .._thinker import BasicThinker
from ..agent._agent import Agent
from ..tuning import one_core
from ._workload import TurnStats

Progress = Callable[[int], None]  # called with how many turns just finished
Hold = Callable[[], contextlib.AbstractContextManager[None]]  # the turn gate's held, or not
T = TypeVar("T")


class Shape(msgspec.Struct, frozen=True):
    """A case: conversations x turns on workers threads; cold ones restore every first turn."""

    conversations: int
    turns: int
    workers: int = 8
    cold: bool = False


CASES = {
    "default": Shape(200, 10),
    "hot": Shape(8, 200),
    "cold": Shape(2000, 3, cold=True),
}


class Measured(msgspec.Struct, frozen=True):
    """One path of one case: its turn statistics and CPU seconds per turn."""

    stats: TurnStats
    cpu_per_turn: float


def text(index: int, turn: int) -> str:
    return f"Conversation {index}, turn {turn}: what should I read next about actors?"


def _timed(
    run: Callable[[int], list[float]], count: int, workers: int, progress: Progress | None
) -> Measured:
    """Run ``run(index)`` for every index on ``workers`` threads; each returns latencies."""
    cpu, start = time.process_time(), time.perf_counter()

    def one(index: int) -> list[float]:
        latencies = run(index)
        if progress is not None:
            progress(len(latencies))
        return latencies

    per = _on_threads(one, count, workers)
    seconds = time.perf_counter() - start
    latencies = [x for xs in per for x in xs]
    stats = TurnStats(turns=len(latencies), seconds=seconds, latencies=latencies)
    return Measured(stats, (time.process_time() - cpu) / max(len(latencies), 1))


def _on_threads(run: Callable[[int], T], count: int, workers: int) -> list[T]:
    """``run(index)`` for every index below ``count``, on ``workers`` threads that each take
    the next index until none is left; the results in index order. Nothing is handed back
    per index (an executor's future per index would wake the waiting thread each time, a
    cost that is the harness's, not the path's). The first error raised is raised here."""
    indexes = iter(range(count))  # next() on it is atomic: each index is taken once
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for index in indexes:
                results[index] = run(index)
        except BaseException as exc:  # raised in the caller's thread below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


# -- the floor -------------------------------------------------------------------------------


def run_floor(data_dir: Path, shape: Shape, sync: bool, progress: Progress | None) -> Measured:
    env = lmdb.open(str(data_dir), map_size=1 << 31, sync=sync, metasync=sync)
    encoder, decoder = msgspec.json.Encoder(), msgspec.json.Decoder(list[dict[str, str]])
    store: dict[str, list[dict[str, str]]] = {}
    if shape.cold:  # a stored first turn, read back on the first turn of the run
        with env.begin(write=True) as txn:
            for i in range(shape.conversations):
                txn.put(f"c{i}".encode(), encoder.encode(_floor_turn(i, -1)))

    def one_conversation(index: int) -> list[float]:
        key = f"c{index}"
        latencies = []
        for turn in range(shape.turns):
            start = time.perf_counter()
            messages = store.get(key)
            if messages is None:
                messages = store[key] = _floor_load(env, key, decoder) if shape.cold else []
            messages.extend(_floor_turn(index, turn))
            body = encoder.encode(messages)
            with env.begin(write=True) as txn:
                txn.put(key.encode(), body)
            latencies.append(time.perf_counter() - start)
        return latencies

    try:
        return _timed(one_conversation, shape.conversations, shape.workers, progress)
    finally:
        env.close()


def _floor_turn(index: int, turn: int) -> list[dict[str, str]]:
    said = text(index, turn)
    return [{"role": "user", "text": said}, {"role": "assistant", "text": f"Answer: {said!r}."}]


def _floor_load(
    env: lmdb.Environment, key: str, decoder: msgspec.json.Decoder[list[dict[str, str]]]
) -> list[dict[str, str]]:
    with env.begin() as txn:
        return decoder.decode(txn.get(key.encode()) or b"[]")


# -- parlour ---------------------------------------------------------------------------------


def _seed(store: LmdbStore, conversations: int) -> list[str]:
    """One stored turn for each conversation (the cold case restores them)."""
    with ConversationService(store, cleanup_interval_s=0) as service:
        ids = []
        for i in range(conversations):
            thinker = BasicThinker(_user(i), retain_duration=_NO_RETENTION)
            ids.append(thinker.mint_conversation_id())
            context = service.obtain_conversation(None, thinker).get()
            context.add_user_message(text(i, -1))
            context.add_message(IncomingMessage(f"Answer: {text(i, -1)!r}."))
            service.save_conversation(context, thinker)
            service.release(thinker)
    return ids


def _user(index: int) -> str:
    return f"user-{index % 16}"


_NO_RETENTION = dt.timedelta(0)


def run_service(
    data_dir: Path,
    shape: Shape,
    sync: bool,
    progress: Progress | None,
    restores: tuple[int, ...] = (),
    gated: bool = False,
) -> tuple[Measured, list[float]]:
    """The bare service path (each turn in ``turn_gate`` when ``gated``); returns it and,
    for a cold case, the restore rate (conversations/s) on each of ``restores`` thread
    counts (none for a warm one), each restore in the gate as well when ``gated``."""
    with LmdbStore(data_dir, sync=sync) as store:
        ids = _seed(store, shape.conversations) if shape.cold else None
        hold = turn_gate.held if gated else contextlib.nullcontext
        restore = [] if ids is None else [measure_restore(store, ids, n, hold) for n in restores]
        client = ScriptedClient()
        with ConversationService(store, MemorySessionCache(), cleanup_interval_s=0) as service:
            thinkers = [_thinker(i, ids) for i in range(shape.conversations)]

            def one(index: int) -> list[float]:
                return [
                    _service_turn(service, client, thinkers[index], index, t, hold)
                    for t in range(shape.turns)
                ]

            return _timed(one, shape.conversations, shape.workers, progress), restore


def _thinker(index: int, ids: list[str] | None) -> BasicThinker:
    thinker = BasicThinker(
        _user(index), output_declaration=OutputSize.STANDARD, depth=Depth.IMMEDIATE
    )
    if ids is None:
        thinker.mint_conversation_id()
    else:
        thinker.set_conversation_id(ids[index])
    return thinker


def _service_turn(
    service: ConversationService,
    client: ScriptedClient,
    thinker: BasicThinker,
    i: int,
    t: int,
    hold: Hold = contextlib.nullcontext,
) -> float:
    start = time.perf_counter()  # the wait for the gate is part of the turn
    with hold():
        context = service.obtain_conversation(None, thinker).get()
        try:
            context.add_user_message(text(i, t))
            service.save_conversation(context, thinker, wait=False)  # the answer's save waits
            response = client.respond(context)
            context.add_message(IncomingMessage(blocks=response.blocks))
            service.save_conversation(context, thinker)
        finally:
            service.release(thinker)
    return time.perf_counter() - start


def measure_restore(
    store: LmdbStore,
    ids: list[str],
    workers: int = 8,
    hold: Hold = contextlib.nullcontext,
) -> float:
    """Conversations/s a fresh service restores from ``store``: load, decode, actor (each
    obtain and its release inside ``hold()``: the turn gate, say)."""
    with ConversationService(store, cleanup_interval_s=0, max_live=len(ids) + 1) as service:
        start = time.perf_counter()
        _on_threads(lambda i: _restore_one(service, ids, i, hold), len(ids), workers)
        return len(ids) / (time.perf_counter() - start)


def _restore_one(
    service: ConversationService,
    ids: list[str],
    i: int,
    hold: Hold,
) -> None:
    thinker = BasicThinker(_user(i))
    thinker.set_conversation_id(ids[i])
    with hold():
        service.obtain_conversation(None, thinker).get()
        service.release(thinker)


def run_agent(data_dir: Path, shape: Shape, sync: bool, progress: Progress | None) -> Measured:
    with LmdbStore(data_dir, sync=sync) as store:
        ids = _seed(store, shape.conversations) if shape.cold else None
        with ConversationService(store, MemorySessionCache(), cleanup_interval_s=0) as service:
            agent = Agent(ScriptedClient(), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
            chats = [
                agent.chat(
                    service, user_id=_user(i), conversation_id=None if ids is None else ids[i]
                )
                for i in range(shape.conversations)
            ]

            def one(index: int) -> list[float]:
                latencies = []
                for turn in range(shape.turns):
                    start = time.perf_counter()
                    chats[index].send(text(index, turn))
                    latencies.append(time.perf_counter() - start)
                return latencies

            return _timed(one, shape.conversations, shape.workers, progress)


class CaseResult(msgspec.Struct, frozen=True):
    """Every path of one case, measured in one run."""

    name: str
    shape: Shape
    floor: Measured
    service: Measured
    service_gated: Measured
    agent: Measured
    service_one_cpu: Measured
    agent_one_cpu: Measured
    restore_per_s: float  # on the case's threads
    restore_gated_per_s: float  # on them, each restore in the turn gate
    restore_one_cpu_per_s: float  # on them, every thread on one CPU
    restore_one_thread_per_s: float


def run_case(name: str, shape: Shape, sync: bool, progress: Progress | None = None) -> CaseResult:
    """Floor, service (free and gated) and agent paths of ``shape``, the service and agent
    again on one CPU, each on a fresh LMDB directory and a heap collected first: garbage
    a path left for the collector would be scanned in the next path's time (none is left
    today: a stopped service, its store and its conversations go by reference counting;
    when they were cycles, the gated cold path's restores measured 3,500 against 6,000/s)."""
    both = (shape.workers, 1)  # the restore on the case's threads, and on one
    with tempfile.TemporaryDirectory() as tmp:
        floor = run_floor(Path(tmp) / "floor", shape, sync, progress)
        gc.collect()  # each path on a heap clear of the path before's garbage (see above)
        service, rates = run_service(Path(tmp) / "service", shape, sync, progress, both)
        gc.collect()
        gated, rates_g = run_service(
            Path(tmp) / "gated", shape, sync, progress, both[:1], gated=True
        )
        gc.collect()
        agent = run_agent(Path(tmp) / "agent", shape, sync, progress)
        with one_core():
            gc.collect()
            service_1, rates_1 = run_service(Path(tmp) / "s1", shape, sync, progress, both[:1])
            gc.collect()
            agent_1 = run_agent(Path(tmp) / "a1", shape, sync, progress)
    restore, restore_one_thread = rates or [0.0, 0.0]
    (restore_gated,) = rates_g or [0.0]
    (restore_one_cpu,) = rates_1 or [0.0]
    return CaseResult(
        name,
        shape,
        floor,
        service,
        gated,
        agent,
        service_1,
        agent_1,
        restore,
        restore_gated,
        restore_one_cpu,
        restore_one_thread,
    )
