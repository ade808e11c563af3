"""ConversationService: identity, the save discipline, restore, release, sweep, shutdown."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest
from loguru import logger

from parlour.actors import BasicThinker, ConversationService, TextDelta
from parlour.runtime import Depth, Grade, OutputSize
from parlour.runtime.blocks import ToolDefinitionBlock
from parlour.runtime.errors import ConversationUnavailableError, IllegalStateError
from parlour.runtime.testing import FakeClock
from parlour.stores import LmdbStore, MemorySessionCache, MemoryStore

from .conftest import CountingStore


def test_a_minted_id_has_the_documented_shape() -> None:
    thinker = BasicThinker("alice")
    assert thinker.conversation_id == thinker.job_id
    cid = thinker.mint_conversation_id()
    assert cid.startswith("BasicThinker-conv-") and cid != thinker.job_id
    assert thinker.conversation_id == cid and thinker.is_conversation_minted()
    thinker.set_conversation_id("other")
    assert not thinker.is_conversation_minted()


def test_obtaining_a_minted_id_creates_an_empty_conversation_stamped_for_the_thinker(
    counted_service: ConversationService,
) -> None:
    thinker = BasicThinker(
        "alice",
        grade=Grade.SMALL,
        depth=Depth.STANDARD,
        output_declaration=OutputSize.COMPACT,
        interactive=True,
    )
    cid = thinker.mint_conversation_id()
    context = counted_service.obtain_conversation(None, thinker).get(timeout=5)
    assert context.conversation_id == cid and context.messages == []
    assert (context.grade, context.depth, context.output_declaration, context.interactive) == (
        Grade.SMALL,
        Depth.STANDARD,
        OutputSize.COMPACT,
        True,
    )
    assert context.user_id == "alice"


def test_adopting_an_id_nobody_holds_fails_and_adds_nothing(
    counted_service: ConversationService,
) -> None:
    before = counted_service.get_stats().total
    thinker = BasicThinker("alice")
    thinker.set_conversation_id("ghost")
    with pytest.raises(
        ConversationUnavailableError,
        match=re.escape(
            "Cannot resume conversation ghost: it is not in memory and no store holds it."
        ),
    ):
        counted_service.obtain_conversation(None, thinker).get(timeout=5)
    assert counted_service.get_stats().total == before


def test_the_first_save_of_a_minted_conversation_creates_and_later_ones_update(
    counted_service: ConversationService, counting: CountingStore
) -> None:
    thinker = BasicThinker("alice")
    thinker.mint_conversation_id()
    context = counted_service.obtain_conversation(None, thinker).get(timeout=5)
    context.add_user_message("hello")
    for _ in range(3):
        counted_service.save_conversation(context, thinker)
    assert (counting.calls["create"], counting.calls["save"]) == (1, 2)
    counted_service.release(thinker)
    assert (counting.calls["create"], counting.calls["save"]) == (1, 2)


def test_a_temporary_conversation_is_never_persisted_nor_looked_up(
    counted_service: ConversationService, counting: CountingStore
) -> None:
    thinker = BasicThinker("alice")
    context = counted_service.obtain_conversation(None, thinker).get(timeout=5)
    assert context.temporary
    for _ in range(3):
        counted_service.save_conversation(context, thinker)
    assert counting.calls == {"create": 0, "save": 0, "load": 0}


def test_an_adopted_conversation_only_ever_updates(
    counted_service: ConversationService, counting: CountingStore
) -> None:
    minter = BasicThinker("alice")
    cid = minter.mint_conversation_id()
    context = counted_service.obtain_conversation(None, minter).get(timeout=5)
    context.add_user_message("hello")
    counted_service.save_conversation(context, minter)
    counted_service.release(minter, retain=0)
    adopter = BasicThinker("alice")
    adopter.set_conversation_id(cid)
    context = counted_service.obtain_conversation(None, adopter).get(timeout=5)
    assert counting.load_callers[-1] is adopter
    counted_service.save_conversation(context, adopter)
    counted_service.save_conversation(context, adopter)
    assert (counting.calls["create"], counting.calls["save"]) == (1, 2)


def test_saving_without_a_store_or_a_thinker_is_a_no_op() -> None:
    service = ConversationService(cleanup_interval_s=0)
    thinker = BasicThinker("alice")
    thinker.mint_conversation_id()
    context = service.obtain_conversation(None, thinker).get(timeout=5)
    service.save_conversation(context, thinker)
    service.save_conversation(None, thinker)
    service.save_conversation(context, None)
    service.release(thinker)
    service.stop()


def test_obtain_and_release_without_a_save_leaves_the_store_empty(
    counted_service: ConversationService, counting: CountingStore
) -> None:
    thinker = BasicThinker("alice")
    cid = thinker.mint_conversation_id()
    counted_service.obtain_conversation(None, thinker).get(timeout=5)
    counted_service.release(thinker)
    assert not counting.exists(cid, "alice")


def test_a_conversation_survives_a_restart_and_restores_equal(tmp_path: Path) -> None:
    tool = ToolDefinitionBlock(name="get_time", description="now", schema_json="{}")
    thinker = BasicThinker("alice", tools=[tool])
    cid = thinker.mint_conversation_id()
    store = LmdbStore(tmp_path)
    service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
    context = service.obtain_conversation(None, thinker).get(timeout=5)
    context.put_main_objective("task", "Be brief.")
    context.add_tools(thinker.tools)
    context.add_user_message("What time is it?")
    service.save_conversation(context, thinker)
    before = context.to_snapshot()
    service.release(thinker)
    service.stop()
    store.close()

    store = LmdbStore(tmp_path)
    service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
    resumed = BasicThinker("alice", tools=[tool], workflow_id=thinker.workflow_id)
    resumed.set_conversation_id(cid)
    restored = service.obtain_conversation(None, resumed).get(timeout=5)
    assert restored.to_snapshot() == before
    assert not restored.is_frozen()
    service.release(resumed)
    service.stop()
    store.close()


def test_another_users_conversation_cannot_be_obtained_or_saved(
    service: ConversationService,
) -> None:
    owner = BasicThinker("alice")
    cid = owner.mint_conversation_id()
    context = service.obtain_conversation(None, owner).get(timeout=5)
    context.add_user_message("mine")
    service.save_conversation(context, owner)
    service.release(owner, retain=0)  # evicted: the next obtain goes to the store
    intruder = BasicThinker("mallory")
    intruder.set_conversation_id(cid)
    with pytest.raises(PermissionError):
        service.obtain_conversation(None, intruder).get(timeout=5)
    with pytest.raises(PermissionError):
        service.save_conversation(context, intruder)
    warm = BasicThinker("alice")
    warm.set_conversation_id(cid)
    service.obtain_conversation(None, warm).get(timeout=5)
    service.release(warm)  # now live in memory, unowned
    with pytest.raises(PermissionError):
        service.obtain_conversation(None, intruder).get(timeout=5)


def test_a_save_refreshes_the_session_cache(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path)
    cache = MemorySessionCache()
    service = ConversationService(store, cache, cleanup_interval_s=0)
    thinker = BasicThinker("alice")
    cid = thinker.mint_conversation_id()
    context = service.obtain_conversation(None, thinker).get(timeout=5)
    context.add_user_message("one")
    service.save_conversation(context, thinker)
    context.add_user_message("two")
    service.save_conversation(context, thinker)
    cached = cache.get(cid, "alice")
    assert cached is not None and len(cached.messages) == 2
    service.release(thinker)
    service.stop()
    store.close()


def test_release_with_zero_retention_evicts_and_with_retention_keeps_it_idle(
    service: ConversationService,
) -> None:
    a = BasicThinker("alice", retain_duration=dt.timedelta(0))
    a.mint_conversation_id()
    service.obtain_conversation(None, a).get(timeout=5)
    assert service.get_stats().total == 1
    service.release(a)
    assert service.get_stats().total == 0
    b = BasicThinker("alice")
    b.mint_conversation_id()
    service.obtain_conversation(None, b).get(timeout=5)
    service.release(b, retain=dt.timedelta(minutes=5))
    stats = service.get_stats()
    assert (stats.owned, stats.idle) == (0, 1)
    assert str(stats) == "1 total (0 owned, 1 idle)"


def test_a_release_by_a_non_owner_changes_nothing(service: ConversationService) -> None:
    owner = BasicThinker("alice")
    cid = owner.mint_conversation_id()
    service.obtain_conversation(None, owner).get(timeout=5)
    stranger = BasicThinker("alice")
    stranger.set_conversation_id(cid)
    service.release(stranger)
    assert service.owning_thinker(cid, "alice") is owner
    assert service.owning_thinker(cid, "somebody-else") is None


def test_the_sweep_evicts_only_expired_unowned_conversations(
    service: ConversationService, clock: FakeClock
) -> None:
    idle = BasicThinker("alice")
    idle.mint_conversation_id()
    service.obtain_conversation(None, idle).get(timeout=5)
    service.release(idle, retain=60)
    busy = BasicThinker("alice", retain_duration=dt.timedelta(seconds=1))
    busy.mint_conversation_id()
    service.obtain_conversation(None, busy).get(timeout=5)
    assert service.sweep_expired() == 0
    clock.advance(61)
    assert service.sweep_expired() == 1
    assert service.get_stats().total == 1  # the owned one survives past its safety net
    gone = BasicThinker("alice")
    gone.set_conversation_id(idle.conversation_id)
    service.store.delete(idle.conversation_id, "alice") if service.store else None
    with pytest.raises(ConversationUnavailableError):
        service.obtain_conversation(None, gone).get(timeout=5)


def test_release_all_for_job_evicts_what_the_job_still_owns(
    service: ConversationService,
) -> None:
    dead = BasicThinker("alice")
    owned = dead.mint_conversation_id()
    service.obtain_conversation(None, dead).get(timeout=5)
    assert service.release_all_for_job(dead.job_id) == [owned]
    assert service.owning_thinker(owned, "alice") is None
    assert service.get_stats().total == 0
    polite = BasicThinker("alice")
    polite.mint_conversation_id()
    service.obtain_conversation(None, polite).get(timeout=5)
    service.release(polite, retain=300)
    assert service.release_all_for_job(polite.job_id) == []
    assert service.get_stats().total == 1


def test_stop_refuses_new_obtains_with_an_error_log(tmp_path: Path) -> None:
    records: list[str] = []
    logger.enable("parlour")
    sink = logger.add(lambda m: records.append(m.record["message"]), level="ERROR")
    try:
        service = ConversationService(cleanup_interval_s=0)
        kept = BasicThinker("alice")
        kept.mint_conversation_id()
        service.obtain_conversation(None, kept).get(timeout=5)
        service.release(kept, retain=300)
        service.stop()
        assert service.is_stopping()
        late = BasicThinker("alice")
        future = service.obtain_conversation("late-id", late)
        with pytest.raises(IllegalStateError, match="ConversationService is shutting down"):
            future.get(timeout=1)
        assert "[ConvSvc] Shutting down, dropping request for late-id" in records
        service.stop()
        assert service.is_stopping()
    finally:
        logger.remove(sink)
        logger.disable("parlour")


def test_many_threads_obtain_distinct_conversations_at_once(
    service: ConversationService,
) -> None:
    import concurrent.futures

    thinkers = [BasicThinker(f"user-{i}") for i in range(50)]
    for t in thinkers:
        t.mint_conversation_id()
    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        contexts = list(
            pool.map(lambda t: service.obtain_conversation(None, t).get(timeout=5), thinkers)
        )
    assert len({c.conversation_id for c in contexts}) == 50
    assert service.get_stats().total == 50


def test_a_thinker_keeps_the_transcript_of_its_last_run_after_release(
    service: ConversationService,
) -> None:
    thinker = BasicThinker("alice")
    thinker.mint_conversation_id()
    assert thinker.transcript() is None
    context = service.obtain_conversation(None, thinker).get(timeout=5)
    context.add_user_message("How many days until the end of the year?")
    service.release(thinker)
    expected = "[user]\nHow many days until the end of the year?\n"
    follower = BasicThinker("alice")
    follower.set_conversation_id(thinker.conversation_id)
    later = service.obtain_conversation(None, follower).get(timeout=5)
    later.add_user_message("and after that?")  # changes after release do not leak in
    assert thinker.transcript() == expected


def test_evicting_an_owned_conversation_is_a_no_op(service: ConversationService) -> None:
    thinker = BasicThinker("alice")
    cid = thinker.mint_conversation_id()
    service.obtain_conversation(None, thinker).get(timeout=5)
    assert service.evict_conversation(cid) is False
    assert service.owning_thinker(cid, "alice") is thinker
    service.release(thinker, retain=60)
    assert service.evict_conversation(cid) is True
    assert service.get_stats().total == 0


def test_remove_refuses_foreign_users_and_owned_conversations_then_deletes_everywhere(
    service: ConversationService,
) -> None:
    thinker = BasicThinker("alice")
    cid = thinker.mint_conversation_id()
    context = service.obtain_conversation(None, thinker).get(timeout=5)
    context.add_user_message("to be removed")
    service.save_conversation(context, thinker)
    with pytest.raises(PermissionError):
        service.remove_conversation(cid, "mallory")
    with pytest.raises(IllegalStateError, match=f"while owned by job {thinker.job_id}"):
        service.remove_conversation(cid, "alice")
    service.release(thinker, retain=60)
    service.remove_conversation(cid, "alice")
    assert service.get_stats().total == 0
    assert service.store is not None and not service.store.exists(cid, "alice")
    assert service.session is not None and service.session.get(cid, "alice") is None


def test_a_corrupt_stored_record_fails_its_obtain_and_nothing_else(tmp_path: Path) -> None:
    import lmdb

    from parlour.runtime.errors import CorruptSnapshotError

    store = LmdbStore(tmp_path)
    service = ConversationService(store, cleanup_interval_s=0)
    ids = []
    for _ in range(2):
        t = BasicThinker("alice")
        ids.append(t.mint_conversation_id())
        context = service.obtain_conversation(None, t).get(timeout=5)
        context.add_user_message("kept")
        service.save_conversation(context, t)
        service.release(t, retain=0)
    service.stop()
    store.close()
    env = lmdb.open(str(tmp_path), max_dbs=4)
    with env.begin(write=True) as txn:
        txn.put(ids[0].encode(), b"{broken", db=env.open_db(b"bodies", txn=txn))
    env.close()

    store = LmdbStore(tmp_path)
    service = ConversationService(store, cleanup_interval_s=0)
    broken, fine = BasicThinker("alice"), BasicThinker("alice")
    broken.set_conversation_id(ids[0])
    fine.set_conversation_id(ids[1])
    with pytest.raises(CorruptSnapshotError, match=ids[0]):
        service.obtain_conversation(None, broken).get(timeout=5)
    assert service.obtain_conversation(None, fine).get(timeout=5).messages[0].raw_content == "kept"
    assert service.get_stats().total == 1
    service.release(fine)
    service.stop()
    store.close()


class _VersionCounting(MemoryStore):
    """A MemoryStore that counts how often it is asked a record's stored version."""

    def __init__(self, shared: bool) -> None:
        super().__init__()
        self.shared = shared
        self.version_asks = 0

    def version_of(self, conversation_id: str, user_id: str) -> int | None:
        self.version_asks += 1
        return super().version_of(conversation_id, user_id)


