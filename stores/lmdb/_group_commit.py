"""The group commit behind ``LmdbStore``: many writers, one transaction, one fsync.

A writer that finds the commit lock free takes it and leads at once: the writes queued
before it, then its own, in one write transaction, committed before any writer is answered
(with nothing queued, the usual case, its write alone: ``_alone``, the batch path without
its lists; ``benchmarks/instructions.py`` agent path 843,783 -> 787,888 instructions a
turn). A writer that finds the lock taken queues its write and waits on its own slot, never
on the lock: the leader's answer wakes it, so a writer whose batch is already durable
returns without touching the lock. After releasing the lock a leader wakes one writer still
waiting, which tries to lead the next batch. A deferred write is queued without a wait
(``defer``); whoever leads next commits it, and ``settle`` waits for it later.

A writer on an event loop (``submit_async``) queues its write and awaits an asyncio future;
the loop leads the commit itself, once per turn of the loop (``_flush``: what is queued by
then in one transaction, at most a batch), so its synced commit's fsync holds the loop for
that commit (about 0.7 ms on this machine's disk). That is cheaper than handing it to a
thread: py-lmdb lets go of the interpreter lock at every get and put, the loop takes it,
and the commit thread waits up to the switch interval (5 ms) to get it back, about nine
times a write. ``benchmarks/host.py`` at 2,000 chats, ``asend``: 1,166-1,363 -> 1,450-1,453
turns/s, p99 added 783-1,239 -> 631-700 ms (a save's own wait p50 312 -> 100 ms, what is
left being the loop's own backlog); at 500 chats no difference. A write cannot be planned
on the loop and committed elsewhere: an LMDB write transaction is its thread's. When a
thread leads meanwhile, the store's commit thread (one per store, started by the first
such write, stopped by ``close``) leads the loop's writes instead. Either way each loop
with writers in a batch is woken once for it (completing all of its futures; directly
when the leader is that loop), never once per write. An unsynced store's commit waits for
nothing but the CPU, so there a loop writer that finds the commit lock free leads at once,
as a thread writer does, and its future is answered before it is returned.

A write that raises leaves nothing and only its caller gets the error; the rest of the batch
commits. LMDB's nested transactions would roll one write back alone, but they cannot be had
with a writable memory map (``writemap``, which an unsynced store uses: it halves the cost of
a write there), so, whatever the store, a write that raises has the whole transaction
aborted and the batch applied again without it. (Telling a refusal raised before any put
apart, to leave it out in the same transaction, meant watching every put of every write
through a wrapper: about 3% of a turn, paid on every save, for a case that is rare.)

Why this module is long: it is one protocol around one lock and one queue (leading, waiting,
deferring, the loops' writers and their commit thread, close); split, each part would
reach into the others' state.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import lmdb
from loguru import logger

from parlour.runtime.errors import IllegalStateError

from .._protocols import SaveFuture
from .._waiting import waiting

Write = Callable[[Any], Any]  # applied inside the batch's write transaction


class CommitHooks(Protocol):
    """What the store does around a batch; every hook runs under the commit lock."""

    def begin(self, write: bool, parent: Any) -> Any:
        """Open a write transaction (``parent`` is always None: no nesting)."""
        ...

    def make_room(self, incoming: int) -> None:
        """Grow the map, if need be, before a batch of ``incoming`` bytes."""
        ...

    def grow(self) -> None:
        """Grow the map after a batch ran into a full one."""
        ...

    def attempt(self) -> None:
        """A batch is about to be applied (again)."""
        ...

    def committed(self) -> None:
        """The batch's transaction is durable."""
        ...

    def discarded(self) -> None:
        """The batch's transaction was aborted because every write in it raised: nothing
        was written, and nothing its writes noted while they ran holds."""
        ...

    def failed(self) -> None:
        """The batch's transaction did not commit; nothing of it was written."""
        ...


