"""The deferred saves of a ``ConversationService``: updates queued in the store's next
commit (``save_conversation(..., wait=False)``) that nobody has waited for yet.

Each conversation's are kept in the order they were made, as the functions that wait. Its
owner's next waited save settles them (its own commit holds them: the store commits in queue
order), as do its release and the service's ``stop``. A failed one drops the conversation
from memory and the session cache: memory is then ahead of the store. One settled at a
release or ``stop`` drops the conversation's cache entry rather than write it: a delete that
raced it (after a force release) may have cleared the entry since, and must stay cleared;
the next restore reads the store.

Thread-safety: a conversation's entries are touched by its owner's thread (and by ``stop``
once the owners are done); distinct conversations from any threads.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from loguru import logger

from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import PersistentStore, SessionStore

Settle = Callable[[], int]  # waits for a deferred save; its new version


class OnDeleted:
    """A service's delete listener on its store. It holds the service weakly (no cycle:
    the service holds the store) and the session cache strongly: a delete clears the
    conversation from the service while the service lives, and from the session cache
    even after the service stopped, so a later service reading the same cache never
    serves a conversation deleted in between. A service with no session cache takes it
    back from the store when it stops; one with a cache leaves it (it keeps the cache,
    not the service)."""

    __slots__ = ("_forget", "_session")

    def __init__(self, forget: Callable[[str], None], session: SessionStore | None) -> None:
        self._forget = weakref.WeakMethod(forget)  # the service's: it clears the cache too
        self._session = session

    def __call__(self, conversation_id: str) -> None:
        forget = self._forget()
        if forget is not None:
            forget(conversation_id)
        elif self._session is not None:
            self._session.delete(conversation_id)


class DeferredSaves:
    """Deferred saves by conversation id; ``later`` is the store's ``save_context_later``
    (None: the store does not defer, ``defers_saves`` is False, and every save waits)."""

    def __init__(
        self,
        store: PersistentStore | None,
        session: SessionStore | None,
        forget: Callable[[str, str], None],
    ) -> None:
        self.later: Callable[..., Settle] | None = (
            store.save_context_later if store is not None and store.defers_saves else None
        )
        self._session = session
        self._forget = forget
        self._pending: dict[str, list[Settle]] = {}
        # the snapshot each conversation's pending saves lead to (None: not known), for the
        # session cache once a waited save has made them durable
        self._ahead: dict[str, ConversationPersistenceSnapshot | None] = {}

    def __bool__(self) -> bool:
        return bool(self._pending)

    def ids(self) -> list[str]:
        return list(self._pending)

    def add(self, cid: str, settle: Settle, ahead: ConversationPersistenceSnapshot | None) -> None:
        """A deferred save of ``cid``, waited for by ``settle``, leading to ``ahead``."""
        self._pending.setdefault(cid, []).append(settle)
        self._ahead[cid] = ahead

    def ahead(self, cid: str) -> ConversationPersistenceSnapshot | None:
        """The snapshot ``cid``'s pending deferred saves lead to (None: none pending, or
        not known)."""
        return self._ahead.get(cid)

    def pending(self, cid: str) -> bool:
        return cid in self._pending

    def settle(self, cid: str) -> None:
        """Wait for ``cid``'s deferred saves (none: nothing to do). The first that failed is
        raised, after the conversation is dropped from memory and the session cache."""
        pending = self._pending.pop(cid, None)
        if pending is None:
            return
        self._ahead.pop(cid, None)
        failed: Exception | None = None
        for settle in pending:
            try:
                settle()
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            self._forget(cid, f"A deferred save of conversation {cid} failed.")
            raise failed

    def settle_quietly(self, cid: str) -> None:
        """``settle`` at a release or ``stop``: a failure is logged, and a success drops the
        conversation's cache entry (see the module docstring)."""
        if cid not in self._pending:
            return
        try:
            self.settle(cid)
        except Exception:
            logger.exception("a deferred save of conversation {} failed", cid)
            return
        if self._session is not None:
            self._session.delete(cid)
