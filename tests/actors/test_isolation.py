"""A foreign user learns that an id is taken and nothing more; deletes through any door."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime.errors import ConversationUnavailableError
from parlour.stores import LmdbStore

Setup = Callable[[ConversationService], str]


def _busy(service: ConversationService) -> str:
    alice = BasicThinker("alice")
    cid = alice.mint_conversation_id()
    context = service.obtain_conversation(None, alice).get(timeout=5)
    context.add_user_message("a secret title")
    service.save_conversation(context, alice)
    return cid


def _idle(service: ConversationService) -> str:
    alice = BasicThinker("alice")
    cid = _busy_with(service, alice)
    service.release(alice, retain=60)
    return cid


def _stored(service: ConversationService) -> str:
    alice = BasicThinker("alice")
    cid = _busy_with(service, alice)
    service.release(alice, retain=0)
    return cid


def _live_unsaved(service: ConversationService) -> str:
    alice = BasicThinker("alice")
    cid = alice.mint_conversation_id()
    service.obtain_conversation(None, alice).get(timeout=5)
    return cid


def _busy_with(service: ConversationService, alice: BasicThinker) -> str:
    cid = alice.mint_conversation_id()
    context = service.obtain_conversation(None, alice).get(timeout=5)
    context.add_user_message("a secret title")
    service.save_conversation(context, alice)
    return cid


STATES: dict[str, Setup] = {
    "busy": _busy,
    "idle": _idle,
    "stored": _stored,
    "live but unsaved": _live_unsaved,
}


def _refusals(service: ConversationService, cid: str) -> list[str]:
    """Every door a foreign user might try, and what each answered."""
    mallory = BasicThinker("mallory")
    mallory.set_conversation_id(cid)
    answers = []
    start = time.monotonic()
    for obtain in (
        lambda: service.obtain_conversation(None, mallory).get(timeout=5),
        lambda: service.obtain_conversation(cid, mallory, must_exist=False).get(timeout=5),
        lambda: service.force_release(cid, "mallory"),
        lambda: service.remove_conversation(cid, "mallory"),
    ):
        with pytest.raises(PermissionError) as refused:
            obtain()
        answers.append(str(refused.value))
    assert time.monotonic() - start < 1.0  # at once: never queued behind the owner
    assert service.owning_thinker(cid, "mallory") is None
    return answers


@pytest.mark.parametrize("state", list(STATES))
def test_a_foreign_user_is_refused_at_once_and_alike_in_every_state(
    service: ConversationService, state: str
) -> None:
    cid = STATES[state](service)
    answers = _refusals(service, cid)
    assert set(answers) == {f"User mallory does not own conversation {cid}"}
    assert all("secret" not in a and "BasicThinker-" not in a.replace(cid, "") for a in answers)


def test_a_foreign_remove_of_a_live_unsaved_conversation_changes_nothing(
    service: ConversationService,
) -> None:
    alice = BasicThinker("alice")
    cid = alice.mint_conversation_id()
    context = service.obtain_conversation(None, alice).get(timeout=5)
    context.add_user_message("kept")
    service.release(alice, retain=60)
    with pytest.raises(PermissionError):
        service.remove_conversation(cid, "mallory")
    again = BasicThinker("alice")
    again.set_conversation_id(cid)
    assert [
        m.raw_content for m in service.obtain_conversation(None, again).get(timeout=5).messages
    ] == ["kept"]


def test_a_delete_through_the_store_forgets_the_warm_actor_and_the_cache(
    service: ConversationService,
) -> None:
    cid = _idle(service)
    assert service.get_stats().total == 1
    assert isinstance(service.store, LmdbStore)
    assert service.store.delete(cid, "alice")  # not through the service
    assert service.get_stats().total == 0
    assert service.session is not None and service.session.get(cid, "alice") is None
    again = BasicThinker("alice")
    again.set_conversation_id(cid)
    with pytest.raises(ConversationUnavailableError, match="no store holds it"):
        service.obtain_conversation(None, again).get(timeout=5)


def test_a_delete_of_an_owned_conversation_fails_the_owners_next_save_and_is_not_served_again(
    service: ConversationService,
) -> None:
    alice = BasicThinker("alice")
    cid = _busy_with(service, alice)
    context = service.obtain_conversation(None, alice).get(timeout=5)
    activation = service._live[cid]
    assert service.store is not None and service.store.delete(cid, "alice")
    context.add_user_message("after the delete")
    with pytest.raises(LookupError):
        service.save_conversation(context, alice)
    service.release(alice, retain=60)
    activation.actor_stopped.wait(timeout=5)
    assert not activation.is_alive()  # the doomed activation stopped at its owner's release
    again = BasicThinker("alice")
    again.set_conversation_id(cid)
    with pytest.raises(ConversationUnavailableError):
        service.obtain_conversation(None, again).get(timeout=5)
