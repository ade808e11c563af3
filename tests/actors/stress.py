"""An ownership stress driver: many threads, few conversations, every eviction path at once.

Used by the CI-sized test (tests/actors/test_ownership_stress.py) and the long form
(benchmarks/ownership.py). Each turn obtains a conversation, checks it is the only owner
(the overlap detector) and that it sees the last acknowledged turn (the stale-grant
detector), appends one message, saves, and releases with a zero or short retention. Mixed
in: same-job re-obtains, explicit evictions, force releases, a sweeper, a live cap
below the number of conversations, (``kills``) activations made to die while owned, and
(``kept``) chats keeping their lease between their own turns. At the end the store is
reopened and every acknowledged turn must be there exactly once, in order.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from pathlib import Path

import msgspec

from parlour.actors._kept import Kept
from parlour.actors._service import ConversationService
from parlour.actors._thinker import BasicThinker
from parlour.runtime import IncomingMessage
from parlour.stores import LmdbStore, MemorySessionCache


class StressReport(msgspec.Struct, kw_only=True):
    """What a run saw; ``violations`` lists every broken guarantee (empty: all held)."""

    turns: int = 0
    acknowledged: int = 0
    eviction_attempts: int = 0
    evictions: int = 0
    force_releases: int = 0
    reobtains: int = 0
    kills: int = 0
    reclaims: int = 0
    seconds: float = 0.0
    violations: list[str] = msgspec.field(default_factory=list)


class _Ledger:
    """Per-conversation detectors, under one lock (it guards the detectors, not the
    conversations)."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users  # conversation id -> its user
        ids = list(users)
        self.lock = threading.Lock()
        self.inside = dict.fromkeys(ids, 0)
        self.acked: dict[str, list[str]] = {cid: [] for cid in ids}
        self.report = StressReport()

    def enter(self, cid: str, last_seen: str | None) -> None:
        with self.lock:
            self.inside[cid] += 1
            self.report.turns += 1
            if self.inside[cid] > 1:
                self.report.violations.append(f"two owners of {cid}")
            expected = self.acked[cid][-1] if self.acked[cid] else None
            if last_seen != expected:
                self.report.violations.append(f"{cid} granted stale: {last_seen} != {expected}")

    def leave(self, cid: str) -> None:
        with self.lock:
            self.inside[cid] -= 1

    def ack(self, cid: str, text: str) -> None:
        with self.lock:
            self.acked[cid].append(text)
            self.report.acknowledged += 1

    def violation(self, text: str) -> None:
        with self.lock:
            self.report.violations.append(text)


