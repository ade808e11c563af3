"""The service's parts, each built alone from what it is given: the registry, the leases and
the lifecycle (the service's own tests drive them all together)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from parlour.actors import BasicThinker
from parlour.actors._deferred import DeferredSaves
from parlour.actors._leases import Leases
from parlour.actors._lifecycle import Lifecycle
from parlour.actors._messages import Acquire, FutureDelivery, Granted, Owner, Reload, Spawn
from parlour.actors._mirror import Mirror
from parlour.actors._registry import Registry
from parlour.actors._supervisor import Supervisor
from parlour.runtime import ConversationContext
from parlour.runtime.errors import IllegalStateError
from parlour.runtime.testing import FakeClock
from parlour.stores import MemorySessionCache, MemoryStore


def _registry(session: MemorySessionCache | None = None) -> Registry:
    mirror = Mirror()
    return Registry(Supervisor.start(FakeClock(), 100, mirror), mirror, session)


def _acquire(job: str) -> Acquire:
    return Acquire(
        Owner(job, "alice", "wf", None, hash(job)), 10_000.0, 60.0, 30.0, FutureDelivery()
    )


@pytest.fixture
def registry() -> Iterator[Registry]:
    registry = _registry(MemorySessionCache())
    yield registry
    registry.supervisor.stop()


def test_a_registry_answers_defaults_and_refuses_obtains_once_its_supervisor_stopped() -> None:
    registry = _registry()
    registry.supervisor.stop()
    assert registry.ask(object(), "the default") == "the default"
    assert registry.find("c1") is None and registry.holder("c1", "alice") is None
    assert registry.count() == (0, 0) and registry.sweep() == 0
    with pytest.raises(IllegalStateError, match="shutting down"):
        registry.ask_or_refuse(object())


def test_forgetting_clears_the_cache_and_sends_a_restore_that_loaded_before_back(
    registry: Registry,
) -> None:
    thinker = BasicThinker("alice")
    cid = thinker.mint_conversation_id()
    assert registry.session is not None
    registry.session.put(ConversationContext(cid, user_id="alice").to_snapshot())
    loaded = ConversationContext(cid, user_id="alice")
    epoch = registry.mirror.epoch  # what a restore reads before it loads
    registry.forget(cid, "deleted")
    assert registry.session.get(cid, "alice") is None
    assert isinstance(registry.ask_or_refuse(Spawn(loaded, epoch, _acquire("j1"))), Reload)


def test_leases_hand_back_to_the_activation_that_granted_and_drop_only_the_jobs_own(
    registry: Registry,
) -> None:
    leases = Leases(registry, FakeClock())
    forwarded = registry.ask_or_refuse(
        Spawn(ConversationContext("c1", user_id="alice"), 0, _acquire("j1"))
    )
    granted = forwarded.reply.get(timeout=5)
    assert isinstance(granted, Granted)
    leases.hold("c1", "j1", granted.context, forwarded.ref)
    leases.hold("c2", "j2", ConversationContext("c2"), forwarded.ref)
    assert leases.drop_job("j2") == ["c2"]
    owner = BasicThinker("alice", job_id="j1")
    leases.release("c1", owner, 0.0)  # zero retention: released and evicted
    assert registry.count() == (0, 0) and registry.find("c1") is None
    assert owner.transcript() == ""  # captured at release: an empty conversation


def test_a_lifecycle_stops_once_forgets_the_leases_and_takes_back_a_cacheless_listener(
    registry: Registry,
) -> None:
    store = MemoryStore()
    heard: list[str] = []  # what the listener was told
    for cid in ("gone-before", "gone-after"):
        store.create_context(ConversationContext(cid, user_id="alice").to_snapshot(), "alice")
    leases = Leases(registry, FakeClock())
    context = ConversationContext("c1", user_id="alice")
    forwarded = registry.ask_or_refuse(Spawn(context, 0, _acquire("j1")))
    leases.hold("c1", "j1", context, forwarded.ref)  # j1 keeps it past the grace (none)
    deferred = DeferredSaves(store, None, registry.forget)
    lifecycle = Lifecycle(registry, leases, deferred, store, None, heard.append, FakeClock(), 0.0)
    assert store.delete("gone-before", "alice") and heard == ["gone-before"]  # listening
    lifecycle.stop()
    lifecycle.stop()  # once: the second returns at once
    assert lifecycle.stopping.is_set() and lifecycle.stopped
    assert not registry.supervisor.is_alive() and not forwarded.ref.is_alive()
    assert leases.drop_job("j1") == []  # forgotten at stop
    assert store.delete("gone-after", "alice") and heard == ["gone-before"]  # taken back
