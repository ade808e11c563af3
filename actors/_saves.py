"""``Saves``: a conversation persisted at its owner's boundaries.

Identity decides persistence: a conversation keyed by its thinker's job id is temporary and
never saved. The first save of a minted conversation creates the record, every other save
updates it; an update may be deferred where the store can queue it (``DeferredSaves``), and
a waited save settles the conversation's deferred ones (its commit holds them). After the
durable commit the snapshot is written through to the session cache, so the cache is never
ahead of the store. A save that finds another owner's newer version drops the conversation
from memory and from the cache before it raises.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from parlour.runtime import ConversationContext
from parlour.runtime.errors import StaleVersionError
from parlour.runtime.snapshots import Appended, ConversationPersistenceSnapshot, applied
from parlour.stores import PersistentStore, SessionStore

from ._deferred import DeferredSaves
from ._thinker import Thinker

__all__ = ["Saves"]


class Saves:
    """Saves into ``store`` (None: nothing is durable), through ``session``.

    Args:
        store: the persistent store.
        session: the session cache written through after each durable commit.
        deferred: the deferred updates, settled here by the owner's next waited save.
        forget: drops a conversation from memory and the cache, with the reason.

    Thread-safety: a conversation's saves from its owner's thread; distinct conversations
    from any threads.
    """

    __slots__ = ("_appends", "_forget", "deferred", "session", "store")

    def __init__(
        self,
        store: PersistentStore | None,
        session: SessionStore | None,
        deferred: DeferredSaves,
        forget: Callable[[str, str, bool], None],
    ) -> None:
        self.store = store
        self.session = session
        self.deferred = deferred
        self._forget = forget
        self._appends = store is not None and store.appends

    def save(
        self, context: ConversationContext | None, thinker: Thinker | None, wait: bool
    ) -> None:
        """See ``ConversationService.save_conversation``."""
        if self.store is None or context is None or thinker is None:
            return
        cid = context.conversation_id
        if cid is None or cid == thinker.job_id:
            return
        if self._appends and context.stored:
            appended = context.changes_since_save()
            if appended is not None:  # the usual boundary: messages added, nothing else
                self._append(context, thinker, appended, wait)
                return
        snapshot = context.to_snapshot()
        deferred = self.deferred
        if not wait and deferred.later is not None and context.stored:
            settle = deferred.later(snapshot, thinker.user_id, thinker)
            version = snapshot.stored_version + 1  # what the update will make
            ahead = msgspec.structs.replace(snapshot, stored_version=version)
            deferred.add(cid, settle, ahead if self.session is not None else None)
            context.stored_version = version
            context.mark_saved(version, snapshot.messages)
            return
        try:
            if not context.stored and thinker.is_conversation_minted():
                version = self.store.create_context(snapshot, thinker.user_id, thinker)
            else:
                version = self.store.save_context(snapshot, thinker.user_id, thinker)
        except Exception as exc:
            self._failed(context, cid, exc)
            raise
        deferred.settle(cid)  # committed with this save or before: no wait
        context.stored_version = snapshot.stored_version = version
        context.mark_saved(version, snapshot.messages)
        if self.session is not None:  # write-through after the durable commit: never stale
            self.session.put(snapshot)

    def _append(
        self, context: ConversationContext, thinker: Thinker, appended: Appended, wait: bool
    ) -> None:
        """Save what ``appended`` adds (``PersistentStore.append_context``), deferred where
        asked and the store defers. The session cache gets the snapshot a whole save would
        have written, made from the one it holds (or the one the deferred saves lead to);
        when that is not the version the append follows, its entry is dropped: the next
        restore reads the store."""
        assert self.store is not None
        cid, deferred, version = appended.conversation_id, self.deferred, appended.version + 1
        cached = self._cached(cid, thinker.user_id, appended, version)
        if not wait and deferred.later is not None:
            settle = self.store.append_context_later(appended, thinker.user_id, thinker)
            deferred.add(cid, settle, cached)
            context.stored_version = version  # what the update will make
            context.mark_saved(version, appended=appended)
            return
        try:
            version = self.store.append_context(appended, thinker.user_id, thinker)
        except Exception as exc:
            self._failed(context, cid, exc)
            raise
        deferred.settle(cid)  # committed with this save or before: no wait
        context.stored_version = version
        context.mark_saved(version, appended=appended)
        if self.session is not None:  # after the durable commit: never ahead of the store
            if cached is None:
                self.session.delete(cid)
            else:
                self.session.put(cached)

    def _cached(
        self, cid: str, user_id: str, appended: Appended, version: int
    ) -> ConversationPersistenceSnapshot | None:
        """The snapshot the session cache should hold once ``appended`` is durable as
        ``version``, made from what it holds or will (None: no cache, or not known)."""
        if self.session is None:
            return None
        deferred = self.deferred
        base = deferred.ahead(cid) if deferred.pending(cid) else self.session.get(cid, user_id)
        return None if base is None else applied(base, appended, version)

    def _failed(self, context: ConversationContext, cid: str, exc: Exception) -> None:
        """A save failed: what is stored is no longer known here; the deferred saves queued
        before it are settled (their error goes first), and another owner's newer version
        drops the conversation."""
        context.unmark_saved()
        self.deferred.settle(cid)  # queued before this save; its error goes first
        if isinstance(exc, StaleVersionError):
            self._forget(cid, f"Conversation {cid} was saved by another owner.", True)
