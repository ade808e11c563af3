"""A create in flight is visible to an update of the same id: the update, issued while the
create is still encoding, waits for it and is applied after it, instead of being refused
as if the conversation did not exist (and lost)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from parlour.runtime import ConversationContext, OutgoingMessage
from parlour.runtime.errors import ConversationNotFoundError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import LmdbStore, _body, _inflight
from parlour.stores.lmdb import _writes
from parlour.stores.postgres import _store as postgres_store


@pytest.fixture(params=["lmdb", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "lmdb":
        with LmdbStore(tmp_path, sync=False) as made:
            yield made
        return
    from parlour.stores import PostgresStore

    with PostgresStore(request.getfixturevalue("postgres_conninfo")) as made:
        yield made


def _large(cid: str) -> ConversationContext:
    c = ConversationContext(cid, user_id="alice")
    for i in range(200):
        c.add_user_message(f"question {i} " + "x" * 500)
        c.add_message(OutgoingMessage(f"answer {i}"))
    return c


def _run(target: Callable[[], Any], out: dict[str, Any], name: str) -> threading.Thread:
    def run() -> None:
        try:
            out[name] = target()
        except Exception as exc:  # the test asserts on it
            out[name] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_an_update_issued_while_the_create_encodes_is_applied_after_it(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The create is held inside its encoding until the update has either been answered
    (before: refused with ``ConversationNotFoundError``) or is waiting for the create."""
    proceed, encoding = threading.Event(), threading.Event()
    real_body_after = _body.body_after

    def held_body_after(snapshot: ConversationPersistenceSnapshot, last: Any) -> Any:
        if not encoding.is_set():  # the create's encoding: held until the update is issued
            encoding.set()
            proceed.wait()
        return real_body_after(snapshot, last)

    real_wait = _inflight.Creates.wait_for

    def observed_wait(self: _inflight.Creates, cid: str) -> None:
        if self.under_way:
            proceed.set()  # the update waits for the create: let the create go on
        real_wait(self, cid)

    monkeypatch.setattr(_writes, "body_after", held_body_after)
    monkeypatch.setattr(postgres_store, "body_after", held_body_after)
    monkeypatch.setattr(_inflight.Creates, "wait_for", observed_wait)

    c = _large("c-racing")
    created: dict[str, Any] = {}
    creating = _run(lambda: store.create_context(c.to_snapshot(), "alice"), created, "v")
    encoding.wait()
    c.stored_version = 1  # what the create will make
    c.add_user_message("the update")
    updated: dict[str, Any] = {}
    updating = _run(lambda: store.save_context(c.to_snapshot(), "alice"), updated, "v")
    updating.join()  # answered at once (refused), or after the create went on
    proceed.set()
    creating.join()
    assert created["v"] == 1
    assert updated["v"] == 2
    loaded = store.load("c-racing", "alice")
    assert loaded is not None and loaded.stored_version == 2
    assert loaded.messages[-1].raw_content == "the update"


def test_an_update_with_no_create_under_way_is_refused_at_once(store: Any) -> None:
    c = _large("c-missing")
    c.stored_version = 1
    with pytest.raises(ConversationNotFoundError):
        store.save_context(c.to_snapshot(), "alice")
    assert store.load("c-missing", "alice") is None
