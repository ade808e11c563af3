"""A state machine over several users doing every service operation, foreign ones included
(the approval operations too, on conversations whose turn waits for a person): each user
sees exactly their own conversations, as last released or saved, and nothing of anyone
else's."""

from __future__ import annotations

import asyncio
import datetime as dt
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from parlour.actors import Agent, BasicThinker, Chat, ConversationService
from parlour.runtime import (
    ConversationContext,
    Depth,
    OutputSize,
    ScriptedClient,
    tool_from_function,
)
from parlour.runtime.errors import ConversationNotFoundError, ConversationUnavailableError
from parlour.runtime.testing import FakeClock
from parlour.stores import LmdbStore, MemorySessionCache, MemoryStore, PersistentStore

USERS = ("alice", "bob", "carol")


@dataclass
class Model:
    user: str
    saved: list[str] | None = None  # None: no record
    live: list[str] | None = None  # what the live activation holds; None: not live
    holder: BasicThinker | None = None
    context: ConversationContext | None = None
    counter: int = field(default=0)
    parked: str | None = None  # the id of the call its turn waits on for approval
    agent: bool = False  # made by an agent's turn (its messages hold tool calls)


def delete_order(order_id: str) -> str:
    """Delete an order.

    Args:
        order_id: the order.
    """
    return f"order {order_id} deleted"


# the scripted model calls delete_order when a message names it; each call waits for approval
AGENT = Agent(
    ScriptedClient(),
    tools=[tool_from_function(delete_order, needs_approval=True)],
    output=OutputSize.COMPACT,
    depth=Depth.IMMEDIATE,
    retain=dt.timedelta(0),
)


def _texts(context: ConversationContext) -> list[str]:
    return [m.raw_content for m in context.messages]


class ServiceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store = self.make_store()
        self.service = ConversationService(
            self.store,
            MemorySessionCache(),
            clock=self.clock,
            cleanup_interval_s=0,
            conversation_timeout_s=0.5,
            shutdown_grace_s=0.01,
        )
        self.model: dict[str, Model] = {}

    def make_store(self) -> PersistentStore:
        return MemoryStore()

    def teardown(self) -> None:
        self.service.stop()

    # -- helpers -----------------------------------------------------------------------------

    def _exists(self, cid: str) -> bool:
        m = self.model[cid]
        return m.saved is not None or m.live is not None

    def _pick(
        self, data: st.DataObject, *, held: bool | None = None, parked: bool | None = None
    ) -> str:
        ids = [  # in creation order: minted ids are random, their order is not
            cid for cid, m in self.model.items() if self._fits(m, held, parked)
        ]
        return data.draw(st.sampled_from(ids))

    @staticmethod
    def _fits(m: Model, held: bool | None, parked: bool | None) -> bool:
        return (held is None or (m.holder is not None) == held) and (
            parked is None or (m.parked is not None) == parked
        )

    def _plain(self) -> list[str]:
        """The unheld conversations a plain thinker made (obtained and compared as texts)."""
        return [c for c, m in self.model.items() if m.holder is None and not m.agent]

    def _check_durable(self, cid: str) -> None:
        """The store holds what the model says was saved."""
        m = self.model[cid]
        stored = self.store.load(cid, m.user)
        assert (None if stored is None else [x.raw_content for x in stored.messages]) == m.saved

    def _any(self, held: bool | None = None, parked: bool | None = None) -> bool:
        return any(self._fits(m, held, parked) for m in self.model.values())

    def _stored(self, cid: str) -> list[Any] | None:
        """The stored messages' texts, as ``_check_durable`` reads them (None: no text, as
        an agent's tool calls and results have)."""
        stored = self.store.load(cid, self.model[cid].user)
        return None if stored is None else [x.raw_content for x in stored.messages]

    # -- the owner's operations --------------------------------------------------------------

    @rule(user=st.sampled_from(USERS))
    def mint_and_obtain(self, user: str) -> None:
        thinker = BasicThinker(user)
        cid = thinker.mint_conversation_id()
        context = self.service.obtain_conversation(None, thinker).get(timeout=2)
        assert context.messages == []
        self.model[cid] = Model(user, live=[], holder=thinker, context=context)

    @precondition(lambda self: self._plain())
    @rule(data=st.data())
    def obtain_own(self, data: st.DataObject) -> None:
        cid = data.draw(st.sampled_from(self._plain()))
        m = self.model[cid]
        thinker = BasicThinker(m.user)
        thinker.set_conversation_id(cid)
        future = self.service.obtain_conversation(None, thinker)
        expected = m.live if m.live is not None else m.saved
        if expected is None:
            with pytest.raises(ConversationUnavailableError):
                future.get(timeout=2)
            return
        context = future.get(timeout=2)
        assert _texts(context) == expected  # never stale, never another's
        m.holder, m.context, m.live = thinker, context, list(expected)

    @precondition(lambda self: self._any(held=True))
    @rule(data=st.data(), save=st.sampled_from(["no", "wait", "deferred"]))
    def add_turn(self, data: st.DataObject, save: str) -> None:
        m = self.model[self._pick(data, held=True)]
        assert m.context is not None
        m.counter += 1
        m.context.add_user_message(f"{m.user} turn {m.counter}")
        m.live = _texts(m.context)
        if save == "no":
            return
        assert m.holder is not None
        wait = save == "wait"  # a deferred save is durable by the release: what others see
        if m.saved is None and not m.holder.is_conversation_minted():
            with pytest.raises(ConversationNotFoundError):  # an adopter only ever updates
                self.service.save_conversation(m.context, m.holder, wait=wait)
            return
        self.service.save_conversation(m.context, m.holder, wait=wait)
        m.saved = list(m.live)
        if wait:  # with every deferred save before it
            self._check_durable(m.holder.conversation_id)

    @precondition(lambda self: self._any(held=True))
    @rule(data=st.data(), keep=st.booleans())
    def release(self, data: st.DataObject, keep: bool) -> None:
        m = self.model[self._pick(data, held=True)]
        assert m.holder is not None
        self.service.release(m.holder, retain=60 if keep else 0)
        assert m.holder.transcript() is not None
        self._check_durable(m.holder.conversation_id)  # a deferred save included
        m.holder, m.context = None, None
        if not keep:
            m.live = None

    @precondition(lambda self: self._any())
    @rule(data=st.data())
    def evict(self, data: st.DataObject) -> None:
        cid = self._pick(data)
        m = self.model[cid]
        evictable = m.live is not None and m.holder is None
        assert self.service.evict_conversation(cid) is evictable
        if evictable:
            m.live = None

    @rule()
    def sweep(self) -> None:
        self.clock.advance(61)
        idle = [m for m in self.model.values() if m.live is not None and m.holder is None]
        assert self.service.sweep_expired() == len(idle)
        for m in idle:
            m.live = None

    @precondition(lambda self: self._any(held=False))
    @rule(data=st.data())
    def remove_own(self, data: st.DataObject) -> None:
        cid = self._pick(data, held=False)
        self.service.remove_conversation(cid, self.model[cid].user)
        del self.model[cid]

    @precondition(lambda self: self._any())
    @rule(data=st.data())
    def force_release_own(self, data: st.DataObject) -> None:
        cid = self._pick(data)
        m = self.model[cid]
        if m.live is None:
            with pytest.raises(ValueError):
                self.service.force_release(cid, m.user)
            return
        expected = m.holder.job_id if m.holder else None
        assert self.service.force_release(cid, m.user) == expected

    @rule(user=st.sampled_from(USERS))
    def park_a_turn(self, user: str) -> None:
        chat = AGENT.chat(self.service, user_id=user)
        reply = chat.send("Please delete_order 7.")
        [call] = reply.pending
        assert call.tool == "delete_order"
        self.model[chat.conversation_id] = Model(user, parked=call.call_id, agent=True)
        self.model[chat.conversation_id].saved = self._stored(chat.conversation_id)

    @precondition(lambda self: self._any(held=False, parked=True))
    @rule(data=st.data(), approve=st.booleans())
    def decide_own(self, data: st.DataObject, approve: bool) -> None:
        cid = self._pick(data, held=False, parked=True)
        m = self.model[cid]
        assert m.parked is not None and m.live is None
        chat = AGENT.chat(self.service, user_id=m.user, conversation_id=cid)
        assert [p.call_id for p in chat.pending] == [m.parked]
        reply = chat.approve(m.parked) if approve else chat.deny_all("no")
        assert reply.pending == () and chat.pending == []
        m.parked, m.saved = None, self._stored(cid)

    # -- a foreign user tries every door -------------------------------------------------------

    @precondition(lambda self: self._any())
    @rule(data=st.data(), door=st.sampled_from(["obtain", "force", "remove", "query"]))
    def foreign(self, data: st.DataObject, door: str) -> None:
        cid = self._pick(data)
        m = self.model[cid]
        stranger = data.draw(st.sampled_from([u for u in USERS if u != m.user]))
        if door == "query":
            assert self.service.owning_thinker(cid, stranger) is None
            return
        thinker = BasicThinker(stranger)
        thinker.set_conversation_id(cid)
        call: Callable[[], object] = {
            "obtain": lambda: self.service.obtain_conversation(None, thinker).get(timeout=2),
            "force": lambda: self.service.force_release(cid, stranger),
            "remove": lambda: self.service.remove_conversation(cid, stranger),
        }[door]
        if self._exists(cid):
            with pytest.raises(PermissionError, match=f"^User {stranger} does not own"):
                call()
        elif door == "remove":  # nothing is there: a no-op, as for an id never used
            call()
        else:  # nothing is there: indistinguishable from an id never used
            with pytest.raises((ConversationUnavailableError, ValueError)):
                call()

    @precondition(lambda self: self._any())
    @rule(
        data=st.data(),
        door=st.sampled_from(["pending", "approve", "deny", "deny_all", "aapprove"]),
        real_call=st.booleans(),
    )
    def foreign_approval(self, data: st.DataObject, door: str, real_call: bool) -> None:
        cid = self._pick(data)
        m = self.model[cid]
        stranger = data.draw(st.sampled_from([u for u in USERS if u != m.user]))
        call_id = m.parked if real_call and m.parked else "call_nobody_made"
        before = self.store.load(cid, m.user)
        outcome = _approval(
            AGENT.chat(self.service, user_id=stranger, conversation_id=cid), door, call_id
        )
        if self._exists(cid):
            assert isinstance(outcome, PermissionError), outcome
            assert str(outcome) == f"User {stranger} does not own conversation {cid}"
        else:  # nothing is there: indistinguishable from an id never used
            never = f"never-{uuid.uuid4().hex}"
            unused = _approval(
                AGENT.chat(self.service, user_id=stranger, conversation_id=never), door, call_id
            )
            assert type(outcome) is type(unused), (outcome, unused)
            assert str(outcome).replace(cid, "ID") == str(unused).replace(never, "ID")
        after = self.store.load(cid, m.user)
        assert (before is None) == (after is None)
        if before is not None and after is not None:  # the stranger changed nothing
            assert (after.stored_version, after.turn) == (before.stored_version, before.turn)
        self._check_durable(cid)

    # -- what everyone sees --------------------------------------------------------------------

    @invariant()
    def stats_match_the_model(self) -> None:
        stats = self.service.get_stats()
        assert stats.total == sum(m.live is not None for m in self.model.values())
        assert stats.owned == sum(m.holder is not None for m in self.model.values())

    @invariant()
    def each_owner_sees_only_their_own_holders(self) -> None:
        for cid, m in self.model.items():
            for user in USERS:
                found = self.service.owning_thinker(cid, user)
                assert found is (m.holder if user == m.user else None)


def _approval(chat: Chat, door: str, call_id: str) -> object:
    """What an approval operation answers (or raises) for ``chat``'s user."""
    try:
        if door == "pending":
            return chat.pending
        if door == "approve":
            return chat.approve(call_id)
        if door == "deny":
            return chat.deny(call_id, "not yours")
        if door == "deny_all":
            return chat.deny_all("not yours")
        return asyncio.run(chat.aapprove(call_id))
    except Exception as exc:
        return exc


class LmdbServiceMachine(ServiceMachine):
    """The same on an LmdbStore, where a deferred save is queued, not written at once."""

    def make_store(self) -> PersistentStore:
        self.directory = tempfile.TemporaryDirectory()
        return LmdbStore(self.directory.name, sync=False)

    def teardown(self) -> None:
        super().teardown()
        assert isinstance(self.store, LmdbStore)
        self.store.close()
        self.directory.cleanup()


_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
ServiceMachine.TestCase.settings = _SETTINGS
LmdbServiceMachine.TestCase.settings = _SETTINGS
test_every_user_sees_exactly_their_own_conversations = ServiceMachine.TestCase
test_on_lmdb_with_deferred_saves_every_user_sees_exactly_their_own = LmdbServiceMachine.TestCase
