"""Deferred updates (``LmdbStore.save_context_later``): queued without a wait, committed by
the next writer to lead (or by the wait itself), always in the order they were queued, and
refused or failed exactly as ``save_context`` would be, only later."""

from __future__ import annotations

import datetime as dt
import threading
from functools import partial
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.runtime import ConversationContext, IncomingMessage
from parlour.runtime.errors import IllegalStateError, StaleVersionError
from parlour.stores import LmdbStore
from parlour.stores.lmdb._group_commit import GroupCommit

from .test_group_commit import _Hooks


def _created(store: LmdbStore, cid: str = "c1", user: str = "alice") -> ConversationContext:
    context = ConversationContext(cid, user_id=user)
    context.add_user_message("first")
    context.stored_version = store.create_context(context.to_snapshot(), user)
    return context


def _numbered(applied: list[int], n: int) -> Any:
    """A write that puts key ``n`` and notes it in ``applied`` when it runs."""

    def write(txn: Any) -> int:
        applied.append(n)
        txn.put(str(n).encode(), b"v")
        return n

    return write


def _said(store: LmdbStore, cid: str = "c1", user: str = "alice") -> list[object]:
    snapshot = store.load(cid, user)
    assert snapshot is not None
    return [m.raw_content for m in snapshot.messages]


def test_a_deferred_update_waits_for_the_next_commit_and_shares_it_with_the_next_save(
    tmp_path: Path,
) -> None:
    with LmdbStore(tmp_path) as store:
        context = _created(store)
        env = store._directory.env
        commits_before = env.info()["last_txnid"]
        context.add_user_message("second")
        settle = store.save_context_later(context.to_snapshot(), "alice")
        context.stored_version += 1  # what the update will make
        assert _said(store) == ["first"]  # queued: nobody has led a commit since
        context.add_message(IncomingMessage("answer"))
        assert store.save_context(context.to_snapshot(), "alice") == 3
        assert settle() == 2
        assert _said(store) == ["first", "second", "answer"]
        assert env.info()["last_txnid"] == commits_before + 1  # one commit for both


def test_waiting_for_a_deferred_update_nobody_else_committed_leads_its_commit(
    tmp_path: Path,
) -> None:
    with LmdbStore(tmp_path) as store:
        context = _created(store)
        context.add_user_message("second")
        settle = store.save_context_later(context.to_snapshot(), "alice")
        assert settle() == 2 and settle() == 2  # waiting again answers the same
        assert _said(store) == ["first", "second"]
        assert store.version_of("c1", "alice") == 2


def test_a_deferred_update_from_a_stale_version_is_refused_when_waited_for(
    tmp_path: Path,
) -> None:
    with LmdbStore(tmp_path) as store:
        context = _created(store)
        stale = context.to_snapshot()
        context.add_user_message("moved on")
        context.stored_version = store.save_context(context.to_snapshot(), "alice")
        stale_settle = store.save_context_later(stale, "alice")
        with pytest.raises(StaleVersionError):
            stale_settle()
        assert _said(store) == ["first", "moved on"]  # nothing of the refused one


def test_a_deferred_update_by_another_user_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    with LmdbStore(tmp_path) as store:
        _created(store)  # alice's
        forged = ConversationContext("c1", user_id="mallory")
        forged.add_user_message("mine now")
        forged.stored_version = 1
        with pytest.raises(PermissionError):  # the snapshot names another user: at once
            store.save_context_later(forged.to_snapshot(), "alice")
        settle = store.save_context_later(forged.to_snapshot(), "mallory")
        with pytest.raises(PermissionError):  # the record is alice's: refused in the commit
            settle()
        assert _said(store) == ["first"] and store.version_of("c1", "alice") == 1


def test_close_commits_a_deferred_update_and_a_closed_or_read_only_store_refuses_one(
    tmp_path: Path,
) -> None:
    store = LmdbStore(tmp_path / "db")
    context = _created(store)
    context.add_user_message("second")
    settle = store.save_context_later(context.to_snapshot(), "alice")
    store.close()
    assert settle() == 2
    with pytest.raises(IllegalStateError, match="closed"):
        store.save_context_later(context.to_snapshot(), "alice")
    with LmdbStore(tmp_path / "db") as reopened:
        assert _said(reopened) == ["first", "second"]
    with LmdbStore(tmp_path / "db", readonly=True) as reader:
        with pytest.raises(IllegalStateError, match="read-only"):
            reader.save_context_later(context.to_snapshot(), "alice")
        assert _said(reader) == ["first", "second"]


@pytest.mark.parametrize(("max_batch", "batches"), [(1, 6), (2, 4), (64, 1)])
def test_writes_commit_in_the_order_they_were_queued_past_a_full_batch(
    tmp_path: Path, max_batch: int, batches: int
) -> None:
    """A writer that finds the lock free leads only after everything queued before it: its
    own write never overtakes its deferred ones, even with more queued than a batch takes."""
    env = lmdb.open(str(tmp_path), map_size=1 << 22, writemap=True)
    hooks = _Hooks(env)
    commits = GroupCommit(hooks, str(tmp_path), max_batch=max_batch)
    applied: list[int] = []
    numbered = partial(_numbered, applied)

    deferred = [commits.defer(numbered(n), 0) for n in range(5)]
    assert commits.submit(numbered(5), 0) == 5
    assert applied == [0, 1, 2, 3, 4, 5]
    assert [commits.settle(slot) for slot in deferred] == [0, 1, 2, 3, 4]
    assert hooks.committed_batches == batches  # none empty
    env.close()


