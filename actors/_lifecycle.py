"""``Lifecycle``: a service's stop, the order of its shutdown, and its sweep ticker.

``stop`` refuses new obtains, lets owners finish within the grace (``NotifyIdle`` futures on
the injected clock), settles what deferred saves are left, stops every conversation actor
and the supervisor, forgets what the jobs hold, takes the store's delete listener back (with
no session cache: see ``OnDeleted``) and joins the ticker.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import pykka
from loguru import logger

from parlour.runtime import Clock
from parlour.stores import PersistentStore, SessionStore

from ._deferred import DeferredSaves
from ._gate import waiting
from ._leases import Leases
from ._messages import NotifyIdle, Owner, Owners, StopAll
from ._registry import Registry

__all__ = ["Lifecycle"]


class Lifecycle:
    """Starting and stopping a service's parts, once, from any thread.

    Args:
        registry: the supervisor (stopped last) and its mirror.
        leases: what the jobs hold (forgotten at stop).
        deferred: the deferred saves (settled at stop, once the owners are done).
        store: where the delete ``listener`` is added now and taken back at stop.
        session: the session cache (with one, the listener stays: see ``OnDeleted``).
        listener: the service's delete listener.
        clock: the grace's deadline.
        shutdown_grace_s: how long ``stop`` lets owners finish.

    ``stopping`` is set when ``stop`` starts (obtains refuse from then on); ``stopped`` is
    True once the actors are stopped (queries answer empty, releases do nothing).
    Thread-safety: every method from any thread; ``stop`` runs once, whoever calls it.
    """

    def __init__(
        self,
        registry: Registry,
        leases: Leases,
        deferred: DeferredSaves,
        store: PersistentStore | None,
        session: SessionStore | None,
        listener: Callable[[str], None],
        clock: Clock,
        shutdown_grace_s: float,
    ) -> None:
        self.registry = registry
        self.leases = leases
        self.deferred = deferred
        self.store = store
        self.session = session
        self.clock = clock
        self.shutdown_grace_s = shutdown_grace_s
        self.cleanup_interval_s = 0.0
        self.stopping = threading.Event()
        self.stopped = False
        self._listener = listener
        if store is not None:
            store.add_delete_listener(listener)
        self._ticker: threading.Thread | None = None
        self.on_stop: list[Callable[[], None]] = []  # run last, once the actors stopped

    def start_ticker(self, cleanup_interval_s: float) -> None:
        """Sweep every ``cleanup_interval_s`` until ``stop`` (0: never); call it once."""
        self.cleanup_interval_s = cleanup_interval_s
        if cleanup_interval_s > 0:
            self._ticker = threading.Thread(target=self._tick, name="parlour-sweep", daemon=True)
            self._ticker.start()

    def stop(self) -> None:
        """Refuse new obtains, let owners finish (up to the grace), stop every actor.
        Idempotent; see ``ConversationService.stop``."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        with waiting():  # the owners' gated turns finish meanwhile
            self._stop_all()

    def _stop_all(self) -> None:
        try:
            self._await_owners()
            for cid in self.deferred.ids():
                self.deferred.settle_quietly(cid)
            self.registry.ask(StopAll(), None)
        finally:
            self.registry.supervisor.stop()
            self.stopped = True
            self.leases.drop_all()
            if self.store is not None and self.session is None:  # see OnDeleted
                self.store.remove_delete_listener(self._listener)
        if self._ticker is not None:
            self._ticker.join()
        for callback in self.on_stop:
            try:
                callback()
            except Exception as exc:
                logger.opt(exception=exc).error("a callback of the service's stop failed")

    def _await_owners(self) -> None:
        """Wait, for the grace in all, until every owned conversation is released."""
        deadline = self.clock.now() + self.shutdown_grace_s
        owners: dict[str, Owner | None] = self.registry.ask(Owners(), {})
        watched: list[tuple[str, str, pykka.ThreadingFuture[None]]] = []
        live = self.registry.mirror.refs
        for cid, owner in owners.items():
            ref = live.get(cid)
            if owner is None or ref is None:
                continue
            idle: pykka.ThreadingFuture[None] = pykka.ThreadingFuture()
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(NotifyIdle(idle))
                watched.append((cid, owner.job_id, idle))
        spent = False
        for cid, job_id, idle in watched:
            try:
                idle.get(timeout=0.0 if spent else max(deadline - self.clock.now(), 0.0))
            except pykka.Timeout:
                spent = True  # the grace is used up: the rest are only checked
                logger.warning("stopping with conversation {} still owned by {}", cid, job_id)

    def _tick(self) -> None:
        while not self.stopping.wait(self.cleanup_interval_s):
            try:
                self.registry.sweep()
            except Exception:
                logger.exception("periodic sweep failed; the next one still runs")
