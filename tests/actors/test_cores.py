"""``one_core``: every thread of the process on one CPU inside the block, threads started in
it included, and each thread's own CPUs back after it."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from parlour.actors.tuning import one_core

linux = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")


@contextmanager
def parked_thread() -> Iterator[threading.Thread]:
    """A thread that waits until the block ends (its native id is known at once)."""
    go = threading.Event()
    thread = threading.Thread(target=go.wait, args=(30,))
    thread.start()
    try:
        yield thread
    finally:
        go.set()
        thread.join(10)


def cpus(thread: threading.Thread) -> set[int]:
    assert thread.native_id is not None
    return os.sched_getaffinity(thread.native_id)


@linux
def test_every_thread_runs_on_the_chosen_cpu_inside_and_gets_its_own_cpus_back_after() -> None:
    allowed = os.sched_getaffinity(0)
    narrowed = {max(allowed)}  # a thread the application had pinned itself
    with parked_thread() as before, parked_thread() as pinned:
        assert pinned.native_id is not None
        os.sched_setaffinity(pinned.native_id, narrowed)
        with one_core() as cpu:
            assert cpu == min(allowed)
            with parked_thread() as started_inside:
                assert cpus(before) == cpus(pinned) == cpus(started_inside) == {cpu}
                assert cpus(threading.main_thread()) == os.sched_getaffinity(0) == {cpu}
        assert cpus(before) == allowed and cpus(pinned) == narrowed
        assert os.sched_getaffinity(0) == allowed


@linux
def test_a_thread_started_inside_and_still_running_after_gets_the_starters_cpus() -> None:
    allowed = os.sched_getaffinity(0)
    go = threading.Event()
    with one_core() as cpu:
        thread = threading.Thread(target=go.wait, args=(30,))
        thread.start()
        assert cpus(thread) == {cpu}
    try:
        assert cpus(thread) == allowed
    finally:
        go.set()
        thread.join(10)


@linux
def test_a_cpu_the_process_may_not_use_is_refused_and_nothing_changes() -> None:
    allowed = os.sched_getaffinity(0)
    with (
        pytest.raises(ValueError, match="is not one this process may use"),
        one_core(max(allowed) + 1),
    ):
        pytest.fail("the block must not run")
    assert os.sched_getaffinity(0) == allowed


@linux
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_cpu_named_is_the_one_used() -> None:
    chosen = max(os.sched_getaffinity(0))
    with one_core(chosen) as cpu:
        assert cpu == chosen and os.sched_getaffinity(0) == {chosen}


def test_where_threads_cannot_be_pinned_the_block_runs_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    ran = []
    with one_core() as cpu:
        ran.append(cpu)
    assert ran == [None]
