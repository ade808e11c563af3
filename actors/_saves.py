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

from parlour.runtime import ConversationContext
from parlour.runtime.errors import StaleVersionError
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
        if self.store is None or context is None or thinker is None:
            return
        cid = context.conversation_id
        if cid is None or cid == thinker.job_id:
            return
        snapshot = context.to_snapshot()
        deferred = self.deferred
        if not wait and deferred.later is not None and context.stored:
            settle = deferred.later(snapshot, thinker.user_id, thinker)
            deferred.add(cid, settle)
            context.stored_version = snapshot.stored_version + 1  # what the update will make
            return
        try:
            if not context.stored and thinker.is_conversation_minted():
                version = self.store.create_context(snapshot, thinker.user_id, thinker)
            else:
                version = self.store.save_context(snapshot, thinker.user_id, thinker)
        except Exception as exc:
            deferred.settle(cid)  # queued before this save; its error goes first
            if isinstance(exc, StaleVersionError):
                self._forget(cid, f"Conversation {cid} was saved by another owner.", True)
            raise
        deferred.settle(cid)  # committed with this save or before: no wait
        context.stored_version = snapshot.stored_version = version
        if self.session is not None:  # write-through after the durable commit: never stale
            self.session.put(snapshot)
