"""The group commit: a write that fails rolls back alone, only its caller hears of it, and
close() commits or refuses every queued write cleanly."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import lmdb
import pytest

from parlour.runtime import ConversationContext
from parlour.runtime.errors import IllegalStateError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import LmdbStore, _waiting
from parlour.stores.lmdb import _group_commit
from parlour.stores.lmdb._group_commit import GroupCommit


class _Hooks:
    def __init__(self, env: Any) -> None:
        self.env = env
        self.committed_batches = 0
        self.failed_batches = 0
        self.discarded_batches = 0

    def begin(self, write: bool, parent: Any) -> Any:
        return self.env.begin(write=write, parent=parent)

    def make_room(self, incoming: int) -> None:
        pass

    def grow(self) -> None:
        self.env.set_mapsize(self.env.info()["map_size"] * 2)

    def attempt(self) -> None:
        pass

    def committed(self) -> None:
        self.committed_batches += 1

    def failed(self) -> None:
        self.failed_batches += 1

    def discarded(self) -> None:
        self.discarded_batches += 1


def _put(key: bytes) -> Any:
    def write(txn: Any) -> bytes:
        txn.put(key, b"v")
        return key

    return write


def _put_then_fail(txn: Any) -> None:
    txn.put(b"partial-1", b"v")
    txn.put(b"partial-2", b"v")
    raise RuntimeError("failed part-way")


def test_a_write_failing_part_way_rolls_back_alone_and_its_batch_commits(tmp_path: Path) -> None:
    env = lmdb.open(str(tmp_path), map_size=1 << 22)
    hooks = _Hooks(env)
    commits = GroupCommit(hooks, str(tmp_path), max_batch=64)
    # two writers queued behind the commit lock, as writers that lost the race for it are;
    # the third submit drains all three into one batch
    first: Future[Any] = Future()
    failing: Future[Any] = Future()
    commits._queue.put((_put(b"before"), first, 0))
    commits._queue.put((_put_then_fail, failing, 0))
    assert commits.submit(_put(b"after"), 0) == b"after"
    assert first.result() == b"before"
    with pytest.raises(RuntimeError, match="failed part-way"):
        failing.result()
    assert (hooks.committed_batches, hooks.failed_batches) == (1, 0)
    with env.begin() as txn:
        assert txn.get(b"before") == txn.get(b"after") == b"v"
        assert txn.get(b"partial-1") is None and txn.get(b"partial-2") is None
    env.close()


def test_a_write_failing_part_way_alone_in_its_batch_leaves_nothing(tmp_path: Path) -> None:
    env = lmdb.open(str(tmp_path), map_size=1 << 22)
    hooks = _Hooks(env)
    commits = GroupCommit(hooks, str(tmp_path), max_batch=64)
    with pytest.raises(RuntimeError, match="failed part-way"):
        commits.submit(_put_then_fail, 0)
    assert commits.submit(_put(b"next"), 0) == b"next"
    with env.begin() as txn:
        assert txn.get(b"partial-1") is None and txn.get(b"partial-2") is None
        assert txn.get(b"next") == b"v"
    env.close()


def _snapshot(cid: str, text: str = "hello", version: int = 0) -> ConversationPersistenceSnapshot:
    context = ConversationContext(cid, user_id="alice")
    context.add_user_message(text)
    context.stored_version = version
    return context.to_snapshot()


@pytest.mark.parametrize("size", [503, 507, 511])
def test_an_id_that_fits_the_key_limit_but_not_its_message_keys_leaves_nothing(
    tmp_path: Path, size: int
) -> None:
    with LmdbStore(tmp_path) as store:
        with pytest.raises(ValueError, match="at most 502 bytes"):
            store.create_context(_snapshot("x" * size), "alice")
        assert store.create_context(_snapshot("fine"), "alice") == 1
        assert store.statistics().conversations == 1
        assert [s.conversation_id for s in store.list_conversations("alice")] == ["fine"]
    env = lmdb.open(str(tmp_path), max_dbs=8, readonly=True)
    with env.begin() as txn:
        for name in (b"heads", b"bodies", b"messages"):
            keys = [bytes(k) for k, _ in txn.cursor(db=env.open_db(name, txn=txn))]
            assert all(k.startswith(b"fine") for k in keys), name
    env.close()


def test_close_commits_or_refuses_every_racing_write_and_loses_no_acknowledged_one(
    tmp_path: Path,
) -> None:
    store = LmdbStore(tmp_path)
    writers, started = 8, threading.Barrier(9)
    acknowledged: dict[str, int] = {}
    unexpected: list[BaseException] = []
    first_saves = threading.Semaphore(0)

    def work(n: int) -> None:
        cid = f"c{n}"
        try:
            version = store.create_context(_snapshot(cid), "alice")
            acknowledged[cid] = version
            first_saves.release()
            started.wait()
            while True:
                version = store.save_context(_snapshot(cid, f"turn {version}", version), "alice")
                acknowledged[cid] = version
                assert store.load(cid, "alice") is not None
        except IllegalStateError:
            return
        except BaseException as exc:
            unexpected.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for _ in range(writers):
        first_saves.acquire()
    started.wait()
    store.close()
    for t in threads:
        t.join()
    assert unexpected == []
    with LmdbStore(tmp_path) as reopened:
        for cid, version in acknowledged.items():
            assert reopened.version_of(cid, "alice") == version
            loaded = reopened.load(cid, "alice")
            assert loaded is not None
            if version > 1:
                assert loaded.messages[0].raw_content == f"turn {version - 1}"


class _PausingQueue:
    """The commit queue, pausing the writer between queueing and taking the commit lock."""

    def __init__(self, inner: Any, queued: threading.Event, resume: threading.Event) -> None:
        self.inner, self.queued, self.resume = inner, queued, resume

    def put(self, item: Any) -> None:
        self.inner.put(item)
        self.queued.set()
        assert self.resume.wait(timeout=30)

    def get_nowait(self) -> Any:
        return self.inner.get_nowait()


def test_a_write_queued_before_close_is_committed_by_close(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path)
    store.create_context(_snapshot("c0"), "alice")
    store.create_context(_snapshot("c1"), "alice")
    in_commit, release_commit = threading.Event(), threading.Event()
    queued, resume = threading.Event(), threading.Event()
    make_room = store._directory.book.make_room

    def paused_make_room(incoming: int) -> None:  # holds the commit lock until released
        in_commit.set()
        assert release_commit.wait(timeout=30)
        make_room(incoming)

    store._directory.book.make_room = paused_make_room  # type: ignore[method-assign]
    outcomes: dict[str, object] = {}

    def save(cid: str) -> None:
        try:
            outcomes[cid] = store.save_context(_snapshot(cid, "second", 1), "alice")
        except BaseException as exc:
            outcomes[cid] = exc

    first = threading.Thread(target=save, args=("c0",))
    first.start()
    assert in_commit.wait(timeout=30)
    store._directory.book.make_room = make_room  # type: ignore[method-assign]
    store._directory.commits._queue = _PausingQueue(store._directory.commits._queue, queued, resume)  # type: ignore[assignment]
    second = threading.Thread(target=save, args=("c1",))
    second.start()
    assert queued.wait(timeout=30)  # c1's save is queued, not yet at the commit lock
    closer = threading.Thread(target=store.close)
    closer.start()
    release_commit.set()
    closer.join(timeout=30)
    assert not closer.is_alive()
    resume.set()
    first.join(timeout=30)
    second.join(timeout=30)
    assert outcomes == {"c0": 2, "c1": 2}
    with LmdbStore(tmp_path) as reopened:
        assert reopened.version_of("c0", "alice") == reopened.version_of("c1", "alice") == 2


def test_every_call_on_a_closed_store_is_an_illegal_state(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path)
    store.create_context(_snapshot("c1"), "alice")
    store.close()
    store.close()  # idempotent
    with pytest.raises(IllegalStateError, match="is closed"):
        store.save_context(_snapshot("c1", version=1), "alice")
    for call in (store.load, store.exists, store.version_of):
        with pytest.raises(IllegalStateError, match="is closed"):
            call("c1", "alice")
    with pytest.raises(IllegalStateError, match="is closed"):
        store.list_conversations("alice")


class _CountingLock:
    """The commit lock, counting how often it was taken."""

    def __init__(self) -> None:
        self.inner, self.taken = threading.Lock(), 0

    def acquire(self, blocking: bool = True) -> bool:
        got = self.inner.acquire(blocking)
        self.taken += got
        return got

    def release(self) -> None:
        self.inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_writers_answered_by_another_writers_commit_never_take_the_commit_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = lmdb.open(str(tmp_path), map_size=1 << 22)
    hooks = _Hooks(env)
    commits = GroupCommit(hooks, str(tmp_path), max_batch=64)
    lock = commits._lock = _CountingLock()  # type: ignore[assignment]
    in_commit, release_commit = threading.Event(), threading.Event()
    waiting = threading.Semaphore(0)
    wait = _group_commit.Slot.wait

    def paused_make_room(incoming: int) -> None:
        in_commit.set()
        assert release_commit.wait(timeout=30)

    def signalled_wait(slot: _group_commit.Slot) -> None:
        waiting.release()  # this writer found the lock taken and now waits on its slot
        wait(slot)

    hooks.make_room = paused_make_room  # type: ignore[method-assign]
    monkeypatch.setattr(_group_commit.Slot, "wait", signalled_wait)
    keys = [f"k{n}".encode() for n in range(5)]
    answers: dict[bytes, Any] = {}
    leader = threading.Thread(
        target=lambda: answers.update({keys[0]: commits.submit(_put(keys[0]), 0)})
    )
    leader.start()
    assert in_commit.wait(timeout=30)
    followers = [
        threading.Thread(target=lambda k=k: answers.update({k: commits.submit(_put(k), 0)}))
        for k in keys[1:]
    ]
    for f in followers:
        f.start()
    for _ in followers:
        assert waiting.acquire(timeout=30)
    release_commit.set()
    for t in [leader, *followers]:
        t.join(timeout=30)
    assert answers == {k: k for k in keys}
    assert lock.taken == 2  # the first batch's leader, then one leader for the other four
    assert hooks.committed_batches == 2
    env.close()


def test_each_failing_write_in_a_batch_costs_one_reapplication_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """A write that raises, a refusal before its first put or a failure part-way, has the
    batch applied again without it. Every other write is committed, in one commit; each
    failure costs one more run of the writes before it; a failing one runs once and leaves
    nothing."""
    env = lmdb.open(str(tmp_path), map_size=1 << 22, writemap=True)
    hooks = _Hooks(env)
    commits = GroupCommit(hooks, str(tmp_path), max_batch=64)
    runs: dict[bytes, int] = {}

    def counted(key: bytes) -> Any:
        def write(txn: Any) -> bytes:
            runs[key] = runs.get(key, 0) + 1
            txn.put(key, b"v")
            return key

        return write

    refusals = []

    def refuse(txn: Any) -> None:
        refusals.append(txn.get(b"a"))  # it sees the batch's earlier writes
        raise PermissionError("refused before writing")

    answers = [Future[Any]() for _ in range(4)]
    writes = (counted(b"a"), refuse, counted(b"b"), _put_then_fail)
    for write, answer in zip(writes, answers, strict=True):
        commits._queue.put((write, answer, 0))
    assert commits.submit(counted(b"c"), 0) == b"c"
    assert answers[0].result() == b"a" and answers[2].result() == b"b"
    with pytest.raises(PermissionError, match="refused before writing"):
        answers[1].result()
    with pytest.raises(RuntimeError, match="failed part-way"):
        answers[3].result()
    # the submitter leads with the writes queued before its own: a, the refusal, b, the late
    # failure, then c. a ran again after each failure, b after the late one, c once; neither
    # failing write ran twice
    assert runs == {b"a": 3, b"b": 2, b"c": 1}
    assert refusals == [b"v"]
    assert (hooks.committed_batches, hooks.failed_batches) == (1, 0)
    with env.begin() as txn:
        assert [txn.get(k) for k in (b"a", b"b", b"c")] == [b"v"] * 3
        assert txn.get(b"partial-1") is None and txn.get(b"partial-2") is None
    env.close()


def test_a_batch_whose_every_write_is_refused_commits_nothing(tmp_path: Path) -> None:
    env = lmdb.open(str(tmp_path), map_size=1 << 22, writemap=True)
    hooks = _Hooks(env)
    commits = GroupCommit(hooks, str(tmp_path), max_batch=64)
    before = env.info()["last_txnid"]

    def refuse(txn: Any) -> None:
        raise ValueError("refused")

    other: Future[Any] = Future()
    commits._queue.put((refuse, other, 0))
    with pytest.raises(ValueError, match="refused"):
        commits.submit(refuse, 0)
    with pytest.raises(ValueError, match="refused"):
        other.result()
    assert env.info()["last_txnid"] == before  # no transaction was committed
    env.close()


class _Gate:
    """A gate as the actors' turn gate is to a store: a lock its holder lets go while it
    waits (``parlour.stores._waiting``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def let_go(self) -> None:
        self.lock.release()

    def take_back(self) -> None:
        self.lock.acquire()


def test_a_writer_waiting_for_its_commit_lets_its_gate_go(tmp_path: Path) -> None:
    """A leader's commit is held up inside its write; a writer holding a gate queues behind
    it and waits; a third thread can take the gate only if that wait let it go, and only
    then lets the leader finish: without the let-go, no thread would ever end."""
    env = lmdb.open(str(tmp_path), map_size=1 << 22)
    commits = GroupCommit(_Hooks(env), str(tmp_path), max_batch=64)
    gate = _Gate()
    leading, holding, proceed = threading.Event(), threading.Event(), threading.Event()
    after: list[object] = []

    def slow(txn: Any) -> bytes:
        leading.set()
        assert proceed.wait(60)
        txn.put(b"slow", b"v")
        return b"slow"

    def gated_writer() -> None:
        assert leading.wait(60)
        gate.take_back()
        _waiting.hold(gate)
        try:
            holding.set()
            commits.submit(_put(b"queued"), 0)  # behind the slow commit: it waits
            after.append(_waiting.held_gate())
        finally:
            _waiting.hold(None)
            gate.let_go()

    def taker() -> None:
        assert holding.wait(60)
        with gate.lock:  # free only while the writer waits
            proceed.set()

    threads = [
        threading.Thread(target=commits.submit, args=(slow, 0), daemon=True),
        threading.Thread(target=gated_writer, daemon=True),
        threading.Thread(target=taker, daemon=True),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(t.is_alive() for t in threads), "the waiting writer kept its gate"
    assert after == [gate]  # taken back after the wait
    with env.begin() as txn:
        assert txn.get(b"slow") == txn.get(b"queued") == b"v"
    env.close()


@pytest.mark.parametrize("alone", [True, False])
def test_a_batch_whose_every_write_raised_is_counted_discarded_never_committed(
    tmp_path: Path, alone: bool
) -> None:
    env = lmdb.open(str(tmp_path), map_size=1 << 22)
    hooks = _Hooks(env)
    commits = GroupCommit(hooks, str(tmp_path), max_batch=64)
    other: Future[Any] = Future()
    if not alone:
        commits._queue.put((_put_then_fail, other, 0))
    with pytest.raises(RuntimeError, match="failed part-way"):
        commits.submit(_put_then_fail, 0)
    assert (hooks.committed_batches, hooks.discarded_batches, hooks.failed_batches) == (0, 1, 0)
    assert commits.submit(_put(b"next"), 0) == b"next"
    assert (hooks.committed_batches, hooks.discarded_batches) == (1, 1)
    env.close()


def test_what_a_refused_write_noted_before_raising_is_not_remembered_as_written(
    tmp_path: Path,
) -> None:
    store = LmdbStore(tmp_path, sync=False)
    try:
        cid = "c" * 12
        store.create_context(_snapshot(cid, "first"), "alice")
        book = store._directory.book
        remembered = book.known(cid)
        assert remembered is not None

        def note_then_refuse(txn: Any) -> None:
            assert remembered is not None
            book.note(cid, ([], remembered[1], [], remembered[3]))  # claims no messages
            raise ValueError("refused after noting")

        with pytest.raises(ValueError, match="refused after noting"):
            store._directory.submit(note_then_refuse, 0)
        assert book.known(cid) is remembered  # the batch of one was discarded, not committed
        context = ConversationContext.from_snapshot(store.load(cid, "alice"))  # type: ignore[arg-type]
        context.add_user_message("second")
        store.save_context(context.to_snapshot(), "alice")
    finally:
        store.close()
    reopened = LmdbStore(tmp_path, sync=False)
    try:
        loaded = reopened.load(cid, "alice")
        assert loaded is not None
        assert [m.blocks[0].text for m in loaded.messages] == ["first", "second"]  # type: ignore[union-attr]
    finally:
        reopened.close()


# -- writers on event loops: the loop leads, or the commit thread ------------------------------


def _on_a_loop(
    commits: GroupCommit, keys: list[bytes], queued: threading.Event, wakes: list[int]
) -> threading.Thread:
    """A thread running a loop that queues a write per key (``queued`` once all are),
    then awaits them; each answer must be its own key. ``wakes`` counts the calls the
    commit makes into this loop."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        call = loop.call_soon_threadsafe

        def counted(fn: Any, *args: Any) -> Any:
            if fn is _group_commit._complete:
                wakes.append(1)
            return call(fn, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
        futures = [commits.submit_async(_put(key), 0) for key in keys]
        await asyncio.sleep(0)  # the loop's flush ran, found the lock taken, called the thread
        queued.set()
        assert await asyncio.gather(*futures) == keys

    return threading.Thread(target=asyncio.run, args=(main(),))


def test_a_batch_from_several_loops_and_threads_answers_each_once_and_wakes_each_loop_once(
    tmp_path: Path,
) -> None:
    env = lmdb.open(str(tmp_path), map_size=1 << 22)
    hooks = _Hooks(env)
    commits = GroupCommit(hooks, str(tmp_path), max_batch=64)
    commits._lock.acquire()  # a leader's commit under way: every write below queues behind it
    wakes: list[list[int]] = [[], []]
    queued = [threading.Event(), threading.Event()]
    loops = [
        _on_a_loop(commits, [f"loop{n}-{k}".encode() for k in range(3)], queued[n], wakes[n])
        for n in range(2)
    ]
    for thread in loops:
        thread.start()
    assert all(event.wait(timeout=30) for event in queued)
    slots = [commits.defer(_put(f"thread-{k}".encode()), 0) for k in range(2)]
    commits._release()  # the commit thread leads the next batch: all eight writes
    for thread in loops:
        thread.join(timeout=30)
        assert not thread.is_alive()
    assert [commits.settle(slot) for slot in slots] == [b"thread-0", b"thread-1"]
    assert hooks.committed_batches == 1
    assert [len(w) for w in wakes] == [1, 1]  # one wake per loop for its three writes
    assert commits.loop_wakes == 2
    commits.close(lambda: None)
    env.close()


def test_close_answers_every_pending_async_save_and_refuses_later_ones(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path)

    async def main() -> dict[str, int]:
        pending = {
            f"p{n}": asyncio.ensure_future(store.create_context_async(_snapshot(f"p{n}"), "alice"))
            for n in range(200)
        }
        await asyncio.to_thread(store.close)  # while the commit thread works through them
        outcomes = await asyncio.wait_for(
            asyncio.gather(*pending.values(), return_exceptions=True), timeout=30
        )
        acknowledged = {}
        for cid, outcome in zip(pending, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                assert isinstance(outcome, IllegalStateError)
            else:
                acknowledged[cid] = outcome
        with pytest.raises(IllegalStateError, match="closed"):
            store.save_context_async(_snapshot("p0", version=1), "alice")
        with pytest.raises(IllegalStateError, match="closed"):
            store.create_context_async(_snapshot("late"), "alice")
        return acknowledged

    acknowledged = asyncio.run(main())
    assert len(acknowledged) == 200  # close commits every write queued before it
    with LmdbStore(tmp_path) as reopened:
        for cid, version in acknowledged.items():
            assert reopened.version_of(cid, "alice") == version


def test_an_unsynced_store_lets_a_loop_writer_finding_the_lock_free_lead_at_once(
    tmp_path: Path,
) -> None:
    with LmdbStore(tmp_path, sync=False) as store:
        commits = store._directory.commits

        async def main() -> None:
            first = store.create_context_async(_snapshot("c1"), "alice")
            assert first.done() and first.result() == 1  # committed here: no fsync to wait for
            commits._lock.acquire()  # another leader's commit under way: this one queues
            second = store.save_context_async(_snapshot("c1", "again", 1), "alice")
            assert not second.done()
            commits._release()  # the commit thread leads it
            assert await second == 2

        asyncio.run(main())
        loaded = store.load("c1", "alice")
        assert loaded is not None and loaded.messages[0].raw_content == "again"


def test_a_loop_leads_its_own_writes_once_per_turn_of_it_on_its_own_thread(
    tmp_path: Path,
) -> None:
    """The writes a loop queues in one turn of it commit in one batch, led on the loop's
    own thread after that turn (none of it before), their futures completed there with no
    call into the loop from another thread and no commit thread started; the next turn's
    writes make the next batch."""
    env = lmdb.open(str(tmp_path), map_size=1 << 22)
    hooks = _Hooks(env)
    commits = GroupCommit(hooks, str(tmp_path), max_batch=64)
    led_on: list[int] = []
    begin = hooks.begin

    def noting(write: bool, parent: Any) -> Any:
        led_on.append(threading.get_ident())
        return begin(write, parent)

    hooks.begin = noting  # type: ignore[method-assign]
    crossed: list[Any] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        call = loop.call_soon_threadsafe

        def counted(fn: Any, *args: Any) -> Any:
            crossed.append(fn)  # a call into the loop from another thread
            return call(fn, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
        first = [commits.submit_async(_put(f"a{k}".encode()), 0) for k in range(5)]
        assert not any(f.done() for f in first) and hooks.committed_batches == 0
        assert await asyncio.gather(*first) == [f"a{k}".encode() for k in range(5)]
        assert hooks.committed_batches == 1
        second = [commits.submit_async(_put(f"b{k}".encode()), 0) for k in range(3)]
        assert await asyncio.gather(*second) == [f"b{k}".encode() for k in range(3)]
        assert hooks.committed_batches == 2

    asyncio.run(main())
    assert _group_commit._complete not in crossed
    assert led_on == [threading.get_ident()] * 2  # the loop's thread led both
    assert commits._committer is None and commits.loop_wakes == 2
    with env.begin() as txn:
        assert all(
            txn.get(f"{p}{k}".encode()) == b"v" for p, n in (("a", 5), ("b", 3)) for k in range(n)
        )
    commits.close(lambda: None)
    env.close()


def test_a_loop_holds_itself_for_one_batch_at_a_time(tmp_path: Path) -> None:
    """More writes in one turn of the loop than a batch takes commit a batch a turn, each
    led by the loop, in the order queued."""
    env = lmdb.open(str(tmp_path), map_size=1 << 22)
    hooks = _Hooks(env)
    commits = GroupCommit(hooks, str(tmp_path), max_batch=2)
    turns_seen: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ticks = 0

        def tick() -> None:  # counts the loop's turns while the writes wait
            nonlocal ticks
            ticks += 1
            if not all(f.done() for f in futures):
                loop.call_soon(tick)

        futures = [commits.submit_async(_put(f"w{k}".encode()), 0) for k in range(5)]
        commit = hooks.committed

        def noting() -> None:
            turns_seen.append(ticks)
            commit()

        hooks.committed = noting  # type: ignore[method-assign]
        loop.call_soon(tick)
        assert await asyncio.gather(*futures) == [f"w{k}".encode() for k in range(5)]

    asyncio.run(main())
    assert hooks.committed_batches == 3
    assert len(set(turns_seen)) == 3  # each batch in a turn of the loop of its own
    assert commits._committer is None
    commits.close(lambda: None)
    env.close()


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "batched"])
def test_a_write_past_the_map_grows_it_and_commits_once(tmp_path: Path, alone: bool) -> None:
    env = lmdb.open(str(tmp_path), map_size=1 << 16)
    hooks = _Hooks(env)
    commits = GroupCommit(hooks, str(tmp_path), max_batch=64)
    other: Future[Any] = Future()
    if not alone:
        commits._queue.put((_put(b"queued"), other, 1))

    def big(txn: Any) -> str:
        txn.put(b"big", b"x" * (1 << 18))
        return "kept"

    assert commits.submit(big, 1 << 18) == "kept"
    assert (hooks.committed_batches, hooks.discarded_batches, hooks.failed_batches) == (1, 0, 0)
    with env.begin() as txn:
        assert txn.get(b"big") == b"x" * (1 << 18)
    env.close()


class _FailingCommit:
    """A write transaction whose commit fails (a full disk, say)."""

    def __init__(self, txn: Any) -> None:
        self.txn = txn

    def put(self, *args: Any, **kwargs: Any) -> bool:
        return bool(self.txn.put(*args, **kwargs))

    def commit(self) -> None:
        self.txn.abort()
        raise lmdb.DiskError("no space left")

    def abort(self) -> None:
        self.txn.abort()


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "batched"])
def test_a_failed_commit_is_raised_counted_failed_and_keeps_nothing(
    tmp_path: Path, alone: bool
) -> None:
    env = lmdb.open(str(tmp_path), map_size=1 << 22)
    hooks = _Hooks(env)
    hooks.begin = lambda write, parent: _FailingCommit(env.begin(write=write))  # type: ignore[method-assign]
    commits = GroupCommit(hooks, str(tmp_path), max_batch=64)
    other: Future[Any] = Future()
    if not alone:
        commits._queue.put((_put(b"queued"), other, 1))
    with pytest.raises(lmdb.DiskError):
        commits.submit(_put(b"lost"), 1)
    assert (hooks.committed_batches, hooks.discarded_batches, hooks.failed_batches) == (0, 0, 1)
    with env.begin() as txn:
        assert txn.get(b"lost") is None and txn.get(b"queued") is None
    env.close()
