"""parlour.stores: durable conversations and the session cache in front of them.

``LmdbStore`` is the default persistent store (embedded, on a directory, group-committed);
``MemorySessionCache`` the default session cache; ``MemoryStore`` a dict-backed persistent
store for tests. Only this package knows LMDB.
"""

from parlour.stores._lmdb import LmdbStore, StoreStatistics
from parlour.stores._memory import MemorySessionCache, MemoryStore
from parlour.stores._protocols import ConversationSummary, PersistentStore, SessionStore

__all__ = [
    "ConversationSummary",
    "LmdbStore",
    "MemorySessionCache",
    "MemoryStore",
    "PersistentStore",
    "SessionStore",
    "StoreStatistics",
]
