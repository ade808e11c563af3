"""parlour.stores: durable conversations and the session cache in front of them.

``LmdbStore`` is the default persistent store (embedded, on a directory, group-committed);
``MemorySessionCache`` the default session cache; ``MemoryStore`` a dict-backed persistent
store for tests; ``PostgresStore`` a store on PostgreSQL that many processes share (the
``parlour[postgres]`` extra). Only this package knows LMDB or PostgreSQL.
"""

from parlour.stores._lmdb import LmdbStore
from parlour.stores._lmdb_history import StoreStatistics
from parlour.stores._memory import MemorySessionCache, MemoryStore
from parlour.stores._postgres import PostgresStore
from parlour.stores._protocols import (
    ConversationSummary,
    ConversationVersion,
    PersistentStore,
    SessionStore,
)

__all__ = [
    "ConversationSummary",
    "ConversationVersion",
    "LmdbStore",
    "MemorySessionCache",
    "MemoryStore",
    "PersistentStore",
    "PostgresStore",
    "SessionStore",
    "StoreStatistics",
]
