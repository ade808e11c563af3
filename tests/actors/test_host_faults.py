"""A host in production's shape: many chats at once behind a model that takes time, fails,
times out and hangs, tools that raise and hang (async and blocking), turns force-released
while they wait, then every conversation evicted and restored for a second turn.

Each chat's first message names its fault. Whatever its first turn ended in, the stored
conversation holds that message exactly once and every tool call in it exactly one result;
a reply the caller got is the stored last answer; the request each provider would be sent
next fits its SDK's request type (checked on a sample: each check runs three real clients).
The second turn, with every conversation evicted and restored from the store, answers on
every chat and leaves both messages stored once, in order. On each store: memory, LMDB and
PostgreSQL.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from parlour.actors import (
    Agent,
    Chat,
    ConversationService,
    Reply,
    RetryPolicy,
    TurnCancelledError,
)
from parlour.runtime import Depth, OutputSize, ScriptedClient
from parlour.runtime.blocks import TextBlock
from parlour.runtime.errors import RetryableLLMError, UncorrectableLLMError
from parlour.runtime.providers import WireRequest
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.runtime.testing import FakeClock
from parlour.stores import MemorySessionCache, PersistentStore

from .agent_helpers import answerable, stored, stored_calls, stored_results, user_texts
from .kills import each_store
from .test_agent_lifecycle_machine import fits_every_provider

FAULTS = ("plain", "lookup", "explode", "stall", "jam", "flaky", "broken", "hang", "forced")
ENDS = {  # what the caller of each fault's first turn gets: a reply, or this error
    "broken": UncorrectableLLMError,
    "hang": RetryableLLMError,  # past the model timeout, with no retry left
    "forced": TurnCancelledError,
}
SAMPLE = 7  # every seventh chat's next request is checked against every provider


def first_text(i: int) -> str:
    fault = FAULTS[i % len(FAULTS)]
    use = f" Use {fault}." if fault in ("lookup", "explode", "stall", "jam") else ""
    return f"Chat {i} [{fault}]: where is my order?{use}"


def second_text(i: int) -> str:
    return f"Chat {i}: thank you."


async def lookup(order_id: str = "42") -> str:
    """The status of an order."""
    await asyncio.sleep(0.01)
    return f"Order {order_id} shipped."


async def explode(order_id: str = "42") -> str:
    """The status of an order, from a service that is down."""
    raise RuntimeError("the order service is down")


async def stall(order_id: str = "42") -> str:
    """The status of an order, from a service that never answers."""
    await asyncio.Event().wait()
    return "never"


UNJAM = threading.Event()  # set as each test ends: the jammed calls' threads return


def jam(order_id: str = "42") -> str:
    """The status of an order, from a blocking client that never answers."""
    UNJAM.wait()
    return "never"


class FaultyModel(ScriptedClient):
    """The scripted default's answers after ``latency`` seconds, with the fault the last
    user text names: ``flaky`` fails retryably on its conversation's first call, ``broken``
    fails for good, ``hang`` never answers, ``forced`` force-releases its own conversation
    and never answers. On a thread, a call that never answers stays silent until the
    request's timeout and raises as an SDK does (the turn's thread is bounded by it); on
    the loop, until its task is cancelled."""

    def __init__(self, service: ConversationService, latency: float) -> None:
        super().__init__()
        self.service, self.latency = service, latency
        self.seen: set[str] = set()
        self.released = threading.Event()
        self._lock = threading.Lock()

    def _fault(self, request: WireRequest) -> str | None:
        cid = request.conversation_id or ""
        with self._lock:
            first = cid not in self.seen
            self.seen.add(cid)
        for turn in reversed(request.prepared.turns):
            texts = [b.text for b in turn.blocks if isinstance(b, TextBlock)]
            if texts and turn.role.value == "user":
                said = texts[-1]
                fault = said.split("[", 1)[1].split("]", 1)[0] if "[" in said else "plain"
                if fault == "forced":  # the chat's user id is named by its number
                    number = said.split()[1]
                    self.service.force_release(cid, f"user-{number}")
                if fault == "flaky" and not first:
                    return "plain"
                return fault
        return "plain"

    def _refusal(self, fault: str | None) -> Exception | None:
        if fault == "flaky":
            return RetryableLLMError("overloaded, try again")
        if fault == "broken":
            return UncorrectableLLMError("the model refuses this conversation")
        return None

    async def _asend(self, request: WireRequest, on_text: Any) -> Any:
        fault = self._fault(request)
        await asyncio.sleep(self.latency)
        if fault in ("hang", "forced"):
            await asyncio.Event().wait()
        if (error := self._refusal(fault)) is not None:
            raise error
        return ScriptedClient._send(self, request)

    def _send(self, request: WireRequest) -> Any:
        fault = self._fault(request)
        time.sleep(self.latency)
        if fault in ("hang", "forced"):  # silent until the SDK's own timeout, as a real one
            self.released.wait(request.timeout_s)
            raise RetryableLLMError(f"no answer within {request.timeout_s}s")
        if (error := self._refusal(fault)) is not None:
            raise error
        return ScriptedClient._send(self, request)


async def _no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


def _agent(model: ScriptedClient) -> Agent:
    return Agent(
        model,
        tools=[lookup, explode, stall, jam],
        output=OutputSize.STANDARD,
        depth=Depth.IMMEDIATE,
        # long enough for a healthy call on a loaded machine (a loop running a thousand
        # turns lags by a second or more), short enough that the hung ones end the test
        tool_timeout_s=4.0,
        model_timeout_s=4.0,
        retry=RetryPolicy(attempts=1, base_s=0.0),
        sleep=lambda seconds: None,
        async_sleep=_no_wait,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def unjam() -> Iterator[None]:
    UNJAM.clear()
    yield
    UNJAM.set()


store = each_store  # memory, LMDB and PostgreSQL


@pytest.fixture
def service(store: PersistentStore, clock: FakeClock) -> Iterator[ConversationService]:
    with ConversationService(store, MemorySessionCache(), clock=clock, cleanup_interval_s=0) as svc:
        yield svc


def _check_first(
    service: ConversationService, i: int, cid: str, ended: Reply | BaseException
) -> None:
    fault = FAULTS[i % len(FAULTS)]
    snapshot = stored(service, cid, f"user-{i}")
    assert user_texts(snapshot) == [first_text(i)], fault
    assert answerable(snapshot), fault
    results = [r.tool_use_id for r in stored_results(snapshot)]
    assert len(results) == len(set(results)) == len(stored_calls(snapshot)), fault
    expected = ENDS.get(fault)
    if expected is None:
        assert not isinstance(ended, BaseException), (fault, ended)
        last = snapshot.messages[-1]
        assert last.role == "assistant", fault
        assert ended.text == "".join(b.text for b in last.blocks if isinstance(b, TextBlock))
    else:
        assert isinstance(ended, expected), (fault, ended)
    if fault in ("explode", "stall", "jam"):  # the tool's failure reached the model
        (result,) = stored_results(snapshot)
        assert result.is_error, fault
    if fault == "lookup":  # never starved by the hung tools of other chats
        (result,) = stored_results(snapshot)
        assert result.content == "Order 42 shipped." and not result.is_error
    if i % SAMPLE == 0:
        fits_every_provider(snapshot)


def _check_second(
    service: ConversationService, i: int, cid: str, reply: Reply | BaseException
) -> ConversationPersistenceSnapshot:
    assert not isinstance(reply, BaseException), (FAULTS[i % len(FAULTS)], reply)
    snapshot = stored(service, cid, f"user-{i}")
    assert user_texts(snapshot) == [first_text(i), second_text(i)]
    assert answerable(snapshot)
    assert snapshot.messages[-1].role == "assistant"
    if i % SAMPLE == 0:
        fits_every_provider(snapshot)
    return snapshot


def _evict_all(service: ConversationService, clock: FakeClock, cids: list[str]) -> None:
    """Past every retention: the sweep evicts every conversation, so the next turn of each
    restores it from the store."""
    clock.advance(3600.0)
    service.sweep_expired()
    for cid in cids:
        service.evict_conversation(cid)


Wave = Callable[[list[Chat], Callable[[int], str]], list[Reply | BaseException]]


def _two_turns(service: ConversationService, clock: FakeClock, chats: int, wave: Wave) -> None:
    """Every chat's first turn, with its fault, all at once (``wave``), each checked; every
    conversation evicted; then a healthy second turn on each, all at once, each checked."""
    model = FaultyModel(service, latency=0.2)
    agent = _agent(model)
    every = [agent.chat(service, user_id=f"user-{i}") for i in range(chats)]
    try:
        firsts = wave(every, first_text)
    finally:
        model.released.set()  # the thread path's hung calls, abandoned by their turns, end
    cids = [chat.conversation_id for chat in every]
    for i, (cid, ended) in enumerate(zip(cids, firsts, strict=True)):
        _check_first(service, i, cid, ended)
    _evict_all(service, clock, cids)
    healthy = _agent(ScriptedClient())
    again = [
        healthy.chat(service, user_id=f"user-{i}", conversation_id=cid)
        for i, cid in enumerate(cids)
    ]
    for i, (cid, reply) in enumerate(zip(cids, wave(again, second_text), strict=True)):
        _check_second(service, i, cid, reply)


def test_a_thousand_chats_on_one_loop_survive_every_fault_and_answer_after_a_restore(
    service: ConversationService, clock: FakeClock
) -> None:
    async def gathered(every: list[Chat], text: Callable[[int], str]) -> list[Any]:
        turns = (chat.asend(text(i)) for i, chat in enumerate(every))
        return await asyncio.gather(*turns, return_exceptions=True)

    _two_turns(service, clock, 1000, lambda every, text: asyncio.run(gathered(every, text)))


def test_three_hundred_chats_on_threads_survive_every_fault_and_answer_after_a_restore(
    service: ConversationService, clock: FakeClock
) -> None:
    def on_threads(every: list[Chat], text: Callable[[int], str]) -> list[Reply | BaseException]:
        def one(i: int) -> Reply | BaseException:
            try:
                return every[i].send(text(i))
            except Exception as exc:
                return exc

        with ThreadPoolExecutor(max_workers=len(every)) as pool:
            return list(pool.map(one, range(len(every))))

    _two_turns(service, clock, 300, on_threads)
