"""Minted ids: a thinker's job and workflow ids and its minted conversation ids are random,
distinct, drawn from the operating system's CSPRNG in pools, and never repeated across
threads or a fork."""

from __future__ import annotations

import multiprocessing
import os
import re
import sys
import threading

import pytest

import parlour.actors._thinker as thinker_module
from parlour.actors import BasicThinker


class ChatThinker(BasicThinker):
    pass


def test_minted_ids_keep_their_shape_and_name_the_thinker_class() -> None:
    thinker = ChatThinker("u")
    assert re.fullmatch(r"ChatThinker-[0-9a-f]{4}-[0-9a-f]{12}", thinker.job_id)
    assert re.fullmatch(r"wf-[0-9a-f]{12}", thinker.workflow_id)
    cid = thinker.mint_conversation_id()
    assert re.fullmatch(r"ChatThinker-conv-[0-9a-f]{4}-[0-9a-f]{12}", cid)
    assert thinker.conversation_id == cid and thinker.is_conversation_minted()


def test_ids_given_by_the_caller_are_kept() -> None:
    thinker = BasicThinker("u", job_id="job-1", workflow_id="wf-1")
    assert (thinker.job_id, thinker.workflow_id) == ("job-1", "wf-1")


def test_ten_thousand_thinkers_never_share_an_id() -> None:
    thinkers = [BasicThinker("u") for _ in range(10_000)]
    ids = [t.job_id for t in thinkers] + [t.workflow_id for t in thinkers]
    ids += [t.mint_conversation_id() for t in thinkers]
    assert len(set(ids)) == len(ids)


def test_ids_come_from_os_urandom_one_call_per_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.urandom

    def counted(size: int) -> bytes:
        calls.append(size)
        return real(size)

    monkeypatch.setattr(thinker_module, "_draws", thinker_module._Draws())
    monkeypatch.setattr(os, "urandom", counted)
    per_pool = thinker_module._Draws._POOL // thinker_module._Draws.SLOT
    for _ in range(per_pool * 3):
        BasicThinker("u")
    assert calls == [thinker_module._Draws._POOL] * 3


def test_threads_minting_at_once_never_share_an_id() -> None:
    per_thread, found = 2_000, [list[str]() for _ in range(8)]
    barrier = threading.Barrier(8)

    def mint(into: list[str]) -> None:
        barrier.wait()
        for _ in range(per_thread):
            thinker = BasicThinker("u")
            into += [thinker.job_id, thinker.mint_conversation_id()]

    threads = [threading.Thread(target=mint, args=(into,)) for into in found]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [i for into in found for i in into]
    assert len(ids) == 8 * per_thread * 2 and len(set(ids)) == len(ids)


def _child_ids(queue: multiprocessing.Queue[list[str]]) -> None:
    queue.put([BasicThinker("u").job_id for _ in range(50)])


@pytest.mark.skipif(sys.platform != "linux", reason="fork is the Linux start method here")
def test_a_forked_child_never_repeats_its_parents_next_ids() -> None:
    BasicThinker("u")  # the parent's pool is drawn and partly used before the fork
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[list[str]] = context.Queue()
    child = context.Process(target=_child_ids, args=(queue,))
    child.start()
    from_child = queue.get(timeout=60)
    child.join(timeout=60)
    from_parent = [BasicThinker("u").job_id for _ in range(50)]
    assert child.exitcode == 0
    assert len(set(from_child)) == 50
    assert not set(from_child) & set(from_parent)
