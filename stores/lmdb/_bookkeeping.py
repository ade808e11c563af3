"""What LmdbStore keeps beside its group commit: its memory of the messages, ledger entries
and body it wrote (so a save writes only what changed) and the map it writes into (grown
before it fills).

Every method runs under the commit lock, except ``planning_base`` (a racy read, checked
again under the lock by the write that used it) and ``queue``.
"""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from parlour.runtime.snapshots import Appended, MessageSnapshot

from .._body import remembered
from ._lock import ReadGate

if TYPE_CHECKING:
    from .._body import Body
    from .._records import Header

# A conversation as the store last wrote it: its messages and ledger entries (by identity),
# its body (bytes and what they encode) and its header (None: a deferred write's plan, not
# written yet). The three records are None when only the header is known (an append to a
# conversation the store did not remember: a later whole save writes them all). A plain
# tuple: one is made per save (a NamedTuple costs 5 times more).
Written = tuple[
    "list[MessageSnapshot] | None", "Body | None", "list[dict[str, Any]] | None", "Header | None"
]


class Bookkeeping:
    """The ``CommitHooks`` of one store: transactions, map growth, the written-messages
    memory (bounded to ``remembered`` conversations, least recently written dropped)."""

    def __init__(self, env: Any, gate: ReadGate, path: Path, remembered: int) -> None:
        self._env = env
        self._gate = gate
        self._path = path
        self._remembered = remembered
        # the last committed write of each conversation
        self._written: OrderedDict[str, Written] = OrderedDict()
        self._pending: dict[str, Written | None] = {}  # this batch's writes
        self._queued: dict[str, Written] = {}  # deferred writes not yet applied
        self._moment: dt.datetime | None = None  # this batch's time (``moment``)
        self._psize: int | None = None
        self._unchecked = 0  # bytes that batches may add before the map is measured again

    def planning_base(self, cid: str) -> Written | None:
        """What ``cid``'s next write will find written, as far as is known now: a deferred
        write's that is still queued, else this batch's, else the last committed one (None
        when not remembered)."""
        queued = self._queued.get(cid)
        if queued is not None:
            return queued
        pending = self._pending.get(cid)
        return pending if pending is not None else self._written.get(cid)

    def queue(self, cid: str, written: Written) -> None:
        """A deferred write of ``cid``, queued, will write ``written`` (from any thread: the
        conversation's owner's)."""
        self._queued[cid] = written

    def dequeue(self, cid: str, written: Written) -> None:
        """The deferred write that queued ``written`` is being applied (or refused): it is
        no longer ahead of anything (a later one of ``cid`` stays)."""
        if self._queued.get(cid) is written:
            del self._queued[cid]

    def known(self, cid: str) -> Written | None:
        """What the store has written of ``cid``, this batch included."""
        if cid in self._pending:
            return self._pending[cid]
        return self._written.get(cid)

    def note(self, cid: str, written: Written | None) -> None:
        """A write in this batch wrote ``written`` (None: removed the conversation)."""
        self._pending[cid] = written

    def appended(self, cid: str, appended: Appended, head: Header) -> None:
        """An append in this batch left ``head``: the messages and ledger entries known
        written grow by the append's (when they were known at the version it followed)."""
        known = self.known(cid)
        if known is None or known[3] is None or known[3].version != appended.version:
            self._pending[cid] = (None, None, None, head)
            return
        messages, body, usage, _ = known
        if messages is not None:
            messages = messages + appended.messages
        if usage is not None:
            usage = usage + appended.usage
        self._pending[cid] = (messages, body, usage, head)

    def begin(self, write: bool, parent: Any) -> Any:
        return self._env.begin(write=write, parent=parent)

    def attempt(self) -> None:
        self._pending.clear()
        self._moment = None

    def moment(self, now: Callable[[], dt.datetime]) -> dt.datetime:
        """The time of this batch's saves: one transaction, one moment (the first write to
        ask reads ``now``). Two saves of one conversation in a batch then move its owner-index
        entry once: the second finds the time unchanged."""
        if self._moment is None:
            self._moment = now()
        return self._moment

    def committed(self) -> None:
        """What the commit wrote becomes what the store knows it has written (a body without
        its bytes: they are in the record, see ``_body.remembered``)."""
        for cid, written in self._pending.items():
            if written is None:
                self._written.pop(cid, None)
                continue
            messages, body, usage, head = written
            if body is not None and (kept := remembered(body)) is not body:
                written = (messages, kept, usage, head)
            self._written[cid] = written
            self._written.move_to_end(cid)
        while len(self._written) > self._remembered:
            self._written.popitem(last=False)
        self._pending.clear()

    def discarded(self) -> None:
        """Every write of the batch raised and its transaction was aborted: what they noted
        before raising was never written, so the memory stays as the last commit left it."""
        self._pending.clear()

    def failed(self) -> None:
        """A commit that failed wrote nothing; trust nothing, the next saves write in full."""
        self._written.clear()
        self._pending.clear()
        self._queued.clear()
        self._unchecked = 0

    def make_room(self, incoming: int) -> None:
        """Grow the map before a batch could fill it. LMDB running out of map while other
        threads hold read transactions hung here (py-lmdb 2.x and 3.0), so a full map must
        stay the rare fallback, not the way growth is discovered.

        The map is measured (``env.info()``, about 1 µs) only when the batches since the
        last measure could have used the room it left: each is allowed four times its bytes
        and a MiB of pages."""
        self._unchecked -= 4 * incoming + (1 << 20)
        if self._unchecked >= 0:
            return
        info = self._env.info()
        used, size = (info["last_pgno"] + 1) * self._page_size(), info["map_size"]
        if used + 4 * incoming + (1 << 20) > size // 2:
            self.grow(max(2 * size, 2 * (used + 4 * incoming + (1 << 20))))
            return  # measured again before the next batch
        self._unchecked = size // 2 - used - 4 * incoming - (1 << 20)

    def used_bytes(self) -> int:
        return int((self._env.info()["last_pgno"] + 1) * self._page_size())

    def _page_size(self) -> int:
        if self._psize is None:
            self._psize = int(self._env.stat()["psize"])
        return self._psize

    def grow(self, size: int | None = None) -> None:
        """Grow the map (to ``size``, else twice). Under the commit lock, so no write
        transaction is open; the gate keeps readers out, as ``set_mapsize`` requires."""
        env = self._env
        size = size or env.info()["map_size"] * 2
        logger.info("growing the LMDB map at {} to {} bytes", self._path, size)
        with self._gate.exclusive():
            env.set_mapsize(size)
        self._unchecked = 0
