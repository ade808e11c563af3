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
