"""A conversation's title: its first human utterance, app-authored messages skipped."""

from __future__ import annotations

from parlour.runtime import (
    ConversationContext,
    OutgoingMessage,
)


def test_the_first_utterance_skips_app_authored_messages_and_titles_the_conversation() -> None:
    c = ConversationContext("c1")
    assert c.title == "Untitled Conversation"
    c.add_message(OutgoingMessage("PROJECT: Acme Demo (ID: 201)…", app_authored=True))
    assert c.first_user_utterance() is None
    c.add_user_message("Are you working?")
    assert c.first_user_utterance() == "Are you working?" and c.title == "Are you working?"
    long = ConversationContext("c2")
    long.add_user_message("x" * 60)
    assert long.title == "x" * 50 + "..."
