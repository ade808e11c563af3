"""Idle conversations past the actor cap are parked (held without a thread) and re-attached
to a new actor when obtained: intact, never from the store, never two owners."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime.errors import ConversationUnavailableError
from parlour.runtime.testing import FakeClock
from tests.actors.stress import run_stress

from .conftest import CountingStore


@pytest.fixture
def parking(counting: CountingStore, clock: FakeClock) -> Iterator[ConversationService]:
    with ConversationService(
        counting, clock=clock, cleanup_interval_s=0, max_active=2, shutdown_grace_s=0.1
    ) as service:
        yield service


def _conversation(service: ConversationService, text: str, user: str = "alice") -> BasicThinker:
    thinker = BasicThinker(user, retain_duration=dt.timedelta(seconds=60))
    thinker.mint_conversation_id()
    context = service.obtain_conversation(None, thinker).get(timeout=5)
    context.add_user_message(text)
    service.save_conversation(context, thinker)
    context.add_user_message(f"{text}, not saved")  # only memory has it
    service.release(thinker)
    return thinker


def test_past_the_actor_cap_idle_conversations_park_and_come_back_intact_without_the_store(
    parking: ConversationService, counting: CountingStore
) -> None:
    thinkers = [_conversation(parking, f"c{i}") for i in range(6)]
    assert parking.get_stats().total == 6
    assert (len(parking._registry.mirror.refs), len(parking._registry.mirror.parked)) == (
        2,
        4,
    )  # 2 threads
    counting.calls["load"] = 0
    for i, thinker in enumerate(thinkers):
        context = parking.obtain_conversation(None, thinker).get(timeout=5)
        assert [m.raw_content for m in context.messages] == [f"c{i}", f"c{i}, not saved"]
        parking.release(thinker)
    assert counting.calls["load"] == 0
    assert parking.get_stats().total == 6


def test_a_parked_conversation_refuses_another_user_at_once(parking: ConversationService) -> None:
    first = _conversation(parking, "mine")
    for i in range(3):
        _conversation(parking, f"other {i}")  # first is parked now
    foreign = BasicThinker("mallory")
    foreign.set_conversation_id(first.conversation_id)
    with pytest.raises(PermissionError):
        parking.obtain_conversation(None, foreign).get(timeout=5)
    with pytest.raises(PermissionError):
        parking.remove_conversation(first.conversation_id, "mallory")
    again = parking.obtain_conversation(None, first).get(timeout=5)
    assert [m.raw_content for m in again.messages] == ["mine", "mine, not saved"]
    parking.release(first)


def test_a_deleted_parked_conversation_is_never_served_again(
    parking: ConversationService, counting: CountingStore
) -> None:
    first = _conversation(parking, "doomed")
    for i in range(3):
        _conversation(parking, f"other {i}")
    assert counting.delete(first.conversation_id, "alice")
    reader = BasicThinker("alice")
    reader.set_conversation_id(first.conversation_id)
    with pytest.raises(ConversationUnavailableError):
        parking.obtain_conversation(None, reader).get(timeout=5)


def test_the_sweep_forgets_parked_conversations_whose_retention_ran_out(
    parking: ConversationService, clock: FakeClock
) -> None:
    for i in range(5):
        _conversation(parking, f"c{i}")
    clock.advance(61)
    assert parking.sweep_expired() == 5
    assert parking.get_stats().total == 0


def test_the_ownership_stress_with_parking_never_sees_two_owners_or_loses_a_turn(
    tmp_path: Path,
) -> None:
    report = run_stress(
        tmp_path / "db", threads=64, conversations=16, turns_per_thread=6, max_active=3
    )
    assert report.violations == []
    assert report.turns == report.acknowledged == 64 * 6