@pytest.mark.parametrize("shared", [False, True])
def test_only_a_store_shared_between_processes_is_asked_the_version_of_a_warm_copy(
    shared: bool,
) -> None:
    store = _VersionCounting(shared)
    with ConversationService(store, MemorySessionCache(), cleanup_interval_s=0) as service:
        thinker = BasicThinker("alice")
        thinker.mint_conversation_id()
        context = service.obtain_conversation(None, thinker).get(timeout=5)
        context.add_user_message("kept warm")
        service.save_conversation(context, thinker)
        service.release(thinker)
        store.version_asks = 0
        for _ in range(3):
            again = service.obtain_conversation(None, thinker).get(timeout=5)
            assert [m.raw_content for m in again.messages] == ["kept warm"]
            service.release(thinker)
    assert store.version_asks == (3 if shared else 0)


def test_the_live_cap_evicts_the_least_recently_obtained_and_a_warm_obtain_refreshes_it() -> None:
    store = CountingStore()
    with ConversationService(store, cleanup_interval_s=0, max_live=2) as service:
        thinkers = {name: BasicThinker("alice") for name in "abc"}

        def turn(name: str) -> None:
            thinker = thinkers[name]
            context = service.obtain_conversation(None, thinker).get(timeout=5)
            context.add_user_message(f"to {name}")
            service.save_conversation(context, thinker)
            service.release(thinker)

        for t in thinkers.values():
            t.mint_conversation_id()
        turn("a")
        turn("b")
        turn("a")  # warm: a is now the most recently used, b the least
        turn("c")  # past the cap: b goes, a stays
        store.calls["load"] = 0
        turn("a")
        assert store.calls["load"] == 0  # still live
        turn("b")
        assert store.calls["load"] == 1  # it had been evicted
        assert service.get_stats().total == 2


