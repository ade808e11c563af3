"""The model workers behind ``stream``'s model calls: the worker that went idle last takes
the next job (it is idle again before its result arrives), a job finding every worker busy
gets a new one (no job waits for another), none is lost however many threads submit, and a
forked child makes its calls on workers of its own."""

from __future__ import annotations

import os
import queue
import threading

from parlour.actors.agent._calls import start_workers
from parlour.runtime.providers import model_workers
from parlour.runtime.providers._workers import Workers


def _name() -> object:
    return threading.current_thread().name


def test_the_worker_that_went_idle_last_takes_each_next_job() -> None:
    workers = Workers(3, "test-warm")
    results: queue.SimpleQueue[object] = queue.SimpleQueue()
    names = []
    for _ in range(6):
        workers.submit(_name, results)
        names.append(results.get(timeout=10))
    assert len(set(names)) == 1  # idle again before its result arrived: taken again at once


def test_a_job_finding_every_worker_busy_runs_at_once_on_a_new_one() -> None:
    workers = Workers(1, "test-grow")
    release = threading.Event()
    results: queue.SimpleQueue[object] = queue.SimpleQueue()

    def blocking() -> object:
        assert release.wait(10)
        return "first"

    workers.submit(blocking, results)
    for n in range(5):  # each answers while the first still blocks: none waits for it
        workers.submit(lambda n=n: n, results)  # type: ignore[misc]
    assert sorted(results.get(timeout=10) for _ in range(5)) == [0, 1, 2, 3, 4]  # type: ignore[type-var]
    assert results.empty() and workers.started >= 2
    release.set()
    assert results.get(timeout=10) == "first"


def test_no_job_is_lost_when_many_threads_submit_to_few_workers() -> None:
    workers = Workers(2, "test-many")
    results: queue.SimpleQueue[object] = queue.SimpleQueue()
    gate = threading.Barrier(8, timeout=10)

    def submitter(t: int) -> None:
        gate.wait()
        for n in range(200):
            workers.submit(lambda v=(t, n): v, results)  # type: ignore[misc]

    threads = [threading.Thread(target=submitter, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    got = {results.get(timeout=10) for _ in range(8 * 200)}
    for thread in threads:
        thread.join(10)
    assert got == {(t, n) for t in range(8) for n in range(200)}
    assert results.empty()


def test_a_forked_child_makes_model_calls_on_workers_of_its_own() -> None:
    start_workers()  # the parent's workers run; none of their threads exists in a child
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            results: queue.SimpleQueue[object] = queue.SimpleQueue()
            model_workers().submit(lambda: "answered", results)
            code = 0 if results.get(timeout=5) == "answered" else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
