"""The deferred saves of a ``ConversationService``: updates queued in the store's next
commit (``save_conversation(..., wait=False)``) that nobody has waited for yet.

Each conversation's are kept in the order they were made, with the snapshot each writes. Its
owner's next waited save settles them (its own commit holds them: the store commits in queue
order), as do its release and the service's ``stop``. A failed one drops the conversation
from memory and the session cache: memory is then ahead of the store.

Thread-safety: a conversation's entries are touched by its owner's thread (and by ``stop``
once the owners are done); distinct conversations from any threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loguru import logger

from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import SessionStore

Settle = Callable[[], int]  # waits for a deferred save; its new version
Pending = list[tuple[ConversationPersistenceSnapshot, Settle]]


class DeferredSaves:
    """Deferred saves by conversation id; ``later`` is the store's ``save_context_later``
    (None: the store cannot defer, and every save waits)."""

    def __init__(
        self, store: Any, session: SessionStore | None, forget: Callable[[str, str], None]
    ) -> None:
        self.later: Callable[..., Settle] | None = getattr(store, "save_context_later", None)
        self._session = session
        self._forget = forget
        self._pending: dict[str, Pending] = {}

    def __bool__(self) -> bool:
        return bool(self._pending)

    def ids(self) -> list[str]:
        return list(self._pending)

    def add(self, cid: str, snapshot: ConversationPersistenceSnapshot, settle: Settle) -> None:
        self._pending.setdefault(cid, []).append((snapshot, settle))

    def take(self, cid: str) -> Pending | None:
        return self._pending.pop(cid, None)

    def settle(self, cid: str, pending: Pending, *, cache: bool = True) -> None:
        """Wait for ``pending``. The first that failed is raised, after the conversation is
        dropped from memory and the session cache; otherwise the last is written through to
        the cache (``cache``)."""
        failed: Exception | None = None
        for snapshot, settle in pending:
            try:
                snapshot.stored_version = settle()
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            self._forget(cid, f"A deferred save of conversation {cid} failed.")
            raise failed
        if cache and self._session is not None:
            self._session.put(pending[-1][0])

    def settle_quietly(self, cid: str) -> None:
        """Settle ``cid``'s deferred saves, logging a failure (at release and stop)."""
        pending = self.take(cid)
        if pending is None:
            return
        try:
            self.settle(cid, pending)
        except Exception:
            logger.exception("a deferred save of conversation {} failed", cid)
