"""Whatever happens to an agent's conversation, in any order, on threads or on a loop:
turns whose model answers, fails, calls tools or asks for calls that need a person's
approval; approvals and denials; messages offered while a tool runs; compactions in a
small window; restarts of the process between any two of them; resumes of a turn cut
short. After each step the stored conversation holds every message the user was told was
taken, once and in order, every tool call answered once (but the calls waiting for a
decision), a record whose start names its turn's first message, and the request the next
turn would send passes every provider's pairing rule."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import tempfile
from collections import deque

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from parlour.actors import Agent, Chat, ConversationService
from parlour.runtime import (
    Depth,
    LLMResponse,
    OutputSize,
    PreparedConversation,
    ScriptedClient,
    TurnStep,
    dangling_calls,
    tool_from_function,
)
from parlour.runtime.blocks import TextBlock, ToolResultBlock
from parlour.runtime.errors import UncorrectableLLMError
from parlour.runtime.providers import AnthropicClient, BedrockClient, OpenAIClient
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
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
from parlour.stores import (
    LmdbStore,
    MemorySessionCache,
    MemoryStore,
    PersistentStore,
    PostgresStore,
)
from tests.runtime.providers._sent_bodies import check_request

from .agent_helpers import calls
from .kills import postgres_schema

SMALL = fake_spec(max_context_tokens=6_000)  # a small window: compactions come often
BEDROCK = fake_spec(
    id="anthropic.claude-test-v1:0", provider="bedrock", supports_prompt_caching=False
)
REPORT = "Every station read above the threshold on each of the survey's days. " * 60
USER = "alice"

# what the model does at its next call: answer, fail, or call these tools
FAIL = ("fail",)
ACTION = st.one_of(
    st.just(()),
    st.just(FAIL),
    st.lists(st.sampled_from(["lookup", "survey", "delete"]), min_size=1, max_size=3).map(tuple),
)


class AgentLifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.resources = contextlib.ExitStack()
        self.store = self.make_store()
        self.plans: deque[tuple[str, ...]] = deque()  # the model's next actions, in order
        self.rounds = itertools.count(1)
        self.offer_next: str | None = None  # offered while the next tool runs
        self.taken: list[str] = []  # every user text the user was told was taken, in order
        self.deleted: list[str] = []
        self.service: ConversationService | None = None
        self.chat: Chat | None = None
        self.cid: str | None = None
        self.texts = itertools.count(1)
        self.start()

    # -- the agent ---------------------------------------------------------------------------

    def model(self, prepared: PreparedConversation) -> LLMResponse:
        action = self.plans.popleft() if self.plans else ()
        if not action:
            return LLMResponse(model_id="scripted", blocks=[TextBlock(text="Done.")])
        if action == FAIL:
            raise UncorrectableLLMError("The model refused the request.")
        n = next(self.rounds)
        return calls(*((name, {"item": f"{name}-{n}"}) for name in action), round_=n + 1)

    def agent(self) -> Agent:
        def lookup(item: str) -> str:
            """Look an item up.

            Args:
                item: the item.
            """
            self.offer_from_tool()
            return f"{item} found"

        def survey(item: str) -> str:
            """A long survey report.

            Args:
                item: the item.
            """
            self.offer_from_tool()
            return f"{item}: {REPORT}"

        def delete(item: str) -> str:
            """Delete an item (a person approves it first).

            Args:
                item: the item.
            """
            self.deleted.append(item)
            return f"{item} deleted"

        return Agent(
            ScriptedClient(itertools.repeat(self.model, 1_000), spec=SMALL),
            tools=[lookup, survey, tool_from_function(delete, needs_approval=True)],
            output=OutputSize.COMPACT,
            depth=Depth.IMMEDIATE,
            comfort_tokens=4_000,
        )

    def offer_from_tool(self) -> None:
        text, self.offer_next = self.offer_next, None
        if text is None or self.service is None or self.cid is None:
            return
        if self.service.offer(self.cid, USER, text):  # taken: it must be kept
            self.taken.append(text)

    def start(self) -> None:
        self.service = ConversationService(self.store, MemorySessionCache(), cleanup_interval_s=0)
        stored = self.cid is not None and self.store.load(self.cid, USER) is not None
        cid = self.cid if stored else None  # an id never saved names nothing after a restart
        self.chat = self.agent().chat(self.service, user_id=USER, conversation_id=cid)
        self.cid = self.chat.conversation_id

    def make_store(self) -> PersistentStore:
        """An LmdbStore: appends for the usual turn, deferred saves, the version history."""
        directory = self.resources.enter_context(tempfile.TemporaryDirectory())
        return self.resources.enter_context(LmdbStore(directory, sync=False))

    def teardown(self) -> None:
        if self.service is not None:
            self.service.stop()
        self.resources.close()

    # -- what happens ------------------------------------------------------------------------

    def parked(self) -> bool:
        assert self.chat is not None
        return bool(self.chat.pending)

    @precondition(lambda self: not self.parked())
    @rule(actions=st.lists(ACTION, max_size=4), offer=st.booleans(), on_loop=st.booleans())
    def send(self, actions: list[tuple[str, ...]], offer: bool, on_loop: bool) -> None:
        assert self.chat is not None
        self.plans.clear()
        self.plans.extend(actions)
        text = f"Message {next(self.texts)}"
        self.offer_next = f"Offer {next(self.texts)}" if offer else None
        self.taken.append(text)  # saved before the model is called
        try:
            reply = asyncio.run(self.chat.asend(text)) if on_loop else self.chat.send(text)
        except UncorrectableLLMError:
            event("a turn failed")
            return
        event("a turn parked" if reply.pending else "a turn answered")
        if self.taken[-1] != text:
            event("an offer taken")

    @precondition(lambda self: self.chat is not None and self.chat.interrupted)
    @rule(actions=st.lists(ACTION, max_size=3), on_loop=st.booleans())
    def resume(self, actions: list[tuple[str, ...]], on_loop: bool) -> None:
        assert self.chat is not None
        self.plans.clear()
        self.plans.extend(actions)
        try:
            asyncio.run(self.chat.aresume()) if on_loop else self.chat.resume()
        except UncorrectableLLMError:
            event("a resume failed")
            return
        event("a turn resumed")

    @precondition(lambda self: self.parked())
    @rule(approve=st.booleans(), actions=st.lists(ACTION, max_size=3), on_loop=st.booleans())
    def decide(self, approve: bool, actions: list[tuple[str, ...]], on_loop: bool) -> None:
        assert self.chat is not None
        self.plans.clear()
        self.plans.extend(actions)
        call_id = self.chat.pending[0].call_id
        try:
            if on_loop:
                chat = self.chat
                deciding = chat.aapprove(call_id) if approve else chat.adeny(call_id, "not now")
                reply = asyncio.run(deciding)
            else:
                reply = (
                    self.chat.approve(call_id) if approve else self.chat.deny(call_id, "not now")
                )
        except UncorrectableLLMError:
            event("a decision's turn failed")
            return
        event("a decision parked again" if reply.pending else "a decision went on")

    @rule()
    def restart(self) -> None:
        assert self.service is not None
        self.service.stop()
        self.start()

    # -- what always holds -------------------------------------------------------------------

    @invariant()
    def every_taken_message_once_in_order_and_every_call_answered(self) -> None:
        if self.cid is None:
            return
        snapshot = self.store.load(self.cid, USER)
        if snapshot is None:
            assert not self.taken
            return
        said = [
            b.text
            for m in snapshot.messages
            if m.role == "user"
            for b in m.blocks
            if isinstance(b, TextBlock) and b.text.startswith(("Message ", "Offer "))
        ]
        if any(e.get("type") == "compaction" for e in snapshot.usage):
            event("compacted")
        kept = [] if snapshot.turn is None else list(snapshot.turn.offers)
        assert said + kept == self.taken  # offers a parked turn keeps come after
        record = snapshot.turn
        parked = record is not None and record.step == TurnStep.APPROVAL
        pending = {p.call_id for p in record.pending} if record is not None and parked else set()
        unanswered = {d.call.id for d in dangling_calls(snapshot.messages)}
        assert unanswered <= pending  # only the calls waiting for a decision
        assert not parked or (record is not None and record.undecided())
        if record is not None:
            assert record.start < len(snapshot.messages), "the record's start is past the end"
            first = snapshot.messages[record.start]
            assert first.role == "user", "the record's start names no turn's first message"
        if not parked:  # the next request: every call paired, for every provider
            conversation = snapshot.to_conversation()
            ScriptedClient(spec=SMALL).preview(conversation)
            fits_every_provider(snapshot)
            results = [
                b.tool_use_id
                for m in snapshot.messages
                for b in m.blocks
                if isinstance(b, ToolResultBlock)
            ]
            assert len(results) == len(set(results))  # each call answered once


def fits_every_provider(snapshot: ConversationPersistenceSnapshot) -> None:
    """The request each provider's client would send next for ``snapshot`` fits the SDK's
    request type (Anthropic, OpenAI) or the service model with its roles alternating, a
    user's first (Bedrock's Converse)."""
    anthropic = MockProvider(anthropic_message("ok"))
    AnthropicClient("claude-sonnet-4-5", client=mock_anthropic_sdk(anthropic)).respond(
        snapshot.to_conversation()
    )
    check_request("/v1/messages", anthropic.last_body)
    openai = MockProvider(openai_completion("ok"))
    OpenAIClient("gpt-5-mini", client=mock_openai_sdk(openai)).respond(snapshot.to_conversation())
    check_request("/chat/completions", openai.last_body)
    boto = dummy_bedrock_client()
    bedrock = ConverseStreamMock(boto, converse_stream_events("ok"))
    bedrock_client = BedrockClient(BEDROCK, client=boto)
    bedrock_client.respond(snapshot.to_conversation(), on_text=lambda _: None)  # the stream
    roles = [m["role"] for m in bedrock.bodies[-1]["messages"]]
    assert roles[:1] == ["user"] and all(a != b for a, b in itertools.pairwise(roles))


class MemoryLifecycle(AgentLifecycle):
    """The same on a MemoryStore: every save whole, none deferred."""

    def make_store(self) -> PersistentStore:
        return MemoryStore()


class PostgresLifecycle(AgentLifecycle):
    """The same on PostgreSQL, in a schema of its own per run."""

    def make_store(self) -> PersistentStore:
        conninfo = self.resources.enter_context(postgres_schema())
        return self.resources.enter_context(PostgresStore(conninfo))


SETTINGS = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
AgentLifecycle.TestCase.settings = SETTINGS
MemoryLifecycle.TestCase.settings = SETTINGS
PostgresLifecycle.TestCase.settings = settings(SETTINGS, max_examples=15)
test_any_turns_decisions_offers_and_restarts_leave_a_conversation_providers_accept = (
    AgentLifecycle.TestCase
)
test_the_same_on_a_memory_store_where_every_save_is_whole = MemoryLifecycle.TestCase
test_the_same_on_postgresql = pytest.mark.skipif(
    not os.environ.get("PARLOUR_TEST_POSTGRES"),
    reason="no PostgreSQL server: PARLOUR_TEST_POSTGRES is not set",
)(PostgresLifecycle.TestCase)