def test_a_sweep_in_slices_evicts_every_expired_conversation_and_spares_the_owned(
    service: ConversationService, clock: FakeClock
) -> None:
    kept = []
    for i in range(150):  # more than two slices
        thinker = BasicThinker("alice", retain_duration=dt.timedelta(seconds=10))
        thinker.mint_conversation_id()
        service.obtain_conversation(None, thinker).get(timeout=5)
        if i % 50 == 0:
            kept.append(thinker)  # still owned: never swept
        else:
            service.release(thinker)
    clock.advance(11)
    assert service.sweep_expired() == 147
    stats = service.get_stats()
    assert (stats.total, stats.owned) == (3, 3)
    for thinker in kept:
        service.release(thinker)
    assert service.sweep_expired() == 0  # released just now: retention counts from here
    clock.advance(11)
    assert service.sweep_expired() == 3
    assert service.get_stats().total == 0


def test_a_conversation_held_by_a_plain_thinker_joins_to_nothing_and_refuses_an_offer(
    service: ConversationService,
) -> None:
    owner = BasicThinker("alice")
    cid = owner.mint_conversation_id()
    service.obtain_conversation(None, owner).get(timeout=5)

    async def joined() -> list[object]:
        return [event async for event in service.join(cid, "alice")]

    assert service.owning_thinker(cid, "alice") is owner  # it is owned, by a plain thinker
    assert asyncio.run(joined()) == []
    assert service.offer(cid, "alice", "anyone there?") is False
    service.release(owner)