def run_stress(
    data_dir: Path,
    *,
    threads: int = 64,
    conversations: int = 16,
    turns_per_thread: int = 8,
    seed: int = 0,
    sync: bool = False,
    max_active: int | None = None,
    deferred: bool = False,
    kills: bool = False,
    kept: bool = False,
) -> StressReport:
    """Run the mix; never raises for a broken guarantee (it is in ``violations``).
    ``max_active`` below the live cap makes idle conversations park and re-attach too.
    ``deferred`` saves each turn's message without a wait (its release waits for it), and
    now and then adds an answer whose save waits for both. ``kills`` makes a turn now and
    then crash the activation it holds (a handler that raises): the next obtain must take
    the lease over, never grant a second one. ``kept`` makes half the turns a chat's: a
    thinker per worker and conversation that keeps its lease between its turns (short
    retentions, so sweeps take it back too), and goes on with the same conversation more
    often than not; the other half, evictions, sweeps and force releases must take a kept
    lease back and never let two owners in."""
    store = LmdbStore(data_dir, sync=sync)
    service = ConversationService(
        store,
        MemorySessionCache(capacity=max(conversations // 4, 1)),
        conversation_timeout_s=60,
        cleanup_interval_s=0,
        max_live=max(conversations // 2, 1),
        max_active=max_active or max(conversations // 2, 1),
        shutdown_grace_s=1,
    )
    ledger = _Ledger(dict(_create(service, n) for n in range(conversations)))
    ids = list(ledger.users)
    stop_sweeping = threading.Event()
    sweeper = threading.Thread(target=_sweep, args=(service, stop_sweeping), daemon=True)
    start = time.perf_counter()
    sweeper.start()
    workers = [
        threading.Thread(
            target=_worker,
            args=(
                service,
                ids,
                ledger,
                random.Random(seed * 1_000 + n),
                turns_per_thread,
                n,
                deferred,
                kills,
                kept,
            ),
        )
        for n in range(threads)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop_sweeping.set()
    sweeper.join()
    ledger.report.seconds = time.perf_counter() - start
    service.stop()
    store.close()
    _audit(data_dir, ledger)
    return ledger.report


def _create(service: ConversationService, n: int) -> tuple[str, str]:
    thinker = BasicThinker(f"user-{n % 4}")
    cid = thinker.mint_conversation_id()
    context = service.obtain_conversation(None, thinker).get(timeout=30)
    service.save_conversation(context, thinker)
    service.release(thinker, retain=0)
    return cid, thinker.user_id


def _sweep(service: ConversationService, stop: threading.Event) -> None:
    while not stop.wait(0.002):
        service.sweep_expired()


def _worker(
    service: ConversationService,
    ids: list[str],
    ledger: _Ledger,
    rng: random.Random,
    turns: int,
    n: int,
    deferred: bool,
    kills: bool = False,
    kept: bool = False,
) -> None:
    chats: dict[str, KeepingThinker] = {}
    cid = rng.choice(ids)
    for turn in range(turns):
        if not kept or rng.random() < 0.4:
            cid = rng.choice(ids)
        chat = _chat(chats, ledger, rng, cid) if kept and rng.random() < 0.5 else None
        try:
            _turn(service, ledger, rng, cid, f"w{n}-t{turn}", deferred, kills, chat)
        except Exception as exc:
            ledger.violation(f"turn on {cid} raised {exc!r}")
        side = rng.random()
        if side < 0.15:
            ledger.report.eviction_attempts += 1
            ledger.report.evictions += service.evict_conversation(rng.choice(ids))
        elif side < 0.25:
            _force_release(service, ledger, rng.choice(ids))


def _turn(
    service: ConversationService,
    ledger: _Ledger,
    rng: random.Random,
    cid: str,
    text: str,
    deferred: bool,
    kills: bool = False,
    chat: KeepingThinker | None = None,
) -> None:
    thinker = chat or BasicThinker(ledger.users[cid])
    thinker.set_conversation_id(cid)
    kept_before = chat.kept_lease if chat is not None else None
    context = service.obtain_conversation(None, thinker).get(timeout=60)
    if kept_before is not None and chat is not None and chat.kept_lease is kept_before:
        ledger.report.reclaims += 1
    messages = context.messages
    ledger.enter(cid, messages[-1].raw_content if messages else None)
    try:
        if kills and rng.random() < 0.15:  # the activation this turn holds dies under it
            ref = service._registry.mirror.refs.get(cid)
            if ref is not None:
                ref.tell("a message no handler knows")
                ledger.report.kills += 1
        if rng.random() < 0.2:  # the same job obtains again: the same context at once
            ledger.report.reobtains += 1
            if service.obtain_conversation(None, thinker).get(timeout=1) is not context:
                ledger.violation(f"a re-obtain of {cid} got another context")
        context.add_user_message(text)
        service.save_conversation(context, thinker, wait=not deferred)  # release waits for it
        ledger.ack(cid, text)
        if deferred and rng.random() < 0.5:  # an answer, whose save waits for both
            context.add_message(IncomingMessage(f"{text} answered"))
            service.save_conversation(context, thinker)
            ledger.ack(cid, f"{text} answered")
    finally:
        ledger.leave(cid)
        retain = None if chat is not None else rng.choice((0.0, 0.0, 0.001, 0.01))
        service.release(thinker, retain=retain)


class KeepingThinker(BasicThinker):
    """A chat's thinker: it keeps its lease between its own turns."""

    def __init__(self, user_id: str, retain_s: float) -> None:
        super().__init__(user_id, retain_duration=dt.timedelta(seconds=retain_s))
        self.kept_lease: Kept | None = None


def _chat(
    chats: dict[str, KeepingThinker], ledger: _Ledger, rng: random.Random, cid: str
) -> KeepingThinker:
    """The worker's chat on ``cid``, the same one each time (now and then a new one)."""
    chat = chats.get(cid)
    if chat is None or rng.random() < 0.05:
        chat = chats[cid] = KeepingThinker(ledger.users[cid], rng.choice((0.001, 0.01, 5.0)))
    return chat


def _force_release(service: ConversationService, ledger: _Ledger, cid: str) -> None:
    try:
        service.force_release(cid, ledger.users[cid])
        ledger.report.force_releases += 1
    except ValueError:
        pass  # not live right now


def _audit(data_dir: Path, ledger: _Ledger) -> None:
    """Reopen the store: every acknowledged turn exactly once, in order."""
    store = LmdbStore(data_dir)
    try:
        for cid, acked in ledger.acked.items():
            snapshot = store.load(cid, ledger.users[cid])
            stored = [m.raw_content for m in snapshot.messages] if snapshot else []
            if stored != acked:
                ledger.violation(f"{cid}: stored {len(stored)} turns, acknowledged {len(acked)}")
    finally:
        store.close()
