"""Approvals: a tool call that needs a person's approval parks the turn; the pending call is
conversation state (read from the store by any chat, any process, after a restart); each
decision is applied once through the version fence; the last one goes on with the turn."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from parlour.actors import (
    Agent,
    AlreadyDecidedError,
    ApprovalDecided,
    ApprovalRequested,
    ApprovalsPendingError,
    BasicThinker,
    ConversationService,
    NoSuchApprovalError,
    PendingApproval,
    TurnDone,
)
from parlour.runtime import (
    Depth,
    LLMClient,
    LLMResponse,
    OutputSize,
    PreparedConversation,
    ScriptedClient,
    ToolContext,
    TurnStep,
    dangling_calls,
    tool_from_function,
)
from parlour.runtime.blocks import TextBlock, ToolResultBlock
from parlour.runtime.providers import AnthropicClient, BedrockClient, OpenAIClient
from parlour.runtime.testing import (
    ConverseStreamMock,
    MockProvider,
    anthropic_message,
    converse_stream_events,
    dummy_bedrock_client,
    fake_spec,
    mock_anthropic_sdk,
    mock_openai_sdk,
    openai_completion,
)
from parlour.stores import LmdbStore, PersistentStore, PostgresStore

from .agent_helpers import calls
from .kills import each_store, killed_after, postgres_schema

USER = "alice"
QUIET: dict[str, Any] = {"output": OutputSize.COMPACT, "depth": Depth.IMMEDIATE}


store = each_store  # memory, LMDB and PostgreSQL


class Tools:
    """``lookup`` (needs no approval) and ``delete_order`` (declared ``needs_approval``),
    each noting its runs."""

    def __init__(self, during_lookup: Callable[[], None] | None = None) -> None:
        self.runs: list[str] = []

        def lookup(order_id: str) -> str:
            """Look an order up.

            Args:
                order_id: the order.
            """
            self.runs.append(f"lookup {order_id}")
            if during_lookup is not None:
                during_lookup()
            return f"order {order_id} exists"

        def delete_order(order_id: str) -> str:
            """Delete an order.

            Args:
                order_id: the order.
            """
            self.runs.append(f"delete {order_id}")
            return f"order {order_id} deleted"

        self.all: list[Any] = [lookup, tool_from_function(delete_order, needs_approval=True)]


def _agent(client: LLMClient, tools: Tools, **kwargs: Any) -> Agent:
    return Agent(client, tools=tools.all, **QUIET, **kwargs)


ASK = calls(("lookup", {"order_id": "42"}), ("delete_order", {"order_id": "42"}))
PENDING = PendingApproval(
    call_id="call_2_delete_order", tool="delete_order", arguments='{"order_id": "42"}'
)


def _version(store: PersistentStore, cid: str) -> int:
    snapshot = store.load(cid, USER)
    assert snapshot is not None
    return snapshot.stored_version


@pytest.mark.parametrize("path", ["threads", "asyncio"])
def test_a_call_needing_approval_parks_the_turn_and_its_approval_finishes_the_turn(
    store: PersistentStore, path: str
) -> None:
    tools = Tools()
    with ConversationService(store) as service:
        chat = _agent(ScriptedClient([ASK, "Deleted it."]), tools).chat(service, user_id=USER)
        if path == "threads":
            events = list(chat.stream("Delete order 42"))
            assert isinstance(events[-1], TurnDone)
            parked = events[-1].reply
            assert events[-2] == ApprovalRequested(
                pending=(PENDING,), seq=events[-2].seq, turn=events[-2].turn
            )
        else:
            parked = asyncio.run(chat.asend("Delete order 42"))
        assert parked.pending == (PENDING,) and tools.runs == ["lookup 42"]
        cid = chat.conversation_id
        stored = store.load(cid, USER)
        assert stored is not None and stored.turn is not None
        assert stored.turn.step == TurnStep.APPROVAL and stored.turn.answered == ("call_1_lookup",)
    with ConversationService(store) as later:  # a restart: the pending call is stored state
        again = _agent(ScriptedClient(["Deleted it."]), tools).chat(
            later, user_id=USER, conversation_id=cid
        )
        assert again.pending == [PENDING] and not again.interrupted
        before = _version(store, cid)
        with pytest.raises(ApprovalsPendingError, match="delete_order call_2_delete_order"):
            again.send("Something else?")
        with pytest.raises(ApprovalsPendingError):
            again.resume()
        assert _version(store, cid) == before  # refused: nothing stored
        if path == "threads":
            reply = again.approve("call_2_delete_order")
        else:
            reply = asyncio.run(again.aapprove("call_2_delete_order"))
        assert reply.text == "Deleted it." and reply.pending == ()
        assert tools.runs == ["lookup 42", "delete 42"]
        assert again.pending == [] and not again.interrupted
    final = store.load(cid, USER)
    assert final is not None and final.turn is not None and final.turn.step == TurnStep.DONE
    assert dangling_calls(final.messages) == []
    results = [b for m in final.messages for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert [(r.tool_use_id, r.content) for r in results] == [
        ("call_1_lookup", "order 42 exists"),
        ("call_2_delete_order", "order 42 deleted"),
    ]


OFFER = "And tell me when it is gone."


@pytest.mark.parametrize("path", ["threads", "asyncio"])
def test_an_offer_made_before_the_turn_parks_is_stored_and_answered_after_the_decided_calls(
    store: PersistentStore, path: str
) -> None:
    """The offer arrives while the free call runs (the answer and its pending call are
    saved, the turn has not parked yet): it stays on the stored record through a restart,
    an offer to the parked conversation is refused, and the last decision adds it after
    the calls' results, where the model answers it."""
    with ConversationService(store) as service:
        offered: list[bool] = []
        tools = Tools(lambda: offered.append(service.offer(cid, USER, OFFER)))
        chat = _agent(ScriptedClient([ASK]), tools).chat(service, user_id=USER)
        cid = chat.conversation_id
        if path == "threads":
            parked = chat.send("Delete order 42")
        else:
            parked = asyncio.run(chat.asend("Delete order 42"))
        assert offered == [True] and parked.pending == (PENDING,)
        assert not service.offer(cid, USER, "too late")  # parked: no turn takes it
    stored = store.load(cid, USER)
    assert stored is not None and stored.turn is not None
    assert stored.turn.step == TurnStep.APPROVAL and stored.turn.offers == (OFFER,)
    assert OFFER not in str(stored.messages)  # not a message yet: calls wait for a decision
    asked: list[PreparedConversation] = []

    def answer(prepared: PreparedConversation) -> LLMResponse:
        asked.append(prepared)
        return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Deleted; it is gone.")])

    with ConversationService(store) as later:  # a restart: the offer is stored state
        again = _agent(ScriptedClient([answer]), tools).chat(
            later, user_id=USER, conversation_id=cid
        )
        if path == "threads":
            reply = again.approve("call_2_delete_order")
        else:
            reply = asyncio.run(again.aapprove("call_2_delete_order"))
    assert reply.text == "Deleted; it is gone." and tools.runs == ["lookup 42", "delete 42"]
    final = store.load(cid, USER)
    assert final is not None and final.turn is not None
    assert final.turn.step == TurnStep.DONE and final.turn.offers == ()
    roles = [(m.role, [type(b).__name__ for b in m.blocks]) for m in final.messages]
    assert roles == [
        ("user", ["TextBlock"]),
        ("assistant", ["TextBlock", "ToolUseBlock", "ToolUseBlock"]),
        ("user", ["ToolResultBlock", "ToolResultBlock"]),  # both results, then the offer
        ("user", ["TextBlock"]),
        ("assistant", ["TextBlock"]),
    ]
    assert final.messages[3].blocks[0].text == OFFER  # type: ignore[union-attr]
    assert dangling_calls(final.messages) == [] and len(asked) == 1
    assert OFFER in str(asked[0].turns[-1].blocks)  # the model was asked with it


