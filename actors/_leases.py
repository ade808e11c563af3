"""``Leases``: what each job holds, and handing a lease back.

A grant is recorded with the activation that granted it, so the release goes to that
activation even after it was unregistered (a doomed one stops then). A release captures the
thinker's transcript first (the conversation exactly as it was; the messages' snapshots are
memoized by the last save, so this is a pointer copy each) and hands it to the thinker's
``keep_transcript`` after the handoff.
"""

from __future__ import annotations

import datetime as dt

import pykka

from parlour.runtime import Clock, ConversationContext
from parlour.runtime.snapshots import message_snapshots

from ._conversation import ConversationActor
from ._kept import Kept
from ._messages import Evict, Release, Released
from ._registry import Registry
from ._reply import tell
from ._thinker import Thinker, keep_transcript

__all__ = ["Leases", "seconds"]

ActorRef = pykka.ActorRef[ConversationActor]


def seconds(value: dt.timedelta | float) -> float:
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


class Leases:
    """``{(conversation, job): (context, activation)}`` for every lease granted and not yet
    given back, and the release that gives one back.

    Thread-safety: a job's entries are touched by its own thread (a grant on a waiter's
    thread is the job's too: it is recorded when its obtain completes); distinct jobs from
    any threads (each step is one dict operation).
    """

    __slots__ = ("_held", "_holders", "clock", "registry")

    def __init__(self, registry: Registry, clock: Clock) -> None:
        self.registry = registry
        self.clock = clock
        self._held: dict[tuple[str, str], tuple[ConversationContext, ActorRef]] = {}
        self._holders: dict[str, Thinker] = {}  # each conversation's last grant's thinker

    def hold(
        self,
        cid: str,
        job_id: str,
        context: ConversationContext,
        ref: ActorRef,
        thinker: Thinker | None = None,
        kept: Kept | None = None,
    ) -> None:
        """Remember what the job holds, and which activation granted it (and the job's
        ``thinker``, so a lease whose activation dies can be taken over: ``orphaned``).
        A grant its thinker keeps between turns (``kept``) goes on the thinker's
        ``kept_lease``."""
        self._held[(cid, job_id)] = (context, ref)
        if thinker is not None:
            self._holders[cid] = thinker
        if kept is not None:
            kept.cid = cid
            thinker.kept_lease = kept  # type: ignore[union-attr]  # only a keeping thinker's

    def reclaim(self, cid: str, thinker: Thinker) -> ConversationContext | None:
        """The context of the lease ``thinker`` kept since its last turn, held again; None
        when it has none for ``cid`` or it was taken back (obtain anew). One that another
        job waits for is released for real here (the caller obtains behind the waiter)."""
        kept: Kept | None = getattr(thinker, "kept_lease", None)
        if kept is None or kept.cid != cid:
            return None
        mine = kept.reclaim()
        if mine is None:
            thinker.kept_lease = None  # type: ignore[attr-defined]
            return None
        context, ref = kept.context, kept.ref
        assert context is not None  # dropped only when taken back
        self.hold(cid, thinker.job_id, context, ref, thinker)
        if mine:
            return context
        self.release(cid, thinker, None)  # ``wanted``: it goes for real
        return None

    def orphaned(self, cid: str) -> tuple[Thinker, ConversationContext] | None:
        """The recorded holder of ``cid`` and its context, when the activation that granted
        the lease is dead (it died while owned); None otherwise."""
        thinker = self._holders.get(cid)
        held = None if thinker is None else self._held.get((cid, thinker.job_id))
        if thinker is None or held is None or held[1].is_alive():
            return None
        return thinker, held[0]

    def holds(self, cid: str, job_id: str) -> bool:
        return (cid, job_id) in self._held

    def release(self, cid: str, thinker: Thinker, retain: dt.timedelta | float | None) -> None:
        """Give ``thinker``'s lease on ``cid`` back (see ``ConversationService.release``);
        a raising ``keep_transcript`` hook is logged and never stops the handoff. A thinker
        that keeps its lease (``kept_lease``) keeps it here, with its own retention, unless
        another job wants it."""
        key = (cid, thinker.job_id)
        lease: Kept | None = getattr(thinker, "kept_lease", None)
        if lease is not None and lease.cid == cid:
            thinker.kept_lease = None  # type: ignore[attr-defined]
            held = self._held.get(key)
            if retain is None and held is not None and lease.keep(self.clock.now(), *held):
                del self._held[key]  # the activation still names the job its owner
                if self._holders.get(cid) is thinker:
                    del self._holders[cid]
                thinker.kept_lease = lease  # type: ignore[attr-defined]
                return
        held = self._held.pop(key, None)
        if self._holders.get(cid) is thinker:
            del self._holders[cid]
        # the conversation as it is: what the last save kept, built only for what changed
        kept = None if held is None else message_snapshots(held[0])
        retain_s = seconds(thinker.retain_duration if retain is None else retain)
        try:
            self.hand_back(cid, thinker.job_id, retain_s, None if held is None else held[1])
        finally:
            if kept is not None:
                keep_transcript(thinker, kept)

    def hand_back(
        self,
        cid: str,
        job_id: str,
        retain_s: float,
        ref: ActorRef | None = None,
        dead: ActorRef | None = None,
    ) -> None:
        """Tell the activation (``ref``, else the live one) that ``job_id`` lets go: kept
        for ``retain_s``, or asked and evicted at once when that is zero and nobody took
        the lease over. When ``ref`` is dead, the live one hears it (once): an activation
        that died while owned has its lease taken over by its successor."""
        ref = ref or self.registry.find(cid)
        if ref is None or ref is dead:
            return
        try:
            if retain_s > 0:  # nothing to wait for: later messages queue behind it (FIFO)
                tell(ref, Release(job_id, retain_s, self.clock.now()))
                return
            released: Released = ref.ask(Release(job_id, retain_s), block=True)
        except pykka.ActorDeadError:
            if dead is None:  # its successor, if the lease was taken over (else: nobody)
                self.hand_back(cid, job_id, retain_s, None, ref)
            return
        if released.evict:
            self.registry.ask(Evict(cid), False)

    def drop_job(self, job_id: str) -> list[str]:
        """Forget every lease ``job_id`` holds; the conversations it held."""
        dropped = [key for key in self._held if key[1] == job_id]
        for key in dropped:
            self._held.pop(key, None)
            holder = self._holders.get(key[0])
            if holder is not None and holder.job_id == job_id:
                del self._holders[key[0]]
        return [cid for cid, _ in dropped]

    def drop_all(self) -> None:
        """Forget every lease (the service has stopped: nothing is handed back)."""
        self._held.clear()
        self._holders.clear()
