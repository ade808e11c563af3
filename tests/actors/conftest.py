"""Fixtures for the actor layer: a service on a real LMDB store, and counting stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from parlour.actors import ConversationService
from parlour.runtime.testing import FakeClock
from parlour.stores import LmdbStore, MemorySessionCache, MemoryStore


class CountingStore(MemoryStore):
    """A MemoryStore that counts its calls, for the save discipline."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {"create": 0, "save": 0, "load": 0}
        self.load_callers: list[object] = []

    def create_context(self, snapshot, user_id, caller=None):  # type: ignore[no-untyped-def]
        self.calls["create"] += 1
        return super().create_context(snapshot, user_id, caller)

    def save_context(self, snapshot, user_id, caller=None):  # type: ignore[no-untyped-def]
        self.calls["save"] += 1
        return super().save_context(snapshot, user_id, caller)

    def load(self, conversation_id, user_id, caller=None):  # type: ignore[no-untyped-def]
        self.calls["load"] += 1
        self.load_callers.append(caller)
        return super().load(conversation_id, user_id, caller)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def service(tmp_path: Path, clock: FakeClock) -> Iterator[ConversationService]:
    store = LmdbStore(tmp_path / "db")
    svc = ConversationService(
        store, MemorySessionCache(), clock=clock, cleanup_interval_s=0, shutdown_grace_s=0.1
    )
    yield svc
    svc.stop()
    store.close()


@pytest.fixture
def counting() -> CountingStore:
    return CountingStore()


@pytest.fixture
def counted_service(counting: CountingStore, clock: FakeClock) -> Iterator[ConversationService]:
    svc = ConversationService(counting, clock=clock, cleanup_interval_s=0, shutdown_grace_s=0.1)
    yield svc
    svc.stop()