class Done:
    """One writer's answer, as ``concurrent.futures.Future`` gives it (``done``,
    ``set_result``, ``set_exception``, ``result``) at a fraction of the cost."""

    __slots__ = ("_error", "_value", "answered")

    def __init__(self) -> None:
        self.answered = False
        self._value: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self.answered

    def set_result(self, value: Any) -> None:
        self._value, self.answered = value, True

    def set_exception(self, error: BaseException) -> None:
        self._error, self.answered = error, True

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


class Slot(Done):
    """The answer of a writer that waits for it, and the lock it waits on (held until it is
    woken): no condition variable. A wake with no answer yet means "the commit lock was
    released: try to lead"."""

    __slots__ = ("_signal",)

    def __init__(self) -> None:
        super().__init__()
        self._signal = threading.Lock()
        self._signal.acquire()

    def set_result(self, value: Any) -> None:
        self._value, self.answered = value, True
        self.wake()

    def set_exception(self, error: BaseException) -> None:
        self._error, self.answered = error, True
        self.wake()

    def wake(self) -> None:
        try:  # noqa: SIM105 (contextlib.suppress builds a context manager per wake)
            self._signal.release()
        except RuntimeError:  # already woken: once is enough
            pass

    def wait(self) -> None:
        self._signal.acquire()


class LoopAnswer(Done):
    """The answer of a writer on an event loop: recorded by the commit (in the leader's
    thread), then handed to ``future`` on its loop with the batch's other answers there."""

    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.future = SaveFuture(loop=loop)

    def complete(self) -> None:
        """On the loop: complete the future with the recorded answer."""
        if self._error is not None:
            self.future.set_exception(self._error)
        else:
            self.future.set_result(self._value)


def _answered(loop: asyncio.AbstractEventLoop, done: Done) -> SaveFuture:
    """A future already holding ``done``'s answer (a loop writer that led its own commit)."""
    future = SaveFuture(loop=loop)
    if done._error is not None:
        future.set_exception(done._error)
    else:
        future.set_result(done._value)
    return future


def _complete(answers: list[LoopAnswer]) -> None:
    for answer in answers:
        answer.complete()


Answer = Any  # a Done, Slot or LoopAnswer, or anything with Future's done/set_result/set_exception
Entry = tuple[Write, Answer, int]


