"""``Saves``: a conversation persisted at its owner's boundaries.

Identity decides persistence: a conversation keyed by its thinker's job id is temporary and
never saved. The first save of a minted conversation creates the record, every other save
updates it; an update may be deferred where the store can queue it (``DeferredSaves``), and
a waited save settles the conversation's deferred ones (its commit holds them). On a store
that takes appends (``LmdbStore``) an update whose conversation only added since its last
save goes as an append (``ConversationContext.changes_since_save``): no snapshot of the
whole conversation is made. After the durable commit the session cache gets the snapshot a
whole save would have written, so it is never ahead of the store (nor, after an append it
cannot follow, behind it: the entry is dropped). A save that finds another owner's newer
version drops the conversation from memory and from the cache before it raises.

``save`` waits in the calling thread; ``save_async`` awaits on the running loop through the
store's ``*_async`` saves (for ``LmdbStore``: planned on the loop, committed by whoever
leads, the loop woken once per batch; for a store that cannot queue: a thread hop). Both are
made of the same steps (``_saved_id``, ``_appended``, ``_defer``, ``_failed``,
``_committed``, ``_append_durable``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

import msgspec

from parlour.runtime import ConversationContext
from parlour.runtime.errors import StaleVersionError
from parlour.runtime.snapshots import Appended, ConversationPersistenceSnapshot, applied
from parlour.stores import PersistentStore, SaveFuture, SessionStore

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
        cid = self._saved_id(context, thinker)
        if cid is None:
            return
        assert context is not None and thinker is not None and self.store is not None
        appended = self._appended(context)
        if appended is not None:  # the usual boundary: messages added, nothing else
            self._append(context, thinker, appended, wait)
            return
        snapshot = context.to_snapshot()
        if not wait and self.deferred.later is not None and context.stored:
            self._defer(context, thinker, cid, snapshot)
            return
        try:
            if not context.stored and thinker.is_conversation_minted():
                version = self.store.create_context(snapshot, thinker.user_id, thinker)
            else:
                version = self.store.save_context(snapshot, thinker.user_id, thinker)
        except Exception as exc:
            self._failed(context, cid, exc)
            raise
        self._committed(context, cid, snapshot, version)

    async def save_async(
        self, context: ConversationContext | None, thinker: Thinker | None, wait: bool
    ) -> None:
        """See ``ConversationService.save_async``: ``save`` from the running loop, through
        the store's ``*_async`` saves. A cancellation while the commit is under way comes
        once it is answered (``SaveFuture``): the save is recorded as ``save`` would, then
        the ``CancelledError`` raised."""
        cid = self._saved_id(context, thinker)
        if cid is None:
            return
        assert context is not None and thinker is not None and self.store is not None
        appended = self._appended(context)
        if appended is not None:
            await self._append_async(context, thinker, appended, wait)
            return
        snapshot = context.to_snapshot()
        if not wait and self.deferred.later is not None and context.stored:
            self._defer(context, thinker, cid, snapshot)  # queued: nothing waits
            return
        try:
            if not context.stored and thinker.is_conversation_minted():
                commit = self.store.create_context_async(snapshot, thinker.user_id, thinker)
            else:
                commit = self.store.save_context_async(snapshot, thinker.user_id, thinker)
            version = await commit
        except asyncio.CancelledError:  # delivered once the save is answered (SaveFuture)
            self._answered(commit, context, cid, partial(self._committed, context, cid, snapshot))
            raise
        except Exception as exc:  # refused at once, or the commit's own error
            self._failed(context, cid, exc)
            raise
        self._committed(context, cid, snapshot, version)

    # -- appends --------------------------------------------------------------------------

    def _appended(self, context: ConversationContext) -> Appended | None:
        """What the save of ``context`` appends, where the store takes appends and the
        conversation only added since its last save (None: save the whole snapshot)."""
        if not self._appends or not context.stored:
            return None
        return context.changes_since_save()

    def _append(
        self, context: ConversationContext, thinker: Thinker, appended: Appended, wait: bool
    ) -> None:
        """Save what ``appended`` adds (``PersistentStore.append_context``), deferred where
        asked and the store defers."""
        assert self.store is not None
        cid, version = appended.conversation_id, appended.version + 1
        cached = self._cached(cid, thinker.user_id, appended, version)
        if not wait and self.deferred.later is not None:
            settle = self.store.append_context_later(appended, thinker.user_id, thinker)
            self.deferred.add(cid, settle, cached)
            context.stored_version = version  # what the update will make
            context.mark_saved(version, appended=appended)
            return
        try:
            version = self.store.append_context(appended, thinker.user_id, thinker)
        except Exception as exc:
            self._failed(context, cid, exc)
            raise
        self._append_durable(context, cid, appended, cached, version)

    async def _append_async(
        self, context: ConversationContext, thinker: Thinker, appended: Appended, wait: bool
    ) -> None:
        """``_append`` from the running loop (``append_context_async``)."""
        assert self.store is not None
        if not wait and self.deferred.later is not None:
            self._append(context, thinker, appended, wait)  # queued: nothing waits
            return
        cid, version = appended.conversation_id, appended.version + 1
        cached = self._cached(cid, thinker.user_id, appended, version)
        try:
            commit = self.store.append_context_async(appended, thinker.user_id, thinker)
            version = await commit
        except asyncio.CancelledError:  # delivered once the save is answered (SaveFuture)
            durable = partial(self._append_durable, context, cid, appended, cached)
            self._answered(commit, context, cid, durable)
            raise
        except Exception as exc:
            self._failed(context, cid, exc)
            raise
        self._append_durable(context, cid, appended, cached, version)

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

    def _append_durable(
        self,
        context: ConversationContext,
        cid: str,
        appended: Appended,
        cached: ConversationPersistenceSnapshot | None,
        version: int,
    ) -> None:
        """An append durable at ``version``: as ``_committed``, the session cache getting
        ``cached`` (None: its entry, older now, dropped: the next restore reads the store)."""
        self.deferred.settle(cid)  # committed with this save or before: no wait
        context.stored_version = version
        context.mark_saved(version, appended=appended)
        if self.session is not None:  # after the durable commit: never ahead of the store
            if cached is None:
                self.session.delete(cid)
            else:
                self.session.put(cached)

    # -- the steps both paths share -------------------------------------------------------

    def _saved_id(self, context: ConversationContext | None, thinker: Thinker | None) -> str | None:
        """The id to save ``context`` under; None when nothing is durable (no store) or the
        conversation is temporary (keyed by its thinker's job id)."""
        if self.store is None or context is None or thinker is None:
            return None
        cid = context.conversation_id
        if cid is None or cid == thinker.job_id:
            return None
        return cid

    def _defer(
        self,
        context: ConversationContext,
        thinker: Thinker,
        cid: str,
        snapshot: ConversationPersistenceSnapshot,
    ) -> None:
        """Queue the update for the store's next commit; the owner's next waited save (or
        its release) settles it."""
        assert self.deferred.later is not None
        settle = self.deferred.later(snapshot, thinker.user_id, thinker)
        version = snapshot.stored_version + 1  # what the update will make
        ahead = (
            None
            if self.session is None
            else msgspec.structs.replace(snapshot, stored_version=version)
        )
        self.deferred.add(cid, settle, ahead)
        context.stored_version = version
        context.mark_saved(version, snapshot.messages)

    def _answered(
        self,
        commit: SaveFuture,
        context: ConversationContext,
        cid: str,
        committed: Callable[[int], None],
    ) -> None:
        """Record a save whose caller was cancelled meanwhile, as if it had waited
        (``committed(version)`` on success)."""
        error = commit.exception()
        if error is None:
            committed(commit.result())
        elif isinstance(error, Exception):
            self._failed(context, cid, error)

    def _failed(self, context: ConversationContext, cid: str, error: Exception) -> None:
        """A save refused or failed: what is stored is no longer known here; the deferred
        ones queued before it answer first (their error is raised ahead of this one);
        another owner's newer version drops the conversation from memory and the cache."""
        context.unmark_saved()
        self.deferred.settle(cid)  # queued before this save; its error goes first
        if isinstance(error, StaleVersionError):
            self._forget(cid, f"Conversation {cid} was saved by another owner.", True)

    def _committed(
        self,
        context: ConversationContext,
        cid: str,
        snapshot: ConversationPersistenceSnapshot,
        version: int,
    ) -> None:
        """A save durable at ``version``: the deferred ones are too (committed with it or
        before: no wait); the context and the session cache learn of it."""
        self.deferred.settle(cid)
        context.stored_version = snapshot.stored_version = version
        context.mark_saved(version, snapshot.messages)
        if self.session is not None:  # write-through after the durable commit: never stale
            self.session.put(snapshot)