def test_a_decision_finds_its_call_when_the_stored_start_points_past_it(
    store: PersistentStore,
) -> None:
    """A record saved before compactions moved turns' starts may point past the parked
    call: the decision still finds it, runs it once and the turn ends with no call left
    without its result."""
    tools = Tools()
    with ConversationService(store) as service:
        chat = _agent(ScriptedClient([ASK]), tools).chat(service, user_id=USER)
        assert chat.send("Delete order 42").pending == (PENDING,)
        cid = chat.conversation_id
    parked = store.load(cid, USER)
    assert parked is not None and parked.turn is not None
    past = msgspec.structs.replace(parked.turn, start=len(parked.messages) + 3)
    store.save_context(msgspec.structs.replace(parked, turn=past), USER)
    with ConversationService(store) as later:
        again = _agent(ScriptedClient(["Deleted it."]), tools).chat(
            later, user_id=USER, conversation_id=cid
        )
        assert again.approve(PENDING.call_id).text == "Deleted it."
    final = store.load(cid, USER)
    assert final is not None and dangling_calls(final.messages) == []
    assert tools.runs == ["lookup 42", "delete 42"]


def test_a_denial_reaches_the_model_with_its_reason_and_deny_all_frees_a_new_message(
    tmp_path: Path,
) -> None:
    tools = Tools()
    asked: list[PreparedConversation] = []

    def answer(prepared: PreparedConversation) -> LLMResponse:
        asked.append(prepared)
        return LLMResponse(model_id="scripted", blocks=[])

    two = calls(("delete_order", {"order_id": "1"}), ("delete_order", {"order_id": "2"}))
    with LmdbStore(tmp_path / "db") as store, ConversationService(store) as service:
        chat = _agent(ScriptedClient([two, "Kept both.", "Hi."]), tools).chat(service, user_id=USER)
        assert len(chat.send("Delete 1 and 2").pending) == 2
        first = chat.deny("call_1_delete_order", "order 1 is a customer's")
        assert [p.call_id for p in first.pending] == ["call_2_delete_order"]
        assert first.text == "" and chat.pending == list(first.pending)  # no model call yet
        with pytest.raises(AlreadyDecidedError):
            chat.approve("call_1_delete_order")
        last = chat.deny_all("not today")
        assert last.text == "Kept both." and last.pending == () and tools.runs == []
        assert chat.send("Hello").text == "Hi."
        stored = store.load(chat.conversation_id, USER)
    assert stored is not None
    denials = {
        b.tool_use_id: b.content
        for m in stored.messages
        for b in m.blocks
        if isinstance(b, ToolResultBlock)
    }
    assert denials == {
        "call_1_delete_order": "A person denied this call to delete_order: order 1 is a customer's",
        "call_2_delete_order": "A person denied this call to delete_order: not today",
    }