class _Hosting(BasicThinker):
    """A thinker that is no agent's but hosts a turn: it has the two methods joining needs."""

    def __init__(self, user_id: str) -> None:
        super().__init__(user_id)
        self.offered: list[str] = []

    async def follow(self, after: int | None = None) -> AsyncGenerator[TextDelta, None]:
        for n, text in enumerate(self.offered, 1):
            if after is None or n > after:
                yield TextDelta(text=text, seq=n)

    def offer(self, text: str) -> bool:
        self.offered.append(text)
        return True


def test_any_owning_thinker_that_can_be_followed_and_offered_to_is_joined_for_its_user_only(
    service: ConversationService,
) -> None:
    owner = _Hosting("alice")
    cid = owner.mint_conversation_id()
    service.obtain_conversation(None, owner).get(timeout=5)

    async def joined(user_id: str, after: int | None = None) -> list[object]:
        return [event async for event in service.join(cid, user_id, after=after)]

    assert service.offer(cid, "alice", "first") and service.offer(cid, "alice", "second")
    assert not service.offer(cid, "mallory", "let me in")
    first, second = TextDelta(text="first", seq=1), TextDelta(text="second", seq=2)
    assert asyncio.run(joined("alice")) == [first, second]
    assert asyncio.run(joined("alice", after=1)) == [second]
    assert asyncio.run(joined("mallory")) == []
    service.release(owner)
    assert not service.offer(cid, "alice", "after the turn")  # nobody owns it now
    assert owner.offered == ["first", "second"]
