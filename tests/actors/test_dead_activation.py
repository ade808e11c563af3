"""An activation that dies while owned (a handler that crashed) lets no second owner in:
the next obtain takes the recorded lease over (a new activation of the holder's own
context, granted to the holder) and waits for its release; the holder's save and release
go on as if nothing happened."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parlour.actors import BasicThinker, ConversationService
from parlour.stores import LmdbStore, MemoryStore


@pytest.fixture(params=["memory", "lmdb"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ConversationService]:
    store: Any = MemoryStore() if request.param == "memory" else LmdbStore(tmp_path, sync=False)
    made = ConversationService(store, cleanup_interval_s=0, shutdown_grace_s=0.1)
    yield made
    made.stop()
    store.close()


def _kill(service: ConversationService, cid: str) -> None:
    ref = service._registry.mirror.refs[cid]
    ref.tell("a message no handler knows")  # the handler raises: the activation fails
    assert not ref.is_alive()


def test_the_next_obtain_after_an_owned_activation_died_waits_for_the_recorded_holder(
    service: ConversationService,
) -> None:
    first = BasicThinker("alice")
    cid = first.mint_conversation_id()
    context = service.obtain_conversation(None, first).get(timeout=5)
    context.add_user_message("first's")
    service.save_conversation(context, first)
    _kill(service, cid)
    second = BasicThinker("alice", workflow_id=first.workflow_id)
    second.set_conversation_id(cid)
    waiting = service.obtain_conversation(None, second)
    assert service.get_stats().owned == 1  # the holder's lease, taken over; nobody else's
    context.add_user_message("more")
    service.save_conversation(context, first)  # no fence refuses it: nobody else got in
    service.release(first)
    granted = waiting.get(timeout=5)
    assert granted is context
    assert [m.raw_content for m in granted.messages] == ["first's", "more"]
    service.release(second)


def test_the_holder_itself_obtaining_again_after_its_activation_died_gets_its_own_context(
    service: ConversationService,
) -> None:
    first = BasicThinker("alice")
    first.mint_conversation_id()
    context = service.obtain_conversation(None, first).get(timeout=5)
    context.add_user_message("unsaved")
    _kill(service, first.conversation_id)
    assert service.obtain_conversation(None, first).get(timeout=5) is context
    service.save_conversation(context, first)
    service.release(first)
    assert service.get_stats().owned == 0