def test_each_decision_is_an_event_of_its_turn_for_the_decider_and_for_a_joiner(
    tmp_path: Path,
) -> None:
    entered, release, joined = threading.Event(), threading.Event(), threading.Event()
    runs: list[str] = []

    def delete_order(order_id: str) -> str:
        """Delete an order.

        Args:
            order_id: the order.
        """
        runs.append(order_id)
        entered.set()
        release.wait(30)
        return f"order {order_id} deleted"

    tool = tool_from_function(delete_order, needs_approval=True)
    two = calls(("delete_order", {"order_id": "1"}), ("delete_order", {"order_id": "2"}))
    seen: list[Any] = []
    with LmdbStore(tmp_path / "db") as store, ConversationService(store) as service:
        chat = Agent(ScriptedClient([two, "Done."]), tools=[tool], **QUIET).chat(
            service, user_id=USER
        )
        chat.send("Delete 1 and 2")
        cid = chat.conversation_id

        def join() -> None:
            async def follow() -> None:
                async for event in service.join(cid, USER, after=0):
                    seen.append(event)
                    joined.set()

            entered.wait(30)  # the approved call runs: the turn goes on, and waits here
            asyncio.run(follow())

        def go_on() -> None:
            joined.wait(30)
            release.set()

        async def decide(call_id: str, approved: bool, reason: str = "") -> list[Any]:
            return [e async for e in chat.astream_decision(call_id, approved, reason)]

        first = asyncio.run(decide("call_1_delete_order", False, "keep it"))
        helpers = [threading.Thread(target=join), threading.Thread(target=go_on)]
        for t in helpers:
            t.start()
        second = asyncio.run(decide("call_2_delete_order", True))
        for t in helpers:
            t.join(30)
    assert [type(e) for e in first] == [ApprovalDecided, TurnDone]
    assert (first[0].call_id, first[0].approved, first[0].reason) == (
        "call_1_delete_order",
        False,
        "keep it",
    )
    assert [p.call_id for p in first[-1].reply.pending] == ["call_2_delete_order"]
    assert isinstance(second[0], ApprovalDecided) and second[0].approved
    assert (second[0].call_id, second[0].tool) == ("call_2_delete_order", "delete_order")
    assert isinstance(second[-1], TurnDone) and second[-1].reply.text == "Done."
    assert seen[0] == second[0] and seen[-1] == second[-1]  # the joiner saw the decision
    assert runs == ["2"]


