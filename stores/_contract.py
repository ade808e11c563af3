"""What the conformance suite (``parlour.stores.testing``) uses besides pytest: a ticking
clock, one-message snapshots, the calls every refusal test makes, a barrier-started thread
runner, a gate that counts how often it is let go, and hostile values changed in place."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import msgspec

from parlour.runtime import ConversationContext, OutgoingMessage
from parlour.runtime.blocks import PojoBlock
from parlour.runtime.snapshots import ConversationPersistenceSnapshot

from ._protocols import PersistentStore


class Ticks:
    """A wall clock that moves one second per reading, so save times are distinct.

    Thread-safety: readings from many threads are distinct (one short lock)."""

    def __init__(self, start: dt.datetime = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) -> None:
        self.at = start
        self._lock = threading.Lock()

    def __call__(self) -> dt.datetime:
        with self._lock:
            self.at += dt.timedelta(seconds=1)
            return self.at


class CountingGate:
    """A turn gate (``_waiting.Gate``) that only counts: how often a store let it go for a
    wait, and took it back."""

    def __init__(self) -> None:
        self.let_go_count = 0
        self.take_back_count = 0

    def let_go(self) -> None:
        self.let_go_count += 1

    def take_back(self) -> None:
        self.take_back_count += 1


def snapshot(
    cid: str | None = "c1",
    text: str = "Are you working?",
    version: int = 0,
    user: str | None = "alice",
) -> ConversationPersistenceSnapshot:
    """A one-message conversation's snapshot, at ``version``."""
    context = ConversationContext(cid, user_id=user)
    context.put_main_objective("task", "Be brief.")
    context.add_user_message(text)
    context.stored_version = version
    return context.to_snapshot()


def stamped(
    saved: ConversationPersistenceSnapshot, version: int
) -> ConversationPersistenceSnapshot:
    return msgspec.structs.replace(saved, stored_version=version)


def said(store: PersistentStore, cid: str = "c1", user: str = "alice") -> list[str]:
    loaded = store.load(cid, user)
    assert loaded is not None
    return [str(m.raw_content) for m in loaded.messages]


def raising(conversation_id: str) -> None:
    raise RuntimeError(f"a listener that fails on {conversation_id}")


def every_call(store: PersistentStore, cid: str, user: str) -> list[Callable[[], object]]:
    return [
        lambda: store.create_context(snapshot(cid=cid, user=None), user),
        lambda: store.save_context(snapshot(cid=cid, version=1, user=None), user),
        lambda: store.load(cid, user),
        lambda: store.delete(cid, user),
        lambda: store.exists(cid, user),
        lambda: store.version_of(cid, user),
        lambda: store.get_version_history(cid, user),
        lambda: store.load_version(cid, 1, user),
    ]


def foreign_calls(store: PersistentStore) -> list[Callable[[], object]]:
    return [
        lambda: store.load("c1", "mallory"),
        lambda: store.save_context(snapshot(text="overwritten", user="mallory"), "mallory"),
        lambda: store.save_context(
            snapshot(text="overwritten", version=1, user="mallory"), "mallory"
        ),
        lambda: store.create_context(snapshot(text="overwritten", user="mallory"), "mallory"),
        lambda: store.delete("c1", "mallory"),
        lambda: store.version_of("c1", "mallory"),
        lambda: store.get_version_history("c1", "mallory"),
        lambda: store.load_version("c1", 1, "mallory"),
        lambda: store.load_version("c1", dt.datetime.now(dt.UTC), "mallory"),
    ]


def run_all(work: list[Callable[[], Any]]) -> None:
    """Run every callable in its own thread, released together; re-raise the first error."""
    start = threading.Barrier(len(work))
    errors: list[BaseException] = []

    def run(job: Callable[[], Any]) -> None:
        start.wait()
        try:
            job()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def save_ledger_edits(store: PersistentStore) -> dict[int, bytes]:
    """Create c1 for alice and save it through usage ledger edits (entries appended, the
    ledger shortened, replaced by equal copies, an entry swapped for one equal to it but in
    its bytes, emptied); each version's ledger as saved, encoded."""
    context = ConversationContext("c1", user_id="alice")
    context.add_user_message("First question")
    call: dict[str, Any] = {"type": "model_call", "input_tokens": 1}
    edits: list[Callable[[list[dict[str, Any]]], list[dict[str, Any]]]] = [
        lambda ledger: [*ledger, call],
        lambda ledger: [*ledger, {"type": "compaction", "level": "trim"}, {"latency_s": 0.5}],
        lambda ledger: ledger[:1],
        lambda ledger: [*(dict(e) for e in ledger), {"type": "model_call", "input_tokens": True}],
        lambda ledger: [ledger[0], {"type": "model_call", "input_tokens": 1.0}],
        lambda ledger: [],
    ]
    context.stored_version = store.create_context(context.to_snapshot(), "alice")
    saved = {context.stored_version: msgspec.json.encode(context.usage_ledger)}
    for edit in edits:
        context.usage_ledger = edit(context.usage_ledger)
        context.stored_version = store.save_context(context.to_snapshot(), "alice")
        saved[context.stored_version] = msgspec.json.encode(context.usage_ledger)
    return saved


def nested(depth: int) -> dict[str, Any]:
    """A dict ``depth`` containers deep: ``nested(1)`` is ``{}``."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


# values that encode and never load back, or do not encode at all: each refused at the save
HOSTILE: dict[str, Callable[[], object]] = {
    "nested 65 deep": lambda: nested(65),
    "nested 5,000 deep": lambda: nested(5000),
    "a lone surrogate": lambda: "hi \ud800",
    "a lone surrogate key": lambda: {"\udfff": 1},
    "an object": lambda: object(),
    "a set of objects": lambda: {object()},
}


def with_a_value(cid: str = "c1") -> ConversationContext:
    """A conversation of alice's whose last message holds a PojoBlock of ``{"k": 1}`` and
    whose ledger holds one entry: the places an application changes in place."""
    context = ConversationContext(cid, user_id="alice")
    context.add_user_message("first")
    context.add_message(OutgoingMessage("", [PojoBlock(value={"k": 1})]))
    context.usage_ledger.append({"type": "model_call", "input_tokens": 1})
    return context


def change_in_place(context: ConversationContext, where: str, value: object) -> str:
    """Put ``value`` into the last message's PojoBlock value (``where`` "message") or the
    last ledger entry ("ledger"), in place; what a refusal names."""
    if where == "message":
        block = context.messages[-1].blocks[0]
        assert isinstance(block, PojoBlock)
        block.value["k"] = value
        return f"message {len(context.messages) - 1}"
    context.usage_ledger[-1]["x"] = value
    return f"usage ledger entry {len(context.usage_ledger) - 1}"
