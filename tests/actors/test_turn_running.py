"""A follower tells "nothing runs" from "not yours": ``join`` ends at once for both, and
``turn_running`` answers False for the user's own idle conversation and refuses another
user's with one refusal, the same whether it is running, idle, live, stored or unsaved."""

from __future__ import annotations

import threading

import pytest

from parlour.actors import Agent, BasicThinker, ConversationService
from parlour.runtime import Depth, OutputSize, ScriptedClient

from .agent_helpers import calls


def refusal(service: ConversationService, cid: str) -> str:
    with pytest.raises(PermissionError) as caught:
        service.turn_running(cid, "mallory")
    return str(caught.value)


def test_an_own_idle_conversation_is_not_running_and_another_users_is_refused_alike(
    service: ConversationService,
) -> None:
    started, opened = threading.Event(), threading.Event()

    def gate() -> str:
        """Waits until the test opens it."""
        started.set()
        assert opened.wait(10)
        return "opened"

    agent = Agent(
        ScriptedClient([calls(("gate", {}))]),
        tools=[gate],
        objective="Answer.",
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
    )
    chat = agent.chat(service, user_id="alice")
    cid = chat.conversation_id
    assert service.turn_running(cid, "alice") is False  # minted, nothing stored or live
    assert service.turn_running(cid, "mallory") is False  # nobody's yet: the id is free
    turn = threading.Thread(target=chat.send, args=("Open it",))
    turn.start()
    assert started.wait(10)
    assert service.turn_running(cid, "alice") is True
    refusals = {refusal(service, cid)}  # running
    opened.set()
    turn.join(10)
    assert service.turn_running(cid, "alice") is False
    refusals.add(refusal(service, cid))  # live and idle
    assert service.evict_conversation(cid)
    refusals.add(refusal(service, cid))  # stored only
    assert refusals == {f"User mallory does not own conversation {cid}"}


def test_a_live_conversation_never_saved_is_refused_to_another_user(
    service: ConversationService,
) -> None:
    owner = BasicThinker("alice")
    cid = owner.mint_conversation_id()
    service.obtain_conversation(None, owner).get(timeout=5)
    try:
        assert service.turn_running(cid, "alice") is False  # owned by a thinker hosting none
        assert refusal(service, cid) == f"User mallory does not own conversation {cid}"
    finally:
        service.release(owner)