def test_another_users_live_unsaved_conversation_is_refused_by_pending_and_history_alike(
    tmp_path: Path,
) -> None:
    tools = Tools()
    with LmdbStore(tmp_path / "db") as store, ConversationService(store) as service:
        owner = BasicThinker(USER)
        cid = owner.mint_conversation_id()
        service.obtain_conversation(None, owner).get(timeout=5)  # live, held, never saved
        stranger = _agent(ScriptedClient([]), tools).chat(
            service, user_id="mallory", conversation_id=cid
        )
        refusal = f"User mallory does not own conversation {cid}"
        for state in ("held", "idle"):
            with pytest.raises(PermissionError, match=f"^{refusal}$"):
                _ = stranger.pending  # a read that must refuse
            with pytest.raises(PermissionError, match=f"^{refusal}$"):
                stranger.history()
            with pytest.raises(PermissionError, match=f"^{refusal}$"):
                stranger.approve("call_1")
            if state == "held":
                service.release(owner, retain=60)  # idle in memory, still never saved
        never = _agent(ScriptedClient([]), tools).chat(
            service, user_id="mallory", conversation_id=f"{cid}-unused"
        )
        assert never.pending == [] and never.history() == []  # an id nobody holds
        assert store.load(cid, USER) is None  # the stranger stored nothing


def test_hostile_decisions_are_refused_with_a_clear_error_and_store_nothing(
    tmp_path: Path,
) -> None:
    tools = Tools()
    with LmdbStore(tmp_path / "db") as store, ConversationService(store) as service:
        chat = _agent(ScriptedClient(["Hello.", ASK]), tools).chat(service, user_id=USER)
        chat.send("Hi")
        cid = chat.conversation_id
        with pytest.raises(NoSuchApprovalError, match="no tool call waiting"):
            chat.approve("call_2_delete_order")  # none pending
        chat.send("Delete order 42")
        version = _version(store, cid)
        with pytest.raises(NoSuchApprovalError, match="no tool call 'nope'"):
            chat.deny("nope", "no")
        with pytest.raises(NoSuchApprovalError):
            chat.approve("call_1_lookup")  # a call, but not one waiting
        for bad in ("x" * 10_000_000, "\ud800 lone", 42):
            with pytest.raises(ValueError):
                chat.deny("call_2_delete_order", bad)  # type: ignore[arg-type]
        for bad_id in ("", "\x00" * 300, "\udfff"):
            with pytest.raises(ValueError):
                chat.approve(bad_id)
        assert _version(store, cid) == version and chat.pending == [PENDING]
        mallory = _agent(ScriptedClient([]), tools).chat(
            service, user_id="mallory", conversation_id=cid
        )
        for attempt in (lambda: mallory.pending, lambda: mallory.approve(PENDING.call_id)):
            with pytest.raises(PermissionError):
                attempt()
        assert _version(store, cid) == version and tools.runs == ["lookup 42"]


def test_an_agent_predicate_sees_the_call_and_its_context(tmp_path: Path) -> None:
    tools = Tools()
    seen: list[tuple[str, str, str]] = []

    def big(name: str, arguments: str, context: ToolContext[Any]) -> bool:
        seen.append((name, context.call_id, context.user_id))
        return name == "lookup" and json.loads(arguments)["order_id"] == "42"

    plain = [t for t in tools.all if not hasattr(t, "needs_approval")]
    with LmdbStore(tmp_path / "db") as store, ConversationService(store) as service:
        agent = Agent(
            ScriptedClient([calls(("lookup", {"order_id": "42"})), "ok"]),
            tools=plain,
            needs_approval=big,
            **QUIET,
        )
        chat = agent.chat(service, user_id=USER)
        assert [p.call_id for p in chat.send("Look 42 up").pending] == ["call_1_lookup"]
        assert seen == [("lookup", "call_1_lookup", USER)] and tools.runs == []
        assert chat.approve("call_1_lookup").text == "ok"
    assert tools.runs == ["lookup 42"]
    with pytest.raises(ValueError, match="needs_approval names nothing_here"):
        Agent(ScriptedClient([]), tools=plain, needs_approval={"nothing_here"}, **QUIET)


