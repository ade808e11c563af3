"""What LmdbStore keeps beside its group commit: its memory of the messages it wrote (so a
save writes only what changed) and the map it writes into (grown before it fills).

Every method runs under the commit lock, except ``last_written`` (a racy read, checked
again under the lock by the write that used it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loguru import logger

from parlour.runtime.snapshots import MessageSnapshot
from parlour.stores._lock import ReadGate


class Bookkeeping:
    """The ``CommitHooks`` of one store: transactions, map growth, the written-messages
    memory (bounded to ``remembered`` conversations, least recently written dropped)."""

    def __init__(self, env: Callable[[], Any], gate: ReadGate, path: Path, remembered: int) -> None:
        self._env = env
        self._gate = gate
        self._path = path
        self._remembered = remembered
        # by identity; the last committed write of each conversation's messages
        self._written: OrderedDict[str, list[MessageSnapshot]] = OrderedDict()
        self._pending: dict[str, list[MessageSnapshot] | None] = {}  # this batch's writes
        self._psize: int | None = None

    def last_written(self, cid: str) -> list[MessageSnapshot] | None:
        """What the last committed write of ``cid`` held (None when not remembered)."""
        return self._written.get(cid)

    def known(self, cid: str) -> list[MessageSnapshot] | None:
        """What the store has written of ``cid``'s messages, this batch included."""
        if cid in self._pending:
            return self._pending[cid]
        return self._written.get(cid)

    def note(self, cid: str, messages: list[MessageSnapshot] | None) -> None:
        """A write in this batch wrote ``messages`` (None: removed the conversation)."""
        self._pending[cid] = messages

    def begin(self, write: bool, parent: Any) -> Any:
        return self._env().begin(write=write, parent=parent)

    def attempt(self) -> None:
        self._pending.clear()

    def committed(self) -> None:
        """What the commit wrote becomes what the store knows it has written."""
        for cid, messages in self._pending.items():
            if messages is None:
                self._written.pop(cid, None)
            else:
                self._written[cid] = messages
                self._written.move_to_end(cid)
        while len(self._written) > self._remembered:
            self._written.popitem(last=False)
        self._pending.clear()

    def failed(self) -> None:
        """A commit that failed wrote nothing; trust nothing, the next saves write in full."""
        self._written.clear()
        self._pending.clear()

    def make_room(self, incoming: int) -> None:
        """Grow the map before a batch could fill it. LMDB running out of map while other
        threads hold read transactions hung here (py-lmdb 2.x and 3.0), so a full map must
        stay the rare fallback, not the way growth is discovered."""
        info = self._env().info()
        used, size = (info["last_pgno"] + 1) * self._page_size(), info["map_size"]
        if used + 4 * incoming + (1 << 20) > size // 2:
            self.grow(max(2 * size, 2 * (used + 4 * incoming + (1 << 20))))

    def used_bytes(self) -> int:
        return int((self._env().info()["last_pgno"] + 1) * self._page_size())

    def _page_size(self) -> int:
        if self._psize is None:
            self._psize = int(self._env().stat()["psize"])
        return self._psize

    def grow(self, size: int | None = None) -> None:
        """Grow the map (to ``size``, else twice). Under the commit lock, so no write
        transaction is open; the gate keeps readers out, as ``set_mapsize`` requires."""
        env = self._env()
        size = size or env.info()["map_size"] * 2
        logger.info("growing the LMDB map at {} to {} bytes", self._path, size)
        with self._gate.exclusive():
            env.set_mapsize(size)
