"""A minted id is its owner's from the moment a service serves it: another user's direct
create of it is refused while the conversation is live and unsaved (learning only that the
id is taken), so the owner's first save creates it; once the unsaved conversation is gone,
nothing of the reservation is left behind."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime import ConversationContext
from parlour.stores import LmdbStore, MemoryStore


@pytest.fixture(params=["memory", "lmdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made = MemoryStore() if request.param == "memory" else LmdbStore(tmp_path, sync=False)
    yield made
    made.close()


def _bobs(cid: str) -> Any:
    context = ConversationContext(cid, user_id="bob")
    context.add_user_message("bob's")
    return context.to_snapshot()


def test_another_users_create_cannot_take_an_id_minted_and_live_but_not_saved(store: Any) -> None:
    service = ConversationService(store, cleanup_interval_s=0, shutdown_grace_s=0.1)
    try:
        alice = BasicThinker("alice")
        cid = alice.mint_conversation_id()
        context = service.obtain_conversation(None, alice).get(timeout=5)
        context.add_user_message("alice's")
        with pytest.raises(PermissionError, match=f"^User bob does not own conversation {cid}$"):
            store.create_context(_bobs(cid), "bob")
        assert store.delete(cid, "bob") is False and not store.exists(cid, "bob")
        service.save_conversation(context, alice)
        service.release(alice)
        loaded = store.load(cid, "alice")
        assert loaded is not None and [m.raw_content for m in loaded.messages] == ["alice's"]
    finally:
        service.stop()


def test_a_minted_conversation_dropped_unsaved_leaves_its_id_free(store: Any) -> None:
    service = ConversationService(store, cleanup_interval_s=0, shutdown_grace_s=0.1)
    try:
        alice = BasicThinker("alice")
        cid = alice.mint_conversation_id()
        context = service.obtain_conversation(None, alice).get(timeout=5)
        service.release(alice, retain=0)  # evicted at once, never saved
        del context, alice
        gc.collect()  # the reservation is held weakly: with its holders gone, it is gone
        assert store.create_context(_bobs(cid), "bob") == 1
    finally:
        service.stop()