def test_two_deciders_of_one_call_on_lmdb_threads_apply_it_once(tmp_path: Path) -> None:
    tools = Tools()
    with LmdbStore(tmp_path / "db") as store:
        for round_ in range(12):
            with ConversationService(store) as one, ConversationService(store) as two:
                chat = _agent(ScriptedClient([ASK]), tools).chat(one, user_id=USER)
                chat.send("Delete order 42")
                cid = chat.conversation_id
                deciders = [
                    _agent(ScriptedClient(["Done."]), tools).chat(
                        service, user_id=USER, conversation_id=cid
                    )
                    for service in (one, two)
                ]
                outcomes: list[Any] = []
                gate = threading.Barrier(2)

                def decide(
                    chat: Any,
                    approve: bool,
                    gate: threading.Barrier = gate,
                    outcomes: list[Any] = outcomes,
                ) -> None:
                    gate.wait()
                    try:
                        if approve:
                            outcomes.append(chat.approve(PENDING.call_id))
                        else:
                            outcomes.append(chat.deny(PENDING.call_id, "no"))
                    except AlreadyDecidedError as exc:
                        outcomes.append(exc)

                threads = [
                    threading.Thread(target=decide, args=(c, round_ % 2 == 0 or i == 0))
                    for i, c in enumerate(deciders)
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
                refused = [o for o in outcomes if isinstance(o, AlreadyDecidedError)]
                assert len(outcomes) == 2 and len(refused) == 1, outcomes
                stored = store.load(cid, USER)
                assert stored is not None and stored.turn is not None
                assert len(stored.turn.decisions) == 1 and stored.turn.step == TurnStep.DONE
    deletes = [r for r in tools.runs if r.startswith("delete")]
    assert len(deletes) <= 12  # never twice for one call: at most once a round


@pytest.mark.slow
def test_two_threads_deciding_the_same_calls_thousands_of_times_on_lmdb_apply_each_once(
    tmp_path: Path,
) -> None:
    """Two services on one LMDB store, a thread each, deciding the same call of a fresh
    parked conversation each round (approve against approve, or against deny): one wins and
    its decision is the one stored, the other is told AlreadyDecidedError; the call's tool
    runs only when the stored decision approves it, and then once."""
    rounds = 2000
    deleted: list[str] = []

    def delete_order(order_id: str) -> str:
        """Delete an order.

        Args:
            order_id: the order.
        """
        deleted.append(order_id)
        return "deleted"

    tool = tool_from_function(delete_order, needs_approval=True)
    orders = [calls(("delete_order", {"order_id": str(n)})) for n in range(rounds)]
    asker = Agent(ScriptedClient(orders), tools=[tool], **QUIET)
    decider = Agent(ScriptedClient(["Done."] * (2 * rounds)), tools=[tool], **QUIET)
    call_id = "call_1_delete_order"
    with (
        LmdbStore(tmp_path / "db") as store,
        ConversationService(store) as one,
        ConversationService(store) as two,
    ):
        cids: list[str] = []
        for _ in range(rounds):
            chat = asker.chat(one, user_id=USER)
            chat.send("Delete it")
            cids.append(chat.conversation_id)
        outcomes: list[list[Any]] = [[], []]
        gates = [threading.Barrier(2) for _ in range(rounds)]

        def decide(side: int, service: ConversationService) -> None:
            for n, cid in enumerate(cids):
                chat = decider.chat(service, user_id=USER, conversation_id=cid)
                approve = side == 0 or n % 2 == 0  # odd rounds: an approval against a denial
                gates[n].wait(30)
                try:
                    reply = chat.approve(call_id) if approve else chat.deny(call_id, "no")
                    outcomes[side].append(("won", approve, reply.text))
                except AlreadyDecidedError:
                    outcomes[side].append(("refused", approve, ""))

        threads = [threading.Thread(target=decide, args=(i, s)) for i, s in enumerate((one, two))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert not any(t.is_alive() for t in threads)
        approved_rounds = []
        for n, cid in enumerate(cids):
            first, second = outcomes[0][n], outcomes[1][n]
            assert sorted([first[0], second[0]]) == ["refused", "won"], (n, first, second)
            winner = first if first[0] == "won" else second
            assert winner[2] == "Done."
            stored = store.load(cid, USER)
            assert stored is not None and stored.turn is not None
            [decision] = stored.turn.decisions
            assert decision.approved == winner[1]  # the winner's decision is the stored one
            if decision.approved:
                approved_rounds.append(str(n))
    assert sorted(deleted, key=int) == approved_rounds  # each approved call ran exactly once


def _anthropic_tool_use() -> dict[str, Any]:
    return anthropic_message(
        None,
        content=[
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"order_id": "42"}},
            {
                "type": "tool_use",
                "id": "toolu_2",
                "name": "delete_order",
                "input": {"order_id": "42"},
            },
        ],
        stop_reason="tool_use",
    )


