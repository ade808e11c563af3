"""The async driver's saves and cancellation: ``Chat.asend`` saves on the loop (the commit
in the store's commit thread), a force release cancels the turn's task at any step, the
caller's cancel stays a ``CancelledError``, and a save is never cut short."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from parlour.actors import Agent, BasicThinker, ConversationService, TurnCancelledError
from parlour.runtime import ConversationContext, Depth, OutgoingMessage, OutputSize, ScriptedClient
from parlour.runtime.blocks import PojoBlock
from parlour.runtime.errors import RetryableLLMError, StaleVersionError
from parlour.runtime.testing import FakeClock
from parlour.stores import LmdbStore, MemorySessionCache

from .agent_helpers import answerable, stored, stored_results, user_texts


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LmdbStore]:
    with LmdbStore(tmp_path / "db") as lmdb_store:
        yield lmdb_store


@pytest.fixture
def service(store: LmdbStore) -> Iterator[ConversationService]:
    with ConversationService(
        store, MemorySessionCache(), clock=FakeClock(), cleanup_interval_s=0
    ) as svc:
        yield svc


class SlowModel(ScriptedClient):
    """The scripted default's answers, each after ``wait()`` (an asyncio sleep or an
    event's wait); ``started`` is set as each call begins."""

    def __init__(self, wait: Callable[[], Awaitable[Any]]) -> None:
        super().__init__()
        self.wait = wait
        self.started = asyncio.Event()

    async def _asend(self, request: Any, on_text: Any) -> Any:
        self.started.set()
        await self.wait()
        return ScriptedClient._send(self, request)


async def lookup(order_id: str = "42") -> str:
    """The status of an order."""
    await asyncio.sleep(0.05)
    return f"Order {order_id} shipped."


def _agent(model: ScriptedClient, **options: Any) -> Agent:
    return Agent(
        model, tools=[lookup], output=OutputSize.STANDARD, depth=Depth.IMMEDIATE, **options
    )


# -- many chats on one loop ---------------------------------------------------------------------


def test_two_thousand_chats_on_one_loop_keep_every_message_once_without_a_thread_each(
    service: ConversationService,
) -> None:
    chats = 2000
    agent = _agent(SlowModel(lambda: asyncio.sleep(0.5)))
    texts = [f"Chat {i}: where is my order? Use lookup." for i in range(chats)]

    async def main() -> tuple[list[str], int, int]:
        warm = agent.chat(service, user_id="warm")
        await warm.asend("Hello.")  # the process-wide pools are started by the first turn
        before, peak = threading.active_count(), 0
        done = asyncio.Event()

        async def count_threads() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, threading.active_count())
                await asyncio.sleep(0.05)

        counter = asyncio.ensure_future(count_threads())
        every = [agent.chat(service, user_id=f"user-{i}") for i in range(chats)]
        replies = await asyncio.gather(*(c.asend(t) for c, t in zip(every, texts, strict=True)))
        done.set()
        await counter
        assert all("shipped" in r.text for r in replies)
        return [c.conversation_id for c in every], before, peak

    cids, before, peak = asyncio.run(main())
    assert peak - before < 50  # a thread per chat would be 2,000
    for i, cid in enumerate(cids):
        snapshot = stored(service, cid, f"user-{i}")
        assert user_texts(snapshot) == [texts[i]]
        (result,) = stored_results(snapshot)
        assert result.content == "Order 42 shipped." and not result.is_error
        assert answerable(snapshot)


# -- a force release at each kind of step -------------------------------------------------------


def _never() -> Awaitable[Any]:
    return asyncio.Event().wait()


class _Step:
    """An agent whose turn waits forever at one kind of step, and the event set when it
    gets there."""

    def __init__(self, kind: str, service: ConversationService) -> None:
        self.kind, self.service = kind, service
        self.there = asyncio.Event()
        if kind == "model":
            model = SlowModel(_never)
            self.there = model.started
            self.agent = _agent(model)
        elif kind == "tool":

            async def gate() -> str:
                """Waits forever."""
                self.there.set()
                await _never()
                return "never"

            self.agent = Agent(
                ScriptedClient(), tools=[gate], output=OutputSize.STANDARD, depth=Depth.IMMEDIATE
            )
            self.text = "Open the gate."
        elif kind == "pause":

            async def pause(seconds: float) -> None:
                self.there.set()
                await _never()

            self.agent = _agent(_FailsOnce(), async_sleep=pause)
        self.text = {"tool": "Use gate."}.get(kind, "Where is my order?")


