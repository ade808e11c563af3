"""The service saves a boundary that only adds as an append where the store takes one, and
everything else whole; the session cache holds what a whole save would have left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parlour.actors import Agent, BasicThinker, ConversationService
from parlour.runtime import Depth, IncomingMessage, OutputSize, ScriptedClient
from parlour.runtime.errors import StaleVersionError
from parlour.runtime.snapshots import encode_snapshot
from parlour.stores import LmdbStore, MemorySessionCache


class Counted(LmdbStore):
    """LmdbStore counting how each save came."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    def save_context(self, *args: Any, **kwargs: Any) -> int:
        self.calls.append("whole")
        return super().save_context(*args, **kwargs)

    def save_context_later(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("whole later")
        return super().save_context_later(*args, **kwargs)

    def append_context(self, *args: Any, **kwargs: Any) -> int:
        self.calls.append("append")
        return super().append_context(*args, **kwargs)

    def append_context_later(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("append later")
        return super().append_context_later(*args, **kwargs)


def test_turns_that_only_add_are_appends_and_an_edit_is_saved_whole(tmp_path: Path) -> None:
    cache, store = MemorySessionCache(), Counted(tmp_path)
    with store, ConversationService(store, cache, cleanup_interval_s=0) as service:
        thinker = BasicThinker("alice")
        cid = thinker.mint_conversation_id()
        context = service.obtain_conversation(None, thinker).get(timeout=5)
        context.add_user_message("Where is my order?")
        service.save_conversation(context, thinker)  # the create
        for turn in range(3):
            context.add_user_message(f"And now? ({turn})")
            service.save_conversation(context, thinker, wait=False)
            context.add_message(IncomingMessage(f"Still on its way ({turn})."))
            service.save_conversation(context, thinker)
        assert store.calls == ["append later", "append"] * 3
        context.messages[1].set_cache(True)  # a change in place: saved whole
        context.add_message(IncomingMessage("One more."))
        service.save_conversation(context, thinker)
        assert store.calls[-1] == "whole"
        context.add_message(IncomingMessage("And again."))
        service.save_conversation(context, thinker)
        assert store.calls[-1] == "append"  # the whole save left a mark of its own
        whole = context.to_snapshot()
        stored, cached = store.load(cid, "alice"), cache.get(cid, "alice")
        assert stored is not None and cached is not None
        assert encode_snapshot(stored) == encode_snapshot(whole) == encode_snapshot(cached)
        service.release(thinker)


def test_a_new_chats_first_answer_is_an_append_its_first_save_naming_the_model(
    tmp_path: Path,
) -> None:
    """The agent binds the conversation as the turn starts, so the user message's save (the
    create) already records the model that answers, and the answer only adds."""
    store = Counted(tmp_path)
    agent = Agent(ScriptedClient(), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
    with store, ConversationService(store, MemorySessionCache(), cleanup_interval_s=0) as service:
        chat = agent.chat(service, user_id="alice")
        chat.send("Hello")
        first = store.load_version(chat.conversation_id, 1, "alice")
        chat.send("Again")
    assert first is not None and first.prior_spec_id == "scripted"
    assert store.calls == ["append"] * 3  # the create is not counted; each save after adds


def test_a_failed_append_forgets_the_mark_and_the_next_save_is_whole(tmp_path: Path) -> None:
    store = Counted(tmp_path)
    with store, ConversationService(store, cleanup_interval_s=0) as service:
        thinker = BasicThinker("alice")
        thinker.mint_conversation_id()
        context = service.obtain_conversation(None, thinker).get(timeout=5)
        context.add_user_message("Hello")
        service.save_conversation(context, thinker)
        context.add_message(IncomingMessage("Hi."))
        store.save_context(context.to_snapshot(), "alice")  # another owner's save, say
        moved = store.load(thinker.conversation_id or "", "alice")
        with pytest.raises(StaleVersionError):
            service.save_conversation(context, thinker)
        assert store.calls[-1] == "append"
        assert context.changes_since_save() is None  # nothing is known of what is stored
        after = store.load(thinker.conversation_id or "", "alice")
        assert moved is not None and after is not None
        assert encode_snapshot(after) == encode_snapshot(moved)  # the refusal wrote nothing


def test_a_chat_per_request_saves_its_turns_as_appends(tmp_path: Path) -> None:
    """A web handler makes a chat per request; every chat of one conversation continues its
    one workflow (the conversation stores its owner's workflow id), so a new chat's turn
    only adds and is saved as appends, and after a restart too; each chat's turn reads the
    whole conversation and the store holds each message once."""
    agent = Agent(ScriptedClient(), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
    for run in range(2):  # the second: a new store and service over the same directory
        store = Counted(tmp_path)
        with store, ConversationService(store, cleanup_interval_s=0) as service:
            if run == 0:
                first = agent.chat(service, user_id="alice")
                first.send("Hello.")
                cid = first.conversation_id
            store.calls.clear()
            for turn in range(3):
                chat = agent.chat(service, user_id="alice", conversation_id=cid)
                assert (
                    chat.thinker.workflow_id
                    == agent.chat(service, user_id="alice", conversation_id=cid).thinker.workflow_id
                )
                chat.send(f"Turn {run}.{turn}")
            assert store.calls == ["append"] * 6
            snapshot = store.load(cid, "alice")
            assert snapshot is not None
            said = [m.raw_content for m in snapshot.messages if m.role == "user"]
            assert said == ["Hello.", *[f"Turn {r}.{t}" for r in range(run + 1) for t in range(3)]]


def test_a_restored_history_that_was_repaired_is_saved_whole_at_its_first_save(
    tmp_path: Path,
) -> None:
    """A restore answers a dangling tool call (a process died before its result was
    saved): the history it holds differs from the stored one, so its first save writes it
    whole and the repair is stored; an append would have left the call unanswered on disk."""
    from parlour.runtime import ConversationContext
    from parlour.runtime.blocks import TextBlock, ToolResultBlock, ToolUseBlock

    stored = ConversationContext("c1", user_id="alice", workflow_id="wf-1")
    stored.add_user_message("Where is my order?")
    call = ToolUseBlock(id="toolu_1", name="lookup", input_json="{}")
    stored.add_message(IncomingMessage(blocks=[TextBlock(text="Looking."), call]))
    store = Counted(tmp_path)
    with store, ConversationService(store, cleanup_interval_s=0) as service:
        store.create_context(stored.to_snapshot(), "alice")
        thinker = BasicThinker("alice", workflow_id="wf-1")  # its workflow: nothing else moved
        thinker.set_conversation_id("c1")
        context = service.obtain_conversation(None, thinker).get(timeout=5)
        context.add_user_message("Any news?")
        service.save_conversation(context, thinker)
        service.release(thinker)
        assert store.calls == ["whole"]
        snapshot = store.load("c1", "alice")
        assert snapshot is not None
        results = [b for m in snapshot.messages for b in m.blocks if isinstance(b, ToolResultBlock)]
        assert [r.tool_use_id for r in results] == ["toolu_1"] and results[0].is_error
