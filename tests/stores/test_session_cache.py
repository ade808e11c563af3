"""MemorySessionCache: the session cache conformance suite, and bounded, LRU, user-bound."""

from __future__ import annotations

import pytest

from parlour.runtime import ConversationContext
from parlour.stores import MemorySessionCache
from parlour.stores.testing import SessionStoreContract


class TestMemorySessionCache(SessionStoreContract):
    @pytest.fixture
    def session(self) -> MemorySessionCache:
        return MemorySessionCache()


def _snapshot(cid: str, user: str = "alice"):  # type: ignore[no-untyped-def]
    return ConversationContext(cid, user_id=user).to_snapshot()


def test_the_cache_evicts_the_least_recently_used_beyond_its_capacity() -> None:
    cache = MemorySessionCache(capacity=2)
    cache.put(_snapshot("a"))
    cache.put(_snapshot("b"))
    assert cache.get("a", "alice") is not None  # a is now the most recent
    cache.put(_snapshot("c"))
    assert len(cache) == 2
    assert cache.get("b", "alice") is None
    assert cache.get("a", "alice") is not None and cache.get("c", "alice") is not None


def test_another_users_entry_is_a_miss() -> None:
    cache = MemorySessionCache()
    cache.put(_snapshot("a", user="alice"))
    assert cache.get("a", "mallory") is None


def test_a_put_replaces_the_older_snapshot() -> None:
    cache = MemorySessionCache()
    first = _snapshot("a")
    second = ConversationContext("a", user_id="alice")
    second.add_user_message("newer")
    cache.put(first)
    cache.put(second.to_snapshot())
    got = cache.get("a", "alice")
    assert got is not None and len(got.messages) == 1


def test_a_capacity_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        MemorySessionCache(capacity=0)
