"""parlour.stores: durable conversations and the session cache in front of them.

``LmdbStore`` is the default persistent store (embedded, on a directory, group-committed);
``MemorySessionCache`` the default session cache; ``MemoryStore`` a dict-backed persistent
store for tests; ``PostgresStore`` a store on PostgreSQL that many processes share (the
``parlour[postgres]`` extra). Only this package knows LMDB or PostgreSQL. A store of your
own implements ``PersistentStore`` (``saved_now`` answers ``save_context_later`` and
``saved_in_thread`` the ``*_async`` saves for one that does not defer, ``no_appends``
refuses the appends for one that takes none) and runs ``parlour.stores.testing.StoreContract``.
"""

from ._memory import MemorySessionCache, MemoryStore
from ._protocols import (
    ConversationSummary,
    ConversationVersion,
    PersistentStore,
    SaveFuture,
    SessionStore,
    no_appends,
    saved_in_thread,
    saved_now,
)
from .lmdb._lock import StoreInUseError
from .lmdb._maintenance import StoreStatistics
from .lmdb._store import LmdbStore
from .postgres._store import PostgresStore

__all__ = [
    "ConversationSummary",
    "ConversationVersion",
    "LmdbStore",
    "MemorySessionCache",
    "MemoryStore",
    "PersistentStore",
    "PostgresStore",
    "SaveFuture",
    "SessionStore",
    "StoreInUseError",
    "StoreStatistics",
    "no_appends",
    "saved_in_thread",
    "saved_now",
]