def _openai_tool_use() -> dict[str, Any]:
    return openai_completion(
        None,
        tool_calls=[
            {"id": "call_a", "name": "lookup", "arguments": '{"order_id": "42"}'},
            {"id": "call_b", "name": "delete_order", "arguments": '{"order_id": "42"}'},
        ],
        finish_reason="tool_calls",
    )


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("decision", ["approve", "deny"])
@pytest.mark.parametrize("offered", [False, True], ids=["alone", "with-an-offer"])
def test_the_request_after_a_decision_pairs_every_call_on_the_real_sdks(
    tmp_path: Path, provider: str, decision: str, offered: bool
) -> None:
    """The suite's conftest checks each body against the SDK's request type; an offer made
    before the turn parked follows every result."""
    made: list[bool] = []
    tools = Tools(lambda: made.append(service.offer(chat.conversation_id, USER, OFFER)))
    if provider == "anthropic":
        server = MockProvider(_anthropic_tool_use(), anthropic_message("Done."))
        client: LLMClient = AnthropicClient("claude-sonnet-4-5", client=mock_anthropic_sdk(server))
        held = "toolu_2"
    else:
        server = MockProvider(_openai_tool_use(), openai_completion("Done."))
        client = OpenAIClient("gpt-5-mini", client=mock_openai_sdk(server))
        held = "call_b"
    with LmdbStore(tmp_path / "db") as store, ConversationService(store) as service:
        chat = _agent(client, tools if offered else Tools()).chat(service, user_id=USER)
        assert [p.call_id for p in chat.send("Delete order 42").pending] == [held]
        reply = chat.approve(held) if decision == "approve" else chat.deny(held, "no")
    assert reply.text == "Done." and len(server.bodies) == 2 and made == [True] * offered
    body = json.dumps(server.last_body)
    assert held in body and ("order 42 deleted" in body) == (decision == "approve")
    assert ("denied" in body) == (decision == "deny")
    results = max(body.rindex("order 42 exists"), body.rfind("deleted"), body.rfind("denied"))
    assert body.rfind(OFFER) > results if offered else OFFER not in body


