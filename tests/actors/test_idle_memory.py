"""What an idle conversation leaves in memory: nothing a host's long-lived objects keep once
no chat holds it."""

from __future__ import annotations

import gc
import weakref

from parlour.actors import Agent, ConversationService
from parlour.runtime import Depth, OutputSize, ScriptedClient


def test_an_agent_keeps_no_ledger_copy_of_a_conversation_no_chat_holds(
    service: ConversationService,
) -> None:
    """A host's agent outlives its chats: the agent's copy of a conversation's ledger goes
    with the last chat on it, and a new chat reads the stored ledger."""
    agent = Agent(ScriptedClient(), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
    chat = agent.chat(service, user_id="ann")
    chat.send("one")
    cid, entries = chat.conversation_id, chat.usage()
    ledger = weakref.ref(agent.ledger(cid))
    del chat
    gc.collect()
    assert ledger() is None
    again = agent.chat(service, user_id="ann", conversation_id=cid)
    assert again.usage() == entries and len(entries) == 1


def test_an_idle_chat_keeps_no_turn_state_once_its_turn_is_over(
    service: ConversationService,
) -> None:
    """What a turn builds to run (its state, its followers' log) goes with the turn: an
    idle chat between its user's messages holds none of it."""
    agent = Agent(ScriptedClient(), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
    chat = agent.chat(service, user_id="ann")
    begin = chat.thinker.begin_turn
    made: list[tuple[int, type]] = []  # a turn state takes no weak reference: by id

    def noted_begin() -> object:
        state = begin()
        made.append((id(state), type(state)))
        return state

    chat.thinker.begin_turn = noted_begin  # type: ignore[method-assign,assignment]
    for text in ("one", "two"):
        chat.send(text)
    gc.collect()
    assert len(made) == 2 and chat.thinker.turn is None
    alive = {(id(o), type(o)) for o in gc.get_objects() if type(o) is made[0][1]}
    assert alive.isdisjoint(made)


def test_an_agents_ledgers_share_one_lock_and_hold_only_their_entries(
    service: ConversationService,
) -> None:
    """A host keeps one ledger per live conversation: the ledgers of many chats share the
    process's one lock, and each holds the entries of its own conversation alone."""
    agent = Agent(ScriptedClient(), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
    chats = [agent.chat(service, user_id=f"u{i}") for i in range(3)]
    for chat in chats:
        chat.send("hello")
    ledgers = [agent.ledger(chat.conversation_id) for chat in chats]
    assert len({id(ledger._lock) for ledger in ledgers}) == 1
    assert not hasattr(ledgers[0], "__dict__")
    assert [len(chat.usage()) for chat in chats] == [1, 1, 1]
