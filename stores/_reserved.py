"""Ids reserved for their owner before their record exists: ``Reservations``.

A service mints a conversation id and serves the conversation live well before its first
save creates the record. Until then nothing in the store says whose the id is, and a
direct ``create_context`` by another user could take it: the owner's first save would then
be refused, and the other user's delete would reach the owner's live conversation. A
reservation (``PersistentStore.reserve``) closes that door for as long as its holder (the
live conversation) lives: another user's create of the id is refused as for a record of
someone else's. It is held weakly: a conversation dropped unsaved leaves nothing behind.
Within one store object (one process).
"""

from __future__ import annotations

import threading
import weakref

from parlour.runtime.errors import not_owned

_SWEEP_PAST = 1024  # reservations kept before the dead ones are swept out


class Reservations:
    """Each reserved id's owner and (weakly) its holder.

    Thread-safety: every method from any thread.
    """

    __slots__ = ("_held", "_lock", "_sweep_at")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[str, weakref.ref[object]]] = {}
        self._sweep_at = _SWEEP_PAST

    def reserve(self, conversation_id: str, user_id: str, holder: object) -> None:
        """Reserve ``conversation_id`` for ``user_id`` while ``holder`` lives.

        Raises:
            PermissionError: another user's live reservation holds the id.
        """
        with self._lock:
            self._refuse_another(conversation_id, user_id)
            self._held[conversation_id] = (user_id, weakref.ref(holder))
            if len(self._held) > self._sweep_at:
                self._held = {k: v for k, v in self._held.items() if v[1]() is not None}
                self._sweep_at = max(_SWEEP_PAST, 2 * len(self._held))

    def check(self, conversation_id: str | None, user_id: str) -> None:
        """Refuse ``user_id``'s create of an id another user holds reserved (at once when
        nothing is reserved: one read of an empty dict).

        Raises:
            PermissionError: another user's live reservation holds the id.
        """
        if self._held and conversation_id is not None:
            self._refuse_another(conversation_id, user_id)

    def _refuse_another(self, conversation_id: str, user_id: str) -> None:
        entry = self._held.get(conversation_id)
        if entry is not None and entry[0] != user_id and entry[1]() is not None:
            raise not_owned(conversation_id, user_id)