def test_each_threads_writes_commit_in_its_own_order_under_contention(tmp_path: Path) -> None:
    """Eight threads each defer a write and then submit one, over and over, with batches
    of three: every write commits once, and each thread's in the order it queued them."""
    env = lmdb.open(str(tmp_path), map_size=1 << 24, writemap=True)
    commits = GroupCommit(_Hooks(env), str(tmp_path), max_batch=3)
    applied: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def write_of(thread: int, n: int) -> Any:
        def write(txn: Any) -> None:
            applied.append((thread, n))
            txn.put(f"{thread}-{n}".encode(), b"v")

        return write

    def run(thread: int) -> None:
        try:
            for n in range(0, 100, 2):
                slot = commits.defer(write_of(thread, n), 0)
                commits.submit(write_of(thread, n + 1), 0)
                assert slot.done()  # committed with or before the submitted one
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    for thread in range(8):
        assert [n for t, n in applied if t == thread] == list(range(100))
    env.close()


@pytest.mark.parametrize("cid", ["", "a\x00b", "x" * 600, "lone\ud800"])
def test_a_deferred_update_with_a_hostile_id_is_refused_at_once_and_queues_nothing(
    tmp_path: Path, cid: str
) -> None:
    with LmdbStore(tmp_path) as store:
        context = _created(store)
        hostile = ConversationContext(cid, user_id="alice")
        hostile.add_user_message("x")
        hostile.stored_version = 1
        with pytest.raises(ValueError):
            store.save_context_later(hostile.to_snapshot(), "alice")
        context.add_user_message("second")
        assert store.save_context(context.to_snapshot(), "alice") == 2  # nothing stood ahead
        assert _said(store) == ["first", "second"]


def test_a_deferred_50_mb_message_grows_the_map_in_the_commit_it_shares(tmp_path: Path) -> None:
    with LmdbStore(tmp_path, map_size=1 << 20) as store:  # a 1 MiB map to start with
        context = _created(store)
        big = "x" * (50 << 20)
        context.add_user_message(big)
        settle = store.save_context_later(context.to_snapshot(), "alice")
        context.stored_version += 1
        context.add_message(IncomingMessage("answer"))
        assert store.save_context(context.to_snapshot(), "alice") == 3
        assert settle() == 2
        said = _said(store)
        assert len(said) == 3 and said[1] == big and said[2] == "answer"


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    max_batch=st.integers(min_value=1, max_value=4),
    steps=st.lists(st.sampled_from(["defer", "submit", "settle"]), max_size=30),
)
def test_any_mix_of_deferred_submitted_and_settled_writes_commits_each_once_in_queue_order(
    tmp_path_factory: pytest.TempPathFactory, max_batch: int, steps: list[str]
) -> None:
    """From one thread, whatever the mix and the batch size: every write is applied once,
    in the order it was queued (a submitted one after every write deferred before it), and
    each wait answers its own write's result."""
    path = tmp_path_factory.mktemp("commits")
    env = lmdb.open(str(path), map_size=1 << 22, writemap=True)
    commits = GroupCommit(_Hooks(env), str(path), max_batch=max_batch)
    applied: list[int] = []
    numbered = partial(_numbered, applied)

    unsettled: list[tuple[int, Any]] = []
    for n, step in enumerate(steps):
        if step == "defer":
            unsettled.append((n, commits.defer(numbered(n), 0)))
        elif step == "submit":
            assert commits.submit(numbered(n), 0) == n
            assert applied[-1] == n  # everything queued before it went first
        elif unsettled:
            m, slot = unsettled.pop(0)
            assert commits.settle(slot) == m
    for m, slot in unsettled:
        assert commits.settle(slot) == m
    queued = [n for n, step in enumerate(steps) if step != "settle"]
    assert applied == queued
    env.close()


def test_saves_committed_together_share_one_moment_and_one_listing_entry(tmp_path: Path) -> None:
    """A clock that moves on at every read: the deferred save and the save that commits with
    it still carry one time (the batch's), and the conversation is listed once, at it."""
    ticks = iter(
        dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=s) for s in range(99)
    )
    with LmdbStore(tmp_path, now=lambda: next(ticks)) as store:
        context = _created(store)  # at second 0
        context.add_user_message("second")
        settle = store.save_context_later(context.to_snapshot(), "alice")
        context.stored_version += 1
        context.add_message(IncomingMessage("answer"))
        store.save_context(context.to_snapshot(), "alice")  # leads both: one batch
        assert settle() == 2
        times = {v.version: v.saved_at for v in store.get_version_history("c1", "alice")}
        assert times[2] == times[3] > times[1]
        listed = store.list_conversations("alice")
        assert [(s.conversation_id, s.updated_at) for s in listed] == [("c1", times[3])]
