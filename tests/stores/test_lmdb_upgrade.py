"""The upgrade from layout 3 (the usage ledger inside each body) to layout 4 (one record per
ledger entry): the checked-in directory data/layout3 (see data/make_layout3.py) opens with
every conversation and every kept version exactly as the old code read them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

from parlour.runtime import ConversationContext
from parlour.runtime.errors import IllegalStateError
from parlour.runtime.snapshots import decode_snapshot
from parlour.stores import LmdbStore
from parlour.stores.lmdb._layout import LAYOUT

from .ledger_helpers import raw_db

LAYOUT3 = Path(__file__).parent / "data" / "layout3"


def _call(i: int, latency: float = 0.0) -> dict[str, Any]:
    return {
        "type": "model_call",
        "model": "m",
        "input_tokens": 10 * i,
        "output_tokens": i,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "latency_s": latency,
        "purpose": "answer",
    }


TRIM = {"type": "compaction", "level": "trim", "tokens_before": 9, "tokens_after": 4}
# what the code that wrote the fixture read back, by conversation and version
LEDGERS: dict[tuple[str, str], dict[int, list[dict[str, Any]]]] = {
    ("alice-0", "alice"): {
        1: [],
        2: [_call(1)],
        3: [_call(1), _call(2)],
        4: [_call(1), _call(2), _call(3)],
        5: [_call(1), _call(3)],
    },
    ("alice-1", "alice"): {1: [], 2: []},
    ("bob-0", "bob"): {
        1: [TRIM],
        2: [TRIM, _call(1, 0.25)],
        3: [TRIM, _call(1, 0.25), _call(2, 1.5)],
    },
}
MESSAGES = {"alice-0": [1, 2, 3, 4, 5], "alice-1": [1, 2], "bob-0": [1, 1, 2]}


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    target = tmp_path / "old"
    shutil.copytree(LAYOUT3, target)
    return target


def test_every_version_of_a_layout_3_store_reads_back_exactly_after_the_upgrade(
    old_store: Path,
) -> None:
    with LmdbStore(old_store) as store:
        for (cid, user), ledgers in LEDGERS.items():
            assert [v.version for v in store.get_version_history(cid, user)] == sorted(
                ledgers, reverse=True
            )
            for version, ledger in ledgers.items():
                kept = store.load_version(cid, version, user)
                assert kept is not None and kept.usage == ledger, (cid, version)
                assert len(kept.messages) == MESSAGES[cid][version - 1]
            current = store.load(cid, user)
            assert current is not None and current.usage == ledgers[max(ledgers)]
    assert raw_db(old_store, b"meta")[b"layout"] == str(LAYOUT).encode()


def test_the_upgrade_moves_each_ledger_out_of_its_body_into_one_record_per_entry(
    old_store: Path,
) -> None:
    LmdbStore(old_store).close()
    bodies, usage = raw_db(old_store, b"bodies"), raw_db(old_store, b"usage")
    for key, body in bodies.items():
        assert decode_snapshot(body, key.decode()).usage == []
    by_id: dict[str, list[dict[str, Any]]] = {}
    for key in sorted(usage):
        cid, index = key[:-9], key[-8:]  # id, NUL, 8-byte index
        by_id.setdefault(cid.decode(), []).append(msgspec.json.decode(usage[key]))
        assert int.from_bytes(index, "big") == len(by_id[cid.decode()]) - 1
    assert by_id == {"alice-0": [_call(1), _call(3)], "bob-0": LEDGERS[("bob-0", "bob")][3]}
    heads = {k.decode(): msgspec.json.decode(v) for k, v in raw_db(old_store, b"heads").items()}
    assert {cid: h["usage_count"] for cid, h in heads.items()} == {
        "alice-0": 2,
        "alice-1": 0,
        "bob-0": 3,
    }


def test_saves_after_the_upgrade_extend_the_history_and_keep_every_old_version(
    old_store: Path,
) -> None:
    with LmdbStore(old_store) as store:
        loaded = store.load("alice-0", "alice")
        assert loaded is not None
        c = loaded.to_conversation()
        for i in range(4, 7):
            c.usage_ledger.append(_call(i))
            c.stored_version = store.save_context(c.to_snapshot(), "alice")
        again = ConversationContext("bob-1", user_id="bob")
        again.usage_ledger.append(_call(9))
        assert store.create_context(again.to_snapshot(), "bob") == 3  # past the tombstone
    with LmdbStore(old_store) as store:
        ledgers = LEDGERS[("alice-0", "alice")] | {
            6: [_call(1), _call(3), _call(4)],
            7: [_call(1), _call(3), _call(4), _call(5)],
            8: [_call(1), _call(3), _call(4), _call(5), _call(6)],
        }
        for version, ledger in ledgers.items():
            kept = store.load_version("alice-0", version, "alice")
            assert kept is not None and kept.usage == ledger, version
        bob = store.load("bob-1", "bob")
        assert bob is not None and bob.usage == [_call(9)]
        assert store.undecodable() == []


def test_a_read_only_open_of_a_layout_3_store_names_the_upgrade(old_store: Path) -> None:
    with pytest.raises(IllegalStateError, match=r"older layout.*open it once for writing"):
        LmdbStore(old_store, readonly=True)
    assert raw_db(old_store, b"meta")[b"layout"] == b"3"