class GroupCommit:
    """Queues writes and commits them in batches of at most ``max_batch``.

    Thread-safety: ``submit``, ``defer`` and ``settle`` from any thread (a slot is settled
    by one thread), ``submit_async`` from any running loop's thread; ``close`` once, from
    any thread.
    """

    def __init__(self, hooks: CommitHooks, where: str, max_batch: int, synced: bool = True) -> None:
        self._hooks = hooks
        self._synced = synced
        # a synced commit waits for the disk: a held turn gate goes to another turn meanwhile
        self._commit_wait: Callable[[], contextlib.AbstractContextManager[None]] = (
            waiting if synced else contextlib.nullcontext
        )
        self._where = where
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[Entry] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._waiting: deque[Slot] = deque()  # writers that found the lock taken
        self._closing = False
        self._finished = False
        self._committer: threading.Thread | None = None  # leads for loops' writers
        self._work = threading.Lock()  # released: writes queued for the commit thread
        self._work.acquire()
        self._stopped = False  # the commit thread was stopped (by close): none leads for loops
        self._committer_guard = threading.Lock()
        self.loop_wakes = 0  # calls into loops, one per loop per batch (a seam for tests)
        self._flushing: set[asyncio.AbstractEventLoop] = set()  # loops with a _flush to come

    def submit(self, write: Write, size: int) -> Any:
        """Apply ``write`` in the next commit and answer once that commit is durable.

        Returns:
            What ``write`` returned.

        Raises:
            IllegalStateError: the store is closed (nothing was written).
            Exception: whatever ``write`` raised; nothing of it was written.
        """
        if self._closing:
            raise self._closed_error()
        if self._lock.acquire(blocking=False):  # no commit under way: lead
            try:
                if self._queue.empty() and not self._finished:  # the usual writer: alone
                    return self._alone(write, size)
                ahead = self._drain(self._max_batch - 1)  # queued before: committed first
                if len(ahead) < self._max_batch - 1 or self._queue.empty():  # lead, unqueued
                    done = Done()
                    self._run([*ahead, (write, done, size)])
                    return done.result()
                slot = self.defer(write, size)  # more queued than a batch takes: FIFO
                if ahead:
                    self._run(ahead)
            finally:
                self._release()
            return self.settle(slot)
        return self.settle(self.defer(write, size))

    def defer(self, write: Write, size: int) -> Slot:
        """Queue ``write`` for the next commit and return at once, without leading: the
        next writer to lead commits it, and ``settle`` (which leads if nobody does) waits
        for that commit.

        Raises:
            IllegalStateError: the store is closed (nothing was written).
        """
        if self._closing:
            raise self._closed_error()
        slot = Slot()
        self._queue.put((write, slot, size))
        return slot

    def submit_async(self, write: Write, size: int) -> SaveFuture:
        """Queue ``write`` from the running loop and return a future the commit holding it
        completes once durable (on this loop), with what ``write`` returned or what it
        raised. Never leads a synced commit, never waits: the commit thread leads when no
        thread does. Unsynced, with the commit lock free, it leads here (no wait but CPU).

        Raises:
            IllegalStateError: the store is closed (nothing was written).
        """
        if self._closing:
            raise self._closed_error()
        loop = asyncio.get_running_loop()
        if not self._synced and self._lock.acquire(blocking=False):
            try:  # no fsync to wait for: a commit is CPU work alone, so lead here (``submit``)
                if self._queue.empty() and not self._finished:  # alone, as ``submit``
                    done = Done()
                    try:
                        done.set_result(self._alone(write, size))
                    except Exception as exc:
                        done.set_exception(exc)
                    return _answered(loop, done)
                ahead = self._drain(self._max_batch - 1)
                if len(ahead) < self._max_batch - 1 or self._queue.empty():
                    done = Done()
                    self._run([*ahead, (write, done, size)])
                    return _answered(loop, done)
                self._run(ahead)  # more queued than a batch takes: queued behind them
            finally:
                self._release()
        answer = LoopAnswer(loop)
        self._queue.put((write, answer, size))
        if loop not in self._flushing:  # the first write of this turn of the loop
            self._flushing.add(loop)
            loop.call_soon(self._flush, loop)
        return answer.future

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``, after the writes queued this turn of it: lead one batch of what is
        queued (the rest on its next turn: the loop is held for one commit at a time), or
        have the commit thread lead when a thread holds the commit lock."""
        self._flushing.discard(loop)
        if not self._lock.acquire(blocking=False):
            self._call_committer()
            return
        try:
            if batch := self._drain(self._max_batch):
                self._run(batch)
        finally:
            self._release()
        if not self._queue.empty() and loop not in self._flushing:
            self._flushing.add(loop)
            loop.call_soon(self._flush, loop)

    def _call_committer(self) -> None:
        """Have the commit thread lead (started at the first call). Once it is stopped
        (the store closed), what is queued is refused here: ``_run`` refuses it."""
        if self._committer is not None and not self._stopped:
            self._call()
            return
        with self._committer_guard:
            if not self._stopped:
                if self._committer is None:
                    self._committer = threading.Thread(
                        target=self._commit_loop, name="parlour-commit", daemon=True
                    )
                    self._committer.start()
                self._call()
                return
        self._lock.acquire()  # closed: no commit, only refusals (``_run``)
        try:
            self._run(self._drain(self._max_batch))
        finally:
            self._release()

    def _call(self) -> None:
        """Wake the commit thread (the lock is a one-place signal, as a ``Slot``'s: calls
        that find it given already add nothing)."""
        if self._work.locked():
            try:  # noqa: SIM105 (as ``Slot.wake``)
                self._work.release()
            except RuntimeError:  # another writer gave it in between
                pass

    def _commit_loop(self) -> None:
        """The commit thread: lead batches until the queue is empty, then wait for more."""
        while True:
            self._work.acquire()  # taken: a write queued from now gives it again
            stopped = self._stopped  # stopped: a last round refuses what raced the close
            while not self._queue.empty():
                self._lock.acquire()  # a leader meanwhile may commit these writes itself
                try:
                    if batch := self._drain(self._max_batch):
                        self._run(batch)
                finally:
                    self._release()
            if stopped:
                return

    def settle(self, slot: Slot) -> Any:
        """Wait until the commit holding ``slot``'s write is durable, leading it if the
        commit lock is free; return what the write returned or raise what it raised."""
        while not slot.answered:
            self._waiting.append(slot)  # before trying the lock: its releaser will see it
            if self._lock.acquire(blocking=False):
                try:
                    if not slot.answered:
                        self._run(self._drain(self._max_batch))
                finally:
                    self._release()
            else:
                with waiting():  # a held turn gate goes to another turn meanwhile
                    slot.wait()  # answered, or the lock came free
        return slot.result()

    def _release(self) -> None:
        """Release the commit lock and wake one writer still waiting, to lead next."""
        self._lock.release()
        while self._waiting:
            slot = self._waiting.popleft()
            if not slot.answered:
                slot.wake()
                return

    def close(self, finish: Callable[[], None]) -> None:
        """Commit every write queued so far, then call ``finish`` (closing the environment)
        under the commit lock; a write queued later fails with ``IllegalStateError``."""
        with waiting():  # a leader may be taking the turn gate back, the lock held
            self._lock.acquire()
        try:
            self._closing = True
            while batch := self._drain(self._max_batch):
                self._apply(batch)
            finish()
            self._finished = True
        finally:
            self._release()
        self._stop_committer()

    def _stop_committer(self) -> None:
        with self._committer_guard:
            self._stopped = True
            committer = self._committer
        self._call()
        if committer is not None and committer is not threading.current_thread():
            committer.join()

    def _closed_error(self) -> IllegalStateError:
        return IllegalStateError(f"LmdbStore at {self._where} is closed; nothing was written.")

    def _drain(self, most: int) -> list[Entry]:
        batch: list[Entry] = []
        while len(batch) < most:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _run(self, batch: list[Entry]) -> None:
        if self._finished:  # queued after close drained the queue
            for _, done, _ in batch:
                done.set_exception(self._closed_error())
            self._wake_loops(batch)
            return
        self._apply(batch)

    def _wake_loops(self, batch: list[Entry]) -> None:
        """Hand the batch's answers of writers on event loops to their loops: one call per
        loop, whatever the number of its writers in the batch."""
        loops: dict[asyncio.AbstractEventLoop, list[LoopAnswer]] = {}
        for _, done, _ in batch:
            if type(done) is LoopAnswer:
                loops.setdefault(done.loop, []).append(done)
        here = asyncio._get_running_loop()  # the leader's own loop, if it is one
        for loop, answers in loops.items():
            self.loop_wakes += 1
            if loop is here:
                _complete(answers)
                continue
            try:
                loop.call_soon_threadsafe(_complete, answers)
            except RuntimeError:  # the loop is closed: nobody is there to take them
                logger.debug("a writer's event loop is closed; its answers are dropped")

    def _apply(self, batch: list[Entry]) -> None:
        """Commit one batch, answering every writer in it, whatever happens."""
        try:
            self._hooks.make_room(sum(size for _, _, size in batch))
            committed, outcomes = self._commit([write for write, _, _ in batch])
        except BaseException as exc:
            logger.opt(exception=exc).error("LMDB commit failed at {}", self._where)
            self._hooks.failed()
            for _, done, _ in batch:
                done.set_exception(exc)
            self._wake_loops(batch)
            return
        # the invariant: a batch is counted as committed exactly when its transaction was;
        # one whose every write raised (a batch of one included) committed nothing
        if committed:
            self._hooks.committed()
        else:
            self._hooks.discarded()
        for (ok, value), (_, done, _) in zip(outcomes, batch, strict=True):
            if ok:
                done.set_result(value)
            else:
                done.set_exception(value)
        self._wake_loops(batch)

    def _alone(self, write: Write, size: int) -> Any:
        """``_apply`` of a batch of one, without the batch's lists: the usual writer, who
        finds the commit lock free and nothing queued. Its refusal is raised (the
        transaction aborted); a failed commit is logged and raised, as for a batch."""
        hooks = self._hooks
        try:
            hooks.make_room(size)
            refused, value = self._commit_alone(write)
        except BaseException as exc:
            logger.opt(exception=exc).error("LMDB commit failed at {}", self._where)
            hooks.failed()
            raise
        if refused is not None:
            hooks.discarded()
            raise refused
        hooks.committed()
        return value

    def _commit_alone(self, write: Write) -> tuple[Exception | None, Any]:
        """Apply ``write`` in a transaction of its own and commit it: (None, what it
        returned), or (what it raised, None) with the transaction aborted. A full map
        aborts, grows the map and applies it again."""
        while True:
            self._hooks.attempt()
            txn = self._hooks.begin(True, None)
            try:
                try:
                    value = write(txn)
                except lmdb.MapFullError:
                    raise
                except Exception as exc:  # the caller's error: nothing of the write is kept
                    txn.abort()
                    return exc, None
                with self._commit_wait():
                    txn.commit()
                return None, value
            except lmdb.MapFullError:
                txn.abort()
                self._hooks.grow()
            except BaseException:
                txn.abort()
                raise

    def _commit(self, writes: list[Write]) -> tuple[bool, list[Outcome]]:
        """Apply every write in one transaction and commit it. A full map aborts the batch,
        grows the map and applies it again; so does a write that raised after writing
        (without it: it keeps its error). Returns whether the transaction committed (False:
        every write raised, and it was aborted) and each write's outcome."""
        failed: dict[int, Exception] = {}
        while True:
            self._hooks.attempt()
            txn = self._hooks.begin(True, None)
            try:
                outcomes = self._attempt(txn, writes, failed)
                if outcomes is not None and any(ok for ok, _ in outcomes):
                    with self._commit_wait():
                        txn.commit()
                    return True, outcomes
            except lmdb.MapFullError:
                txn.abort()
                self._hooks.grow()
                continue
            except BaseException:
                txn.abort()
                raise
            txn.abort()  # a write raised after writing (applied again without it), or none kept
            if outcomes is not None:
                return False, outcomes

    def _attempt(
        self, txn: Any, writes: list[Write], failed: dict[int, Exception]
    ) -> list[Outcome] | None:
        """Apply ``writes`` in ``txn``, skipping those in ``failed``. A write that raises
        joins ``failed`` and the answer is None: ``txn`` may hold part of it."""
        if len(writes) == 1:  # alone: its error aborts the transaction, nothing to apply again
            try:
                return [(True, writes[0](txn))]
            except lmdb.MapFullError:
                raise
            except Exception as exc:  # the caller gets it; the whole transaction is aborted
                return [(False, exc)]
        outcomes: list[Outcome] = []
        for index, write in enumerate(writes):
            if index in failed:
                outcomes.append((False, failed[index]))
                continue
            try:
                outcomes.append((True, write(txn)))
            except lmdb.MapFullError:
                raise
            except Exception as exc:  # the caller gets it; the batch is applied without it
                failed[index] = exc
                return None
        return outcomes


Outcome = tuple[bool, Any]  # (True, what the write returned) or (False, what it raised)