PARKING_CHILD = textwrap.dedent(
    """
    import sys

    from parlour.actors import Agent, ConversationService
    from parlour.runtime import Depth, OutputSize, ScriptedClient, tool_from_function
    from parlour.runtime.testing import scripted_tool_calls
    from parlour.stores import LmdbStore


    def delete_order(order_id: str) -> str:
        '''Delete an order.

        Args:
            order_id: the order.
        '''
        open(sys.argv[2], "a").write("delete\\n")
        print("tool started", flush=True)
        sys.stdin.readline()  # the parent kills this process here when it runs the tool
        return "deleted"


    def asking(prepared):  # an offer reaches the turn during the call that parks it
        assert service.offer(chat.conversation_id, "alice", "Then say so.")
        return scripted_tool_calls(("delete_order", {"order_id": "42"}))(prepared)


    tool = tool_from_function(delete_order, needs_approval=True)
    model = ScriptedClient([asking])
    agent = Agent(model, tools=[tool], output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)
    with LmdbStore(sys.argv[1]) as store, ConversationService(store) as service:
        if len(sys.argv) > 3:
            chat = agent.chat(service, user_id="alice", conversation_id=sys.argv[3])
            chat.approve(chat.pending[0].call_id)
        else:
            chat = agent.chat(service, user_id="alice")
            print(chat.conversation_id, flush=True)
            print(len(chat.send("Delete order 42").pending), flush=True)
            print("parked", flush=True)
            sys.stdin.readline()
    """
)


@pytest.mark.slow
def test_a_process_killed_while_parked_and_one_killed_in_the_approved_tool_lose_nothing(
    tmp_path: Path,
) -> None:
    """Nor the offer the turn took before it parked: the resume adds it after the
    interrupted call's result, and the model answers it."""
    data, runs = tmp_path / "db", tmp_path / "runs"
    cid, count = killed_after(PARKING_CHILD, [str(data), str(runs)], "parked")
    assert count == "1"
    killed_after(PARKING_CHILD, [str(data), str(runs), cid], "tool started")
    assert runs.read_text() == "delete\n"
    with LmdbStore(data) as store, ConversationService(store) as service:
        chat = Agent(ScriptedClient(["Unsure."]), tools=Tools().all, **QUIET).chat(
            service, user_id=USER, conversation_id=cid
        )
        assert chat.pending == [] and chat.interrupted  # decided, then cut short
        reply = chat.resume()
        stored = store.load(cid, USER)
    assert reply.text == "Unsure." and reply.recovered is not None
    assert reply.recovered.interrupted == [reply.recovered.interrupted[0]]
    assert stored is not None and dangling_calls(stored.messages) == []
    assert runs.read_text() == "delete\n"  # the approved call ran once, never again
    kinds = [(m.role, type(m.blocks[0]).__name__) for m in stored.messages]
    assert kinds[2:] == [
        ("user", "ToolResultBlock"),
        ("user", "TextBlock"),
        ("assistant", "TextBlock"),
    ]
    assert stored.messages[3].blocks[0].text == "Then say so."  # type: ignore[union-attr]
    assert stored.turn is not None and stored.turn.offers == ()


