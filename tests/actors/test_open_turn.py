"""The open-turn record: each boundary of a turn is saved with the step it completed and the
turn's id, in the boundary's own save, on every store; ``Chat.interrupted`` reads it; a
record saved before records existed still loads and is judged by its last message; a
resumed turn keeps the id and replays its durable steps to a follower that joins it."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, cast

import pytest

from parlour.actors import (
    Agent,
    ConversationService,
    Recovered,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnDone,
)
from parlour.runtime import (
    ConversationContext,
    Depth,
    IncomingMessage,
    LLMResponse,
    OpenTurn,
    OutgoingMessage,
    OutputSize,
    PreparedConversation,
    ScriptedClient,
    ToolContext,
    TurnStep,
)
from parlour.runtime.blocks import TextBlock
from parlour.runtime.errors import UncorrectableLLMError
from parlour.stores import LmdbStore, PersistentStore

from .agent_helpers import calls
from .kills import each_store

USER = "alice"


store = each_store  # memory, LMDB and PostgreSQL


def _record(store: PersistentStore, cid: str) -> OpenTurn | None:
    snapshot = store.load(cid, USER)
    assert snapshot is not None
    return snapshot.turn


def test_each_boundary_of_a_turn_is_saved_with_its_step_and_one_turn_id(
    store: PersistentStore,
) -> None:
    seen: dict[str, Any] = {}
    cid = ""

    def ask(prepared: PreparedConversation) -> LLMResponse:
        seen["model"] = _record(store, cid)  # what is durable as the model is called
        return calls(("look", {"what": "x"}))

    def answer(prepared: PreparedConversation) -> LLMResponse:
        seen["answer"] = _record(store, cid)
        return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Found it.")])

    def look(what: str, context: ToolContext[Any]) -> str:
        """Look something up.

        Args:
            what: what to look up.
        """
        seen["tool"] = _record(store, cid)
        seen["context_turn"] = context.turn_id
        return "here"

    agent = Agent(
        ScriptedClient([ask, answer, "Again."]),
        tools=[look],
        output=OutputSize.COMPACT,
        depth=Depth.IMMEDIATE,
    )
    with ConversationService(store) as service:
        chat = agent.chat(service, user_id=USER)
        cid = chat.conversation_id
        events = list(chat.stream("Find x"))
        done = _record(store, cid)
        chat.send("And again?")
        second = _record(store, cid)
    turn = seen["model"].id
    assert turn and {e.turn for e in events} == {turn} and seen["context_turn"] == turn
    assert seen["model"] == OpenTurn(id=turn, step=TurnStep.USER, start=0)
    assert seen["tool"] == OpenTurn(id=turn, step=TurnStep.ANSWER, start=0)
    assert seen["answer"] == OpenTurn(
        id=turn, step=TurnStep.TOOLS, start=0, answered=("call_1_look",)
    )
    assert done == OpenTurn(id=turn, step=TurnStep.DONE, start=0)
    assert second is not None and second.id != turn
    assert second == OpenTurn(id=second.id, step=TurnStep.DONE, start=4)


def _failing(_: PreparedConversation) -> LLMResponse:
    raise UncorrectableLLMError("The model is down.")


def test_a_failed_turn_leaves_its_record_open_and_its_resume_keeps_the_turn_id(
    store: PersistentStore,
) -> None:
    quiet: dict[str, Any] = {"output": OutputSize.COMPACT, "depth": Depth.IMMEDIATE}
    with ConversationService(store) as service:
        chat = Agent(ScriptedClient([_failing]), **quiet).chat(service, user_id=USER)
        with pytest.raises(UncorrectableLLMError):
            chat.send("Are you there?")
        opened = _record(store, chat.conversation_id)
        assert opened is not None and opened.step is TurnStep.USER and chat.interrupted
        again = Agent(ScriptedClient(["Yes."]), **quiet).chat(
            service, user_id=USER, conversation_id=chat.conversation_id
        )
        reply = again.resume()
    assert reply.text == "Yes." and reply.recovered == Recovered(rerun=[], interrupted=[])
    assert _record(store, chat.conversation_id) == OpenTurn(  # the same turn, continued
        id=opened.id, step=TurnStep.DONE, start=0
    )
    assert not again.interrupted


def _old_record(store: PersistentStore, last_is_answer: bool) -> str:
    """A conversation saved as a parlour from before records saved it: no open-turn record."""
    context = ConversationContext(str(uuid.uuid4()), user_id=USER)
    context.add_message(OutgoingMessage("Hi", [TextBlock(text="Hi")]))
    if last_is_answer:
        context.add_message(IncomingMessage(blocks=[TextBlock(text="Hello.")]))
    store.create_context(context.to_snapshot(), USER)
    return str(context.conversation_id)


def test_a_record_saved_before_open_turn_records_loads_and_is_judged_by_its_last_message(
    store: PersistentStore,
) -> None:
    agent = Agent(ScriptedClient(["Hello."]), output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)
    with ConversationService(store) as service:
        answered = agent.chat(service, user_id=USER, conversation_id=_old_record(store, True))
        cut = agent.chat(service, user_id=USER, conversation_id=_old_record(store, False))
        assert _record(store, answered.conversation_id) is None
        assert not answered.interrupted and cut.interrupted
        assert cut.resume().text == "Hello."
        record = _record(store, cut.conversation_id)
    assert record is not None and record.step is TurnStep.DONE and not cut.interrupted


def test_lmdb_reads_a_header_written_without_the_record_field(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "db") as store:
        cid = _old_record(store, last_is_answer=False)
    import lmdb

    env = lmdb.open(str(tmp_path / "db"), max_dbs=32, subdir=True)
    heads = env.open_db(b"heads")
    with env.begin(write=True) as txn:
        for key, value in txn.cursor(db=heads):
            assert b'"turn":null' in value
            txn.put(key, value.replace(b',"turn":null', b""), db=heads)  # as before the field
    env.close()
    with LmdbStore(tmp_path / "db") as store:
        snapshot = store.load(cid, USER)
    assert snapshot is not None and snapshot.turn is None and len(snapshot.messages) == 1


def test_a_follower_joining_a_resumed_turn_after_a_restart_gets_its_durable_steps_then_live(
    tmp_path: Path,
) -> None:
    """A turn whose second model call failed is resumed by a fresh service on the same store
    (a restart); its model call waits while followers join from the start and from a seq."""
    quiet: dict[str, Any] = {"output": OutputSize.COMPACT, "depth": Depth.IMMEDIATE}

    def look(what: str) -> str:
        """Look something up.

        Args:
            what: what to look up.
        """
        return "here"

    with LmdbStore(tmp_path / "db") as store:
        with ConversationService(store) as service:
            first = Agent(
                ScriptedClient([calls(("look", {"what": "x"})), _failing]), tools=[look], **quiet
            )
            chat = first.chat(service, user_id=USER)
            with pytest.raises(UncorrectableLLMError):
                chat.send("Find x")
        turn = _record(store, chat.conversation_id)
        assert turn is not None and turn.step is TurnStep.TOOLS
        entered, go = threading.Event(), threading.Event()

        def slow(prepared: PreparedConversation) -> LLMResponse:
            entered.set()
            assert go.wait(10)
            return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Found it.")])

        with ConversationService(store) as service:
            again = Agent(ScriptedClient([slow]), tools=[look], **quiet).chat(
                service, user_id=USER, conversation_id=chat.conversation_id
            )
            outcome: list[Any] = []
            runner = threading.Thread(target=lambda: outcome.append(again.resume()))
            runner.start()
            assert entered.wait(10)

            async def first_after(after: int) -> Any:
                joined = cast(
                    AsyncGenerator[Any, None], service.join(chat.conversation_id, USER, after=after)
                )
                try:
                    return await joined.__anext__()
                finally:
                    await joined.aclose()

            async def follow() -> list[Any]:
                joined = service.join(chat.conversation_id, USER, after=0)
                head = [await joined.__anext__()]
                go.set()
                return head + [e async for e in joined]

            from_two = asyncio.run(first_after(2))
            whole = asyncio.run(follow())
            runner.join(10)
    assert [e.seq for e in whole] == list(range(1, len(whole) + 1))  # no loss, no duplicate
    assert {e.turn for e in whole} == {turn.id}
    replay = [type(e) for e in whole[:4]]
    assert replay == [TextDelta, ToolCallStarted, ToolCallFinished, Recovered]
    assert whole[2].content == "here" and whole[1].name == "look"
    assert isinstance(whole[-1], TurnDone) and whole[-1].reply == outcome[0]
    assert from_two == whole[2]


def test_export_and_import_carry_an_open_turn_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from parlour.actors.app._cli import main

    data, exported = tmp_path / "db", tmp_path / "export.json"
    with LmdbStore(data) as store, ConversationService(store) as service:
        chat = Agent(
            ScriptedClient([_failing]), output=OutputSize.COMPACT, depth=Depth.IMMEDIATE
        ).chat(service, user_id=USER)
        with pytest.raises(UncorrectableLLMError):
            chat.send("Are you there?")
        record = _record(store, chat.conversation_id)
    assert record is not None and record.open
    cid = chat.conversation_id
    assert (
        main(
            ["export", USER, cid, "--versions", "--output", str(exported), "--data-dir", str(data)]
        )
        == 0
    )
    assert main(["import", "bob", str(exported), "--as-new", "--data-dir", str(data)]) == 0
    capsys.readouterr()
    with LmdbStore(data, readonly=True) as store:
        [copy] = store.list_conversations("bob")
        imported = store.load(copy.conversation_id, "bob")
        versions = store.get_version_history(copy.conversation_id, "bob")
        original = store.get_version_history(cid, USER)
    assert imported is not None and imported.turn == record
    assert len(versions) == len(original)  # the record added no version of its own
