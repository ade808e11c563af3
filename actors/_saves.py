"""``Saves``: a conversation persisted at its owner's boundaries.

Identity decides persistence: a conversation keyed by its thinker's job id is temporary and
never saved. The first save of a minted conversation creates the record, every other save
updates it; an update may be deferred where the store can queue it (``DeferredSaves``), and
a waited save settles the conversation's deferred ones (its commit holds them). After the
durable commit the snapshot is written through to the session cache, so the cache is never
ahead of the store. A save that finds another owner's newer version drops the conversation
from memory and from the cache before it raises.

``save`` waits in the calling thread; ``save_async`` awaits on the running loop through the
store's ``*_async`` saves (for ``LmdbStore``: planned on the loop, committed by whoever
leads, the loop woken once per batch; for a store that cannot queue: a thread hop). Both are
made of the same steps (``_saved_id``, ``_defer``, ``_failed``, ``_committed``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from parlour.runtime import ConversationContext
from parlour.runtime.errors import StaleVersionError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
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

    __slots__ = ("_forget", "deferred", "session", "store")

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

    def save(
        self, context: ConversationContext | None, thinker: Thinker | None, wait: bool
    ) -> None:
        """See ``ConversationService.save_conversation``."""
        cid = self._saved_id(context, thinker)
        if cid is None:
            return
        assert context is not None and thinker is not None and self.store is not None
        snapshot = context.to_snapshot()
        deferred = self.deferred
        if not wait and deferred.later is not None and context.stored:
            self._defer(context, thinker, cid, snapshot)
            return
        try:
            if not context.stored and thinker.is_conversation_minted():
                version = self.store.create_context(snapshot, thinker.user_id, thinker)
            else:
                version = self.store.save_context(snapshot, thinker.user_id, thinker)
        except Exception as exc:
            self._failed(cid, exc)
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
            self._answered(commit, context, cid, snapshot)
            raise
        except Exception as exc:  # refused at once, or the commit's own error
            self._failed(cid, exc)
            raise
        self._committed(context, cid, snapshot, version)

    def _answered(
        self,
        commit: SaveFuture,
        context: ConversationContext,
        cid: str,
        snapshot: ConversationPersistenceSnapshot,
    ) -> None:
        """Record a save whose caller was cancelled meanwhile, as if it had waited."""
        error = commit.exception()
        if error is None:
            self._committed(context, cid, snapshot, commit.result())
        elif isinstance(error, Exception):
            self._failed(cid, error)

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
        self.deferred.add(cid, settle)
        context.stored_version = snapshot.stored_version + 1  # what the update will make

    def _failed(self, cid: str, error: Exception) -> None:
        """A save refused or failed: the deferred ones queued before it answer first (their
        error is raised ahead of this one); another owner's newer version drops the
        conversation from memory and the cache."""
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
        if self.session is not None:  # write-through after the durable commit: never stale
            self.session.put(snapshot)