@pytest.mark.parametrize("decision", ["approve", "deny"])
@pytest.mark.parametrize("offered", [False, True], ids=["alone", "with-an-offer"])
def test_the_request_after_a_decision_is_one_bedrock_converse_accepts(
    tmp_path: Path, decision: str, offered: bool
) -> None:
    """Parked by one agent, decided by another whose client is Bedrock's: boto3 serializes
    the request against the service model, roles alternating, every call answered once (an
    offer made before the turn parked after the results, in the same user turn)."""
    made: list[bool] = []
    tools = Tools(lambda: made.append(service.offer(chat.conversation_id, USER, OFFER)))
    tools = tools if offered else Tools()
    boto = dummy_bedrock_client()
    bedrock = ConverseStreamMock(boto, converse_stream_events("Done."))
    spec = fake_spec(
        id="anthropic.claude-test-v1:0", provider="bedrock", supports_prompt_caching=False
    )
    with LmdbStore(tmp_path / "db") as store, ConversationService(store) as service:
        chat = _agent(ScriptedClient([ASK]), tools).chat(service, user_id=USER)
        chat.send("Delete order 42")
        decider = _agent(BedrockClient(spec, client=boto), tools).chat(
            service, user_id=USER, conversation_id=chat.conversation_id
        )
        reply = (
            decider.approve(PENDING.call_id)
            if decision == "approve"
            else decider.deny(PENDING.call_id, "no")
        )
    assert reply.text == "Done."
    [request] = bedrock.bodies
    messages: list[dict[str, Any]] = request["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    texts = [c.get("text", "") for c in messages[2]["content"]]
    answers = [t for t in texts if t.startswith(("Tool error for", "Tool result for"))]
    assert len(answers) == 2 and texts[: len(answers)] == answers  # both first, once each
    assert any("denied" in t for t in answers) == (decision == "deny")
    assert texts[len(answers) :] == [OFFER] * offered and made == [True] * offered


POSTGRES_DECIDER = textwrap.dedent(
    """
    import sys

    from parlour.actors import AlreadyDecidedError, Agent, ConversationService
    from parlour.runtime import Depth, OutputSize, ScriptedClient, tool_from_function
    from parlour.stores import PostgresStore


    def delete_order(order_id: str) -> str:
        '''Delete an order.

        Args:
            order_id: the order.
        '''
        open(sys.argv[3], "a").write("delete\\n")
        return "deleted"


    tool = tool_from_function(delete_order, needs_approval=True)
    agent = Agent(ScriptedClient(["Done."] * 100), tools=[tool], output=OutputSize.COMPACT,
                  depth=Depth.IMMEDIATE)
    with PostgresStore(sys.argv[1]) as store, ConversationService(store) as service:
        print("ready", flush=True)
        for cid in sys.stdin:
            chat = agent.chat(service, user_id="alice", conversation_id=cid.strip())
            try:
                chat.approve("call_1_delete_order") if sys.argv[2] == "approve" else chat.deny(
                    "call_1_delete_order", "no")
                print("won", flush=True)
            except AlreadyDecidedError:
                print("refused", flush=True)
    """
)


@pytest.mark.slow
def test_two_processes_deciding_the_same_calls_on_postgresql_apply_each_once(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    rounds = 40
    with postgres_schema() as conninfo:
        tool = tool_from_function(Tools().all[1].fn, needs_approval=True)
        one = calls(("delete_order", {"order_id": "42"}))
        cids = []
        with PostgresStore(conninfo) as store, ConversationService(store) as service:
            agent = Agent(ScriptedClient([one] * rounds), tools=[tool], **QUIET)
            for _ in range(rounds):
                chat = agent.chat(service, user_id=USER)
                assert len(chat.send("Delete order 42").pending) == 1
                cids.append(chat.conversation_id)
        children = [
            subprocess.Popen(
                [sys.executable, "-c", POSTGRES_DECIDER, conninfo, how, str(runs)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for how in ("approve", "deny")
        ]
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("".join(cid + "\n" for cid in cids))
            child.stdin.close()
        said = [child.stdout.read().split() for child in children if child.stdout]
        for child in children:
            assert child.wait(60) == 0
            assert child.stdout is not None
            child.stdout.close()
        assert len(said[0]) == len(said[1]) == rounds
        for approver, denier in zip(*said, strict=True):
            assert sorted([approver, denier]) == ["refused", "won"]  # exactly one decision
        with PostgresStore(conninfo) as store:
            for cid in cids:
                stored = store.load(cid, USER)
                assert stored is not None and stored.turn is not None
                assert len(stored.turn.decisions) == 1
                assert dangling_calls(stored.messages) == []
        approved = said[0].count("won")
        deletes = runs.read_text().count("delete") if runs.exists() else 0
        assert deletes == approved  # each approved call ran once, no denied one ran


def test_fsck_leaves_a_parked_conversation_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from parlour.actors.app._cli import main

    data = tmp_path / "db"
    with LmdbStore(data) as store, ConversationService(store) as service:
        chat = _agent(ScriptedClient([ASK]), Tools()).chat(service, user_id=USER)
        chat.send("Delete order 42")
        parked_at = _version(store, chat.conversation_id)
    assert main(["fsck", "--data-dir", str(data)]) == 0  # nothing interrupted: it waits
    assert main(["fsck", "--repair", "--data-dir", str(data)]) == 0
    capsys.readouterr()
    with LmdbStore(data) as store:
        stored = store.load(chat.conversation_id, USER)
        assert stored is not None and stored.stored_version == parked_at  # nothing written
        assert [d.call.id for d in dangling_calls(stored.messages)] == [PENDING.call_id]
    with LmdbStore(data) as store, ConversationService(store) as service:
        again = _agent(ScriptedClient(["Done."]), Tools()).chat(
            service, user_id=USER, conversation_id=chat.conversation_id
        )
        assert again.pending == [PENDING]
        assert again.approve(PENDING.call_id).text == "Done."
