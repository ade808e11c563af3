"""Damaged records, written straight into LMDB: every failure to read one is a
CorruptSnapshotError naming the conversation; other conversations and other users'
listings are untouched; only the administrative quarantine removes a record whose owner
cannot be read."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parlour.actors import BasicThinker, ConversationService
from parlour.runtime import Artifact, ConversationContext, IncomingMessage, type_alias
from parlour.runtime.errors import CorruptSnapshotError
from parlour.runtime.snapshots import ConversationPersistenceSnapshot
from parlour.stores import LmdbStore

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def _populate(path: Path) -> None:
    with LmdbStore(path, sync=False) as store:
        for cid, user in (("c1", "alice"), ("c2", "alice"), ("b1", "bob")):
            c = ConversationContext(cid, user_id=user)
            c.add_user_message(f"{cid} asks")
            c.add_message(IncomingMessage(f"{cid} answered"))
            c.usage_ledger.append({"type": "model_call", "input_tokens": 3})
            c.stored_version = store.create_context(c.to_snapshot(), user)
            c.add_user_message(f"{cid} asks again")
            c.usage_ledger.append({"type": "model_call", "input_tokens": 4})
            store.save_context(c.to_snapshot(), user)


def _key(target: str) -> tuple[bytes, bytes]:
    for prefix, db in (("message", b"messages"), ("usage", b"usage"), ("version", b"versions")):
        if target.startswith(prefix):
            return db, b"c1\x00" + int(target[-1]).to_bytes(8, "big")
    return target.encode(), b"c1"


def _damage(path: Path, target: str, mutate: Any) -> None:
    env = lmdb.open(str(path), max_dbs=8)
    name, key = _key(target)
    with env.begin(write=True) as txn:
        db = env.open_db(name, txn=txn)
        raw = txn.get(key, db=db)
        assert raw is not None
        txn.put(key, mutate(bytes(raw)), db=db)
    env.close()


def _flip(index: int, bit: int) -> Any:
    def mutate(raw: bytes) -> bytes:
        i = index % len(raw)
        return raw[:i] + bytes([raw[i] ^ (1 << bit)]) + raw[i + 1 :]

    return mutate


def _with_field(field: str, value: Any) -> Any:
    """A JSON record (a header, body, message, ledger entry) with ``field`` set to
    ``value``; a version record's msgpack payload (kind, time, then an array: body, count,
    writes, usage count, usage, start, usage start) with the field of that name set."""

    def mutate(raw: bytes) -> bytes:
        if raw[:1] in (b"C", b"D", b"S", b"A"):
            payload = msgspec.msgpack.decode(raw[9:])
            at = _PAYLOAD.index(field) if field in _PAYLOAD else 1
            if at < len(payload):
                payload[at] = value
            try:
                return raw[:9] + msgspec.msgpack.encode(payload)
            except OverflowError:  # an int past msgpack's 64 bits: damage it as text
                payload[at] = str(value)
                return raw[:9] + msgspec.msgpack.encode(payload)
        record = msgspec.json.decode(raw)
        record[field] = value
        return msgspec.json.encode(record)

    return mutate


_PAYLOAD = ["body", "count", "writes", "usage_count", "usage", "start", "usage_start"]
_HUGE = [2**63 - 1, 2**63, 2**64 - 1, -(2**63)]
_FIELDS = [  # a header's, a body's, a version record's, a ledger entry's
    *["user_id", "conversation_id", "version", "message_count", "usage_count", "title"],
    *_PAYLOAD,
    "input_tokens",
]


_mutations = st.one_of(
    st.binary(max_size=64).map(lambda garbage: lambda raw: garbage),
    st.integers(0, 400).map(lambda cut: lambda raw: raw[: cut % max(len(raw), 1)]),
    st.builds(_flip, st.integers(0, 400), st.integers(0, 7)),
    _json.map(lambda value: lambda raw: msgspec.json.encode(value)),
    st.builds(
        _with_field,
        st.sampled_from(_FIELDS),
        _json | st.sampled_from(["bob", "c2", "alice", 0, -1, 1, 7, "", *_HUGE]),
    ),
    st.integers(1, 5).map(lambda k: lambda raw: b"[" * (k * 40_000) + b"]" * (k * 40_000)),
    st.integers(1, 5).map(
        lambda k: lambda raw: raw[:-1] + b',"x":' + b"[" * k * 20 + b"]" * k * 20 + b"}"
    ),
)
_targets = st.sampled_from(
    ["heads", "bodies", "message0", "message1", "usage0", "usage1", "version1", "version2"]
)


def _check_untouched(store: LmdbStore) -> None:
    c2 = store.load("c2", "alice")
    assert c2 is not None and [m.raw_content for m in c2.messages] == [
        "c2 asks",
        "c2 answered",
        "c2 asks again",
    ]
    assert [s.conversation_id for s in store.list_conversations("bob")] == ["b1"]
    assert "c2" in [s.conversation_id for s in store.list_conversations("alice")]
    b1 = store.load("b1", "bob")
    assert b1 is not None and b1.messages[1].raw_content == "b1 answered"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_targets, _mutations)
def test_a_damaged_record_is_a_clear_error_and_touches_nothing_else(
    target: str, mutate: Any
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        _populate(path)
        _damage(path, target, mutate)
        with LmdbStore(path, sync=False) as store:
            reads: list[Callable[[], ConversationPersistenceSnapshot | None]] = [
                lambda: store.load("c1", "alice"),
                lambda: store.load_version("c1", 1, "alice"),
                lambda: store.load_version("c1", 2, "alice"),
            ]
            for read in reads:
                try:
                    loaded = read()
                except CorruptSnapshotError as exc:
                    assert "c1" in str(exc)
                    # a damaged past never hides the present
                    assert not target.startswith("version") or store.load("c1", "alice")
                except PermissionError:  # the header now names another owner: not alice's
                    assert target == "heads"
                else:  # the damage left a valid record: it is c1's, as its key and header say
                    assert loaded is None or loaded.conversation_id == "c1"
                    assert loaded is None or loaded.user_id in (None, "alice")
            _check_untouched(store)
            listed = store.list_conversations("alice")
            assert all(s.conversation_id in ("c1", "c2") for s in listed)


def _nested(raw: bytes) -> bytes:
    return raw[:-1] + b',"x":' + b"[" * 200_000 + b"]" * 200_000 + b"}"


@pytest.mark.parametrize("target", ["bodies", "message1"])
def test_a_deeply_nested_record_is_a_corrupt_snapshot_not_a_recursion_error(
    tmp_path: Path, target: str
) -> None:
    _populate(tmp_path)
    _damage(tmp_path, target, _nested)
    with (
        LmdbStore(tmp_path) as store,
        pytest.raises(CorruptSnapshotError, match=r"c1 nests deeper than parlour reads"),
    ):
        store.load("c1", "alice")


def test_a_body_naming_another_conversation_or_user_is_refused(tmp_path: Path) -> None:
    _populate(tmp_path)
    _damage(tmp_path, "bodies", _with_field("user_id", "bob"))
    with LmdbStore(tmp_path) as store:
        with pytest.raises(CorruptSnapshotError, match="c1 is damaged: its body names another"):
            store.load("c1", "alice")
        with pytest.raises(PermissionError):
            store.load("c1", "bob")
    _damage(tmp_path, "bodies", _with_field("user_id", "alice"))
    _damage(tmp_path, "bodies", _with_field("conversation_id", "c2"))
    with LmdbStore(tmp_path) as store, pytest.raises(CorruptSnapshotError, match="c1"):
        store.load("c1", "alice")


def test_a_damaged_header_is_removed_only_by_quarantine(tmp_path: Path) -> None:
    _populate(tmp_path)
    _damage(tmp_path, "heads", lambda raw: raw[:20])
    with LmdbStore(tmp_path) as store:
        heard: list[str] = []
        store.add_delete_listener(heard.append)
        for call in (store.load, store.exists, store.version_of, store.delete):
            with pytest.raises(CorruptSnapshotError, match="header of stored conversation c1"):
                call("c1", "alice")
        assert [s.conversation_id for s in store.list_conversations("alice")] == ["c2"]
        _check_untouched(store)
        assert store.damaged() == ["c1"]
        assert store.quarantine("c1") is True
        assert heard == ["c1"]
        assert store.damaged() == []
        assert store.load("c1", "alice") is None
        [record] = store.quarantined("c1")
        assert len(record.header) == 20 and record.body is not None
        assert [msgspec.json.decode(m)["raw_content"] for m in record.messages] == [
            "c1 asks",
            "c1 answered",
            "c1 asks again",
        ]
        c = ConversationContext("c1", user_id="alice")
        assert store.create_context(c.to_snapshot(), "alice") > 1  # never a version it had
        _check_untouched(store)


def test_quarantine_moves_a_healthy_record_too_and_answers_false_for_none(tmp_path: Path) -> None:
    _populate(tmp_path)
    with LmdbStore(tmp_path) as store:
        assert store.quarantine("b1") is True
        assert store.quarantine("b1") is False
        assert store.list_conversations("bob") == []
        assert not store.exists("b1", "bob")
        assert len(store.quarantined("b1")) == 1
        _check_untouched_but_bob(store)


def _check_untouched_but_bob(store: LmdbStore) -> None:
    c2 = store.load("c2", "alice")
    assert c2 is not None and c2.messages[0].raw_content == "c2 asks"
    assert [s.conversation_id for s in store.list_conversations("alice")] == ["c2", "c1"]


@pytest.mark.parametrize("field", ["message_count", "usage_count", "version"])
@pytest.mark.parametrize("count", [2**63, 2**64 - 1, 2**64, 10**30])
def test_a_header_count_past_what_a_store_holds_is_a_corrupt_snapshot_naming_it(
    tmp_path: Path, field: str, count: int
) -> None:
    _populate(tmp_path)
    _damage(tmp_path, "heads", _with_field(field, count))
    with LmdbStore(tmp_path) as store:
        for call in (store.load, store.version_of, store.get_version_history):
            with pytest.raises(CorruptSnapshotError, match="conversation c1"):
                call("c1", "alice")
        _check_untouched(store)


@pytest.mark.parametrize("field", ["count", "usage_count", "start", "usage_start"])
@pytest.mark.parametrize("count", [2**63, 2**64 - 1, -1, 10**7])
def test_a_version_record_counting_past_what_it_holds_is_a_corrupt_snapshot_naming_it(
    tmp_path: Path, field: str, count: int
) -> None:
    """Never a huge allocation nor a raw error: the version is damaged, the present loads."""
    _populate(tmp_path)
    _damage(tmp_path, "version2", _with_field(field, count))
    with LmdbStore(tmp_path) as store:
        with pytest.raises(CorruptSnapshotError, match="conversation c1"):
            store.load_version("c1", 2, "alice")
        loaded = store.load("c1", "alice")
        assert loaded is not None and loaded.stored_version == 2
        _check_untouched(store)


@type_alias("test:damage-counted")
class _Counted(Artifact, kw_only=True):
    n: int = 1


def test_a_stored_artifact_whose_data_does_not_fit_its_type_is_a_corrupt_snapshot_naming_it(
    tmp_path: Path,
) -> None:
    """The record decodes (an artifact is stored in its plain form), but restoring it into
    a conversation finds its data does not fit its class: the obtain fails with
    CorruptSnapshotError naming the conversation, not a raw ValueError."""
    c = ConversationContext("c1", user_id="alice")
    c.add_user_message("first")
    c.artifact_registry.register(_Counted(n=3))
    with LmdbStore(tmp_path) as store:
        store.create_context(c.to_snapshot(), "alice")

    def misfit(raw: bytes) -> bytes:
        body = msgspec.json.decode(raw)
        body["artifacts"][0]["n"] = "three"
        return msgspec.json.encode(body)

    _damage(tmp_path, "bodies", misfit)
    store = LmdbStore(tmp_path)
    service = ConversationService(store, cleanup_interval_s=0, shutdown_grace_s=0.1)
    try:
        loaded = store.load("c1", "alice")
        assert loaded is not None
        with pytest.raises(CorruptSnapshotError, match=r"conversation c1 .*artifact"):
            ConversationContext.from_snapshot(loaded)
        thinker = BasicThinker("alice")
        thinker.set_conversation_id("c1")
        with pytest.raises(CorruptSnapshotError, match=r"conversation c1 .*artifact"):
            service.obtain_conversation(None, thinker).get(timeout=10)
    finally:
        service.stop()
        store.close()
