"""The lifecycle half of ``ConversationService``: stop, the context managers, the sweep ticker.

``stop`` refuses new obtains, lets owners finish within the grace (``NotifyIdle`` futures on
the injected clock), stops every conversation actor and the supervisor, and joins the
ticker. A base class with no state of its own, like ``Activations``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import pykka
from loguru import logger

from parlour.runtime import Clock

from ._deferred import DeferredSaves
from ._gate import waiting
from ._messages import NotifyIdle, Owner, Owners, StopAll

__all__ = ["Lifecycle"]


class Lifecycle:
    """Stopping a service, once, from any thread; ``with`` and ``async with``."""

    clock: Clock
    shutdown_grace_s: float
    cleanup_interval_s: float
    _stopping: threading.Event
    _stopped: bool
    _supervisor: pykka.ActorRef[Any]
    _ticker: threading.Thread | None
    _live: dict[str, Any]
    _held: dict[Any, Any]
    _deferred: DeferredSaves
    store: Any
    session: Any
    _listener: Callable[[str], None]  # its store's delete listener

    def _ask(self, message: Any, default: Any) -> Any:
        raise NotImplementedError

    def sweep_expired(self) -> int:
        raise NotImplementedError

    def is_stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Refuse new obtains, let owners finish (up to the grace), stop every actor.

        Idempotent. Never persists: the last boundary already did (a deferred save still
        unsettled once the owners are done is waited for, its failure logged). Afterwards
        queries answer empty, ``release`` is a no-op and obtains refuse with
        ``IllegalStateError``.
        """
        if self._stopping.is_set():
            return
        self._stopping.set()
        with waiting():  # the owners' gated turns finish meanwhile
            self._stop_all()

    def _stop_all(self) -> None:
        try:
            self._await_owners()
            for cid in self._deferred.ids():
                self._deferred.settle_quietly(cid)
            self._ask(StopAll(), None)
        finally:
            self._supervisor.stop()
            self._stopped = True
            self._held.clear()
            remove = getattr(self.store, "remove_delete_listener", None)
            if remove is not None and self.session is None:  # see OnDeleted
                remove(self._listener)
        if self._ticker is not None:
            self._ticker.join()

    def _await_owners(self) -> None:
        """Wait, for the grace in all, until every owned conversation is released."""
        deadline = self.clock.now() + self.shutdown_grace_s
        owners: dict[str, Owner | None] = self._ask(Owners(), {})
        watched: list[tuple[str, str, pykka.ThreadingFuture[None]]] = []
        for cid, owner in owners.items():
            ref = self._live.get(cid)
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

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    def _tick(self) -> None:
        while not self._stopping.wait(self.cleanup_interval_s):
            try:
                self.sweep_expired()
            except Exception:
                logger.exception("periodic sweep failed; the next one still runs")