class _FailsOnce(ScriptedClient):
    """Its first call fails retryably (the turn pauses before the next)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def _asend(self, request: Any, on_text: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise RetryableLLMError("overloaded, try again")
        return ScriptedClient._send(self, request)


@pytest.mark.parametrize("kind", ["model", "tool", "pause"])
def test_a_force_release_at_any_step_ends_the_turn_saved_and_released(
    service: ConversationService, kind: str
) -> None:
    async def main() -> str:
        step = _Step(kind, service)
        chat = step.agent.chat(service, user_id="alice")
        task = asyncio.ensure_future(chat.asend(step.text))
        await step.there.wait()
        assert service.force_release(chat.conversation_id, "alice") is not None
        with pytest.raises(TurnCancelledError, match="force-released by alice"):
            await task
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
        return chat.conversation_id

    cid = asyncio.run(main())
    snapshot = stored(service, cid, "alice")  # the boundary save, before the release
    assert user_texts(snapshot)[-1] in ("Use gate.", "Where is my order?")
    assert answerable(snapshot)
    assert service.owning_thinker(cid, "alice") is None


def test_a_force_release_while_the_obtain_waits_gives_up_the_obtain(
    service: ConversationService,
) -> None:
    holder = BasicThinker("alice")
    cid = holder.mint_conversation_id()
    held = service.obtain_conversation(None, holder).get(timeout=5)
    held.add_user_message("held")
    service.save_conversation(held, holder)
    chat = _agent(ScriptedClient()).chat(service, user_id="alice", conversation_id=cid)
    obtaining = asyncio.Event()
    obtain = service.obtain_async

    async def seen_obtain(*args: Any) -> Any:
        obtaining.set()
        return await obtain(*args)

    service.obtain_async = seen_obtain  # type: ignore[method-assign,assignment]

    async def main() -> None:
        task = asyncio.ensure_future(chat.asend("Hello?"))
        await obtaining.wait()
        chat.thinker.cancel_workflow("the user left")
        with pytest.raises(TurnCancelledError, match="the user left"):
            await task

    asyncio.run(main())
    assert service.owning_thinker(cid, "alice") is holder  # never granted to the turn
    service.release(holder)
    assert user_texts(stored(service, cid, "alice")) == ["held"]


def test_cancelling_the_task_during_the_model_call_raises_cancelled_after_the_save(
    service: ConversationService,
) -> None:
    async def main() -> str:
        model = SlowModel(_never)
        chat = _agent(model).chat(service, user_id="alice")
        task = asyncio.ensure_future(chat.asend("Where is my order?"))
        await model.started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return chat.conversation_id

    cid = asyncio.run(main())
    assert user_texts(stored(service, cid, "alice")) == ["Where is my order?"]
    assert service.owning_thinker(cid, "alice") is None


# -- a save is never cut short ------------------------------------------------------------------


def test_a_cancel_during_a_save_waits_for_its_commit(
    service: ConversationService, store: LmdbStore
) -> None:
    commits = store._directory.commits

    async def main() -> tuple[str, int]:
        chat = _agent(ScriptedClient()).chat(service, user_id="alice")
        await chat.asend("First.")
        commits._lock.acquire()  # the next commit waits here, as behind a long fsync
        task = asyncio.ensure_future(chat.asend("Second."))
        for _ in range(50):  # let the turn reach its save and queue it
            await asyncio.sleep(0)
        task.cancel()
        for _ in range(50):
            await asyncio.sleep(0)
        waited = not task.done()  # the cancel waits for the commit
        commits._lock.release()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert waited
        third = await chat.asend("Third.")  # the context knows the version it saved
        assert third.text
        return chat.conversation_id, 0

    cid, _ = asyncio.run(main())
    assert user_texts(stored(service, cid, "alice")) == ["First.", "Second.", "Third."]


# -- hostile saves ------------------------------------------------------------------------------


async def _first_saved(service: ConversationService) -> tuple[BasicThinker, Any, str]:
    """Alice's new conversation, owned, its first message saved on the loop."""
    thinker = BasicThinker("alice")
    cid = thinker.mint_conversation_id()
    context = await service.obtain_async(None, thinker)
    context.add_user_message("first")
    await service.save_async(context, thinker)
    return thinker, context, cid


def test_an_async_save_another_owner_beat_raises_stale_and_writes_nothing(
    service: ConversationService, store: LmdbStore
) -> None:
    async def main() -> None:
        thinker, context, cid = await _first_saved(service)
        snapshot = store.load(cid, "alice")
        assert snapshot is not None
        store.save_context(snapshot, "alice")  # another owner's save: version 2
        context.add_user_message("second")
        with pytest.raises(StaleVersionError):
            await service.save_async(context, thinker)
        stored_now = store.load(cid, "alice")
        assert stored_now is not None and stored_now.stored_version == 2
        assert [m.raw_content for m in stored_now.messages] == ["first"]
        assert service.owning_thinker(cid, "alice") is None  # the activation was dropped

    asyncio.run(main())


def test_an_async_save_of_a_value_that_will_not_encode_raises_and_writes_nothing(
    service: ConversationService, store: LmdbStore
) -> None:
    async def main() -> None:
        thinker, context, cid = await _first_saved(service)
        value: dict[str, Any] = {"ok": 1}
        context.add_message(OutgoingMessage("", [PojoBlock(value=value)]))
        value["bad"] = object()  # changed in place after it entered
        with pytest.raises(ValueError, match=cid):
            await service.save_async(context, thinker)
        snapshot = store.load(cid, "alice")
        assert snapshot is not None and snapshot.stored_version == 1
        assert len(snapshot.messages) == 1
        service.release(thinker)

    asyncio.run(main())


def test_the_store_async_saves_answer_as_the_sync_ones(store: LmdbStore) -> None:
    async def main() -> None:
        context = ConversationContext("c1", user_id="alice")
        context.add_user_message("hello")
        first = context.to_snapshot()
        assert await store.create_context_async(first, "alice") == 1
        again = msgspec.structs.replace(first, stored_version=1)
        assert await store.save_context_async(again, "alice") == 2
        with pytest.raises(StaleVersionError):
            await store.save_context_async(again, "alice")

    asyncio.run(main())
