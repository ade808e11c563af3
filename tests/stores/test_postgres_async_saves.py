"""PostgresStore's saves awaited on a loop: as many in flight at once as the store has
connections (not the loop's default executor's few), and none after ``close``."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from parlour.runtime import ConversationContext
from parlour.runtime.errors import IllegalStateError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import PostgresStore

USER = "ann"
EXECUTOR_THREADS = min(32, (os.cpu_count() or 1) + 4)  # the loop's default executor's


class Together(PostgresStore):
    """A PostgresStore whose saves each wait until ``barrier`` has as many in flight."""

    barrier: threading.Barrier

    def save_context(
        self, snapshot: ConversationPersistenceSnapshot, user_id: str, caller: object = None
    ) -> int:
        self.barrier.wait(timeout=30)
        return super().save_context(snapshot, user_id, caller)


def _snapshot(cid: str, text: str) -> ConversationPersistenceSnapshot:
    context = ConversationContext(cid, user_id=USER)
    context.add_user_message(text)
    return ConversationPersistenceSnapshot.of(context)


def test_as_many_async_saves_are_in_flight_as_the_store_has_connections(
    postgres_conninfo: str,
) -> None:
    connections = EXECUTOR_THREADS + 2
    store = Together(postgres_conninfo, max_connections=connections)
    with store:
        store.barrier = threading.Barrier(connections)
        firsts = [_snapshot(f"c{i}", "first") for i in range(connections)]
        for snapshot in firsts:
            store.create_context(snapshot, USER)

        async def main() -> list[int]:
            saves = []
            for i, first in enumerate(firsts):
                second = _snapshot(f"c{i}", "second")
                second.stored_version = first.stored_version or 1
                saves.append(store.save_context_async(second, USER))
            return list(await asyncio.gather(*saves))

        assert asyncio.run(main()) == [2] * connections
        for i in range(connections):
            loaded = store.load(f"c{i}", USER)
            assert loaded is not None and loaded.messages[0].raw_content == "second"


def test_an_async_save_after_close_is_refused_at_once(postgres_conninfo: str) -> None:
    store = PostgresStore(postgres_conninfo)
    store.create_context(_snapshot("c", "first"), USER)
    store.close()

    async def main() -> None:
        with pytest.raises(IllegalStateError, match="closed"):
            store.save_context_async(_snapshot("c", "second"), USER)

    asyncio.run(main())
