"""``host_collector``: the collector's youngest generation grown while the block runs, the
thresholds before it back after it (also when it raises), and cycles still collected; and
what makes it safe, turns that leave next to no cycles."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

import pytest

from parlour.actors import Agent, ConversationService
from parlour.actors.tuning import host_collector
from parlour.runtime import Depth, OutputSize, ScriptedClient
from parlour.stores import LmdbStore, MemorySessionCache


class Node:
    """An object in a reference cycle of its own."""

    def __init__(self) -> None:
        self.me = self


def test_the_young_generation_grows_inside_and_the_thresholds_come_back_after() -> None:
    before = gc.get_threshold()
    with host_collector() as inside:
        assert inside == gc.get_threshold() == (50_000, *before[1:])
    assert gc.get_threshold() == before
    with host_collector(young=1_234) as inside:
        assert inside == gc.get_threshold() == (1_234, *before[1:])
    assert gc.get_threshold() == before


def test_the_thresholds_come_back_when_the_block_raises() -> None:
    before = gc.get_threshold()
    with pytest.raises(KeyError), host_collector(young=99):
        raise KeyError("the block failed")
    assert gc.get_threshold() == before


@pytest.mark.parametrize("young", [0, -5, 1.5, True, "50000"])
def test_a_young_threshold_that_is_not_a_positive_whole_number_is_refused(young: object) -> None:
    before = gc.get_threshold()
    with pytest.raises(ValueError, match="at least 1"), host_collector(young=young):  # type: ignore[arg-type]
        pass
    assert gc.get_threshold() == before


def test_a_cycle_made_inside_is_collected_once_the_young_generation_fills() -> None:
    with host_collector(young=1_000):
        node = Node()
        gone = weakref.ref(node)
        del node
        kept: list[list[int]] = [[] for _ in range(5_000)]  # tracked: the young generation fills
        assert gone() is None
        assert len(kept) == 5_000


def test_turns_on_both_paths_leave_next_to_no_cyclic_garbage(tmp_path: Path) -> None:
    """What makes a big young generation safe for a host: parlour's turns free what they
    make by reference counting, so the collector finds next to nothing to collect (were a
    turn to leave cycles, a host under ``host_collector`` would hold them longer)."""
    agent = Agent(ScriptedClient(), output=OutputSize.STANDARD, depth=Depth.IMMEDIATE)
    with LmdbStore(tmp_path) as store:
        service = ConversationService(store, MemorySessionCache(), cleanup_interval_s=0)
        chats = [agent.chat(service, user_id=f"user-{n}") for n in range(10)]
        for chat in chats:
            chat.send("Hello, first turn.")  # the process's one-off costs

        async def more() -> None:
            for turn in range(10):
                await asyncio.gather(*(chat.asend(f"Turn {turn} on the loop.") for chat in chats))

        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        try:
            for turn in range(10):
                for chat in chats:
                    chat.send(f"Turn {turn} on a thread.")
            asyncio.run(more())
            found = gc.collect()
        finally:
            if enabled:
                gc.enable()
        service.stop()
    assert found < 20, found  # 200 turns
