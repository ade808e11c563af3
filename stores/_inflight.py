"""The creates a store has under way, so an update of the same id is ordered after them.

A create encodes its snapshot before its write is queued (``LmdbStore``) or sent
(``PostgresStore``); an update of the same id issued meanwhile (from the version the
create will make) would otherwise reach the store first, find no record, and be refused
as if the conversation had been deleted: lost. ``Creates`` marks each id from the create's
first step to its answer, and an update of a marked id waits for the create first. Within
one store object (one process); a create in another process is the database's to order.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from ._waiting import waiting


class Creates:
    """The ids whose create is under way, each with the event its answer sets.

    Thread-safety: every method from any thread.
    """

    __slots__ = ("_lock", "under_way")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # id -> (the event set when its last create ends, how many creates of it are under way)
        self.under_way: dict[str | None, tuple[threading.Event, int]] = {}

    @contextlib.contextmanager
    def creating(self, cid: str | None) -> Iterator[None]:
        """Mark ``cid`` as being created for the duration of the block."""
        with self._lock:
            event, count = self.under_way.get(cid) or (threading.Event(), 0)
            self.under_way[cid] = (event, count + 1)
        try:
            yield
        finally:
            with self._lock:
                event, count = self.under_way[cid]
                if count == 1:
                    del self.under_way[cid]
                    event.set()
                else:
                    self.under_way[cid] = (event, count - 1)

    def wait_for(self, cid: str | None) -> None:
        """Return once no create of ``cid`` is under way (at once when none is: the usual
        update reads one empty dict). The wait lets a held turn gate go."""
        if not self.under_way:
            return
        entry = self.under_way.get(cid)
        if entry is not None:
            with waiting():
                entry[0].wait()
