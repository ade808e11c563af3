"""Lifecycle a Python user expects; the transcript at release; identity decides persistence."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import pytest

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime import ConversationContext
from parlour.runtime.blocks import TextBlock
from parlour.runtime.errors import IllegalStateError
from parlour.stores import LmdbStore, MemorySessionCache, MemoryStore

from .conftest import CountingStore


def test_after_stop_queries_answer_empty_release_is_a_no_op_and_obtains_refuse(
    tmp_path: Path,
) -> None:
    store = LmdbStore(tmp_path / "db")
    with ConversationService(store, cleanup_interval_s=0, shutdown_grace_s=0.05) as service:
        thinker = BasicThinker("alice")
        cid = thinker.mint_conversation_id()
        context = service.obtain_conversation(None, thinker).get(timeout=5)
        service.save_conversation(context, thinker)
        assert service.get_stats().total == 1
    assert service.get_stats().total == 0
    assert service.owning_thinker(cid, "alice") is None
    assert service.sweep_expired() == 0
    assert service.evict_conversation(cid) is False
    assert service.release_all_for_job(thinker.job_id) == []
    service.release(thinker)  # a turn's finally after shutdown: no crash
    with pytest.raises(IllegalStateError, match=r"^ConversationService is shutting down$"):
        service.obtain_conversation(None, thinker).get(timeout=1)
    with pytest.raises(IllegalStateError, match=r"^ConversationService is shutting down$"):
        service.remove_conversation(cid, "alice")
    assert store.version_of(cid, "alice") == 1  # the acknowledged save is durable
    store.close()


def test_the_service_is_an_async_context_manager() -> None:
    async def main() -> ConversationService:
        async with ConversationService(cleanup_interval_s=0, shutdown_grace_s=0.05) as service:
            thinker = BasicThinker("alice")
            await service.obtain_async(None, thinker)
            assert service.get_stats().owned == 1
        return service

    service = asyncio.run(main())
    assert service.is_stopping() and service.get_stats().total == 0


def test_calls_racing_stop_answer_or_refuse_cleanly(tmp_path: Path) -> None:
    service = ConversationService(MemoryStore(), cleanup_interval_s=0, shutdown_grace_s=0.05)
    unexpected: list[BaseException] = []
    start = threading.Barrier(9)

    def turns(n: int) -> None:
        start.wait()
        for _ in range(50):
            thinker = BasicThinker(f"user-{n}")
            thinker.mint_conversation_id()
            try:
                context = service.obtain_conversation(None, thinker).get(timeout=5)
                service.save_conversation(context, thinker)
            except IllegalStateError as exc:
                assert "shutting down" in str(exc)
            except BaseException as exc:  # anything else is a bug
                unexpected.append(exc)
            finally:
                service.release(thinker, retain=0)
                service.get_stats()
                service.owning_thinker(thinker.conversation_id, thinker.user_id)

    workers = [threading.Thread(target=turns, args=(n,)) for n in range(8)]
    for w in workers:
        w.start()
    start.wait()
    service.stop()
    for w in workers:
        w.join(timeout=10)
    assert unexpected == []
    assert service.get_stats().total == 0


def test_a_process_that_never_calls_stop_still_exits(tmp_path: Path) -> None:
    script = (
        "from parlour.actors import BasicThinker, ConversationService\n"
        "s = ConversationService()\n"
        "t = BasicThinker('alice'); t.mint_conversation_id()\n"
        "s.obtain_conversation(None, t).get(timeout=5)\n"
        "print('done')\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "done"


def _owned(service: ConversationService) -> tuple[BasicThinker, ConversationContext]:
    """A new stored conversation of alice's, obtained by a new thinker."""
    thinker = BasicThinker("alice")
    thinker.mint_conversation_id()
    return thinker, service.obtain_conversation(None, thinker).get(timeout=5)


def test_the_transcript_is_there_when_a_retaining_release_returns_and_edits_do_not_leak(
    service: ConversationService,
) -> None:
    thinker, context = _owned(service)
    message = context.add_user_message("How many days until the end of the year?")
    service.release(thinker, retain=60)
    expected = "[user]\nHow many days until the end of the year?\n"
    assert thinker.transcript() == expected  # no round trip waited for
    message.blocks.append(TextBlock(text="edited in place afterwards"))
    context.add_user_message("and appended afterwards")
    assert thinker.transcript() == expected


def test_the_transcript_at_release_shows_changes_made_after_the_last_save(
    service: ConversationService,
) -> None:
    thinker, context = _owned(service)
    first = context.add_user_message("first")
    replaced = context.add_user_message("second")
    service.save_conversation(context, thinker)
    first.blocks.append(TextBlock(text="edited after the save"))
    context.messages[1] = type(replaced)("third")  # a different message in the same place
    context.add_user_message("fourth")
    service.release(thinker, retain=60)
    assert thinker.transcript() == (
        "[user]\nfirst\nedited after the save\n[user]\nthird\n[user]\nfourth\n"
    )


def test_identity_decides_persistence_not_the_temporary_flag(
    counted_service: ConversationService, counting: CountingStore
) -> None:
    temporary = BasicThinker("alice")  # keyed by its job id
    context = counted_service.obtain_conversation(None, temporary).get(timeout=5)
    context.temporary = False
    context.add_user_message("scratch")
    counted_service.save_conversation(context, temporary)  # never persisted, never an error
    assert counting.calls == {"create": 0, "save": 0, "load": 0}
    durable = BasicThinker("alice")
    cid = durable.mint_conversation_id()
    minted = counted_service.obtain_conversation(None, durable).get(timeout=5)
    minted.temporary = True
    counted_service.save_conversation(minted, durable)
    assert counting.calls["create"] == 1 and counting.version_of(cid, "alice") == 1


def test_a_stopped_service_goes_with_its_last_reference_and_no_store_holds_it_back(
    tmp_path: Path,
) -> None:
    """A service that saved (deferred and waited) and stopped is no reference
    cycle, nor is its store: each goes as soon as nothing holds it, the cycle collector
    off. A store that lives on does not keep the stopped service alive: with no session
    cache, the service takes its delete listener back when it stops; with one, the
    listener stays for the cache alone, so a delete after the service is gone still
    clears the cache a later service would read."""
    gc.collect()
    gc.disable()
    try:
        store = LmdbStore(tmp_path / "db")
        for session in (MemorySessionCache(), None):
            service = ConversationService(store, session, cleanup_interval_s=30)
            thinker = BasicThinker("alice")
            cid = thinker.mint_conversation_id()
            context = service.obtain_conversation(None, thinker).get(timeout=5)
            context.add_user_message("First.")
            service.save_conversation(context, thinker)
            context.add_user_message("Second.")
            service.save_conversation(context, thinker, wait=False)
            context.add_user_message("Third.")
            service.save_conversation(context, thinker)  # settles the deferred one, caches
            service.release(thinker)
            service.stop()
            gone = weakref.ref(service)
            del service, context
            assert gone() is None
            if session is not None:
                assert session.get(cid, "alice") is not None
                assert len(store._listeners) == 1  # for the cache
                assert store.delete(cid, "alice")
                assert session.get(cid, "alice") is None  # the delete reached it
                store.remove_delete_listener(store._listeners._all[0])
            else:
                assert len(store._listeners) == 0  # taken back at stop
                assert store.delete(cid, "alice")
        gone_store = weakref.ref(store)
        store.close()
        del store
        assert gone_store() is None
    finally:
        gc.enable()
