"""A restored message is the message its constructor would make, slot for slot; a
hand-built snapshot the constructor would refuse is refused on restore too."""

from __future__ import annotations

import msgspec
import pytest

from parlour.runtime import IncomingMessage, Message, OutgoingMessage
from parlour.runtime import blocks as b
from parlour.runtime.snapshots import MessageSnapshot, decode_message_snapshot

_SLOTS = (
    "role",
    "_raw_content",
    "compactable",
    "app_authored",
    "cache",
    "requested_output_tokens",
)


def _made() -> list[Message]:
    return [
        OutgoingMessage("plain ascii question"),
        OutgoingMessage("café, naïve: ünïcode", role="user", cache=True),
        IncomingMessage(blocks=[b.TextBlock(text="an answer")], requested_output_tokens=512),
        IncomingMessage("réponse", compactable=False, app_authored=True),
        Message("system-note", None, [b.TextBlock(text="ünïcode block")]),
    ]


@pytest.mark.parametrize("index", range(5))
def test_a_restored_message_has_every_slot_its_constructor_gives(index: int) -> None:
    made = _made()[index]
    stored = MessageSnapshot.of(made)
    decoded = decode_message_snapshot(msgspec.json.encode(stored), "conversation-1")
    revived = decoded.to_message(None)
    assert type(revived) is type(made)
    for slot in _SLOTS:
        assert getattr(revived, slot) == getattr(made, slot), slot
    assert list(revived.blocks) == list(made.blocks)
    every_slot = {n for k in type(made).__mro__ for n in getattr(k, "__slots__", ())}
    for slot in every_slot - {"__weakref__"}:  # a slot the revival forgot is unset
        assert hasattr(revived, slot), slot
    assert revived.raw_content == made.raw_content
    if isinstance(made, (OutgoingMessage, IncomingMessage)):
        assert isinstance(revived, (OutgoingMessage, IncomingMessage))
        assert revived.response_handler is None
    # the block list still hears changes: an added block forgets the memoized snapshot
    assert MessageSnapshot.of(revived) is decoded
    revived.add_text("more")
    assert MessageSnapshot.of(revived) is not decoded
    with pytest.raises(ValueError):
        revived.blocks.append("not a block")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "fields",
    [
        {"role": 7},
        {"role": "us\ud800er"},
        {"raw_content": "lone \udc00 surrogate"},
        {"compactable": 1},
        {"cache": "yes"},
        {"requested_output_tokens": 1.5},
    ],
)
def test_a_hand_built_snapshot_the_constructor_refuses_is_refused_on_restore(
    fields: dict[str, object],
) -> None:
    base: dict[str, object] = {"direction": "outgoing", "role": "user", "blocks": []}
    snapshot = MessageSnapshot(**{**base, **fields})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        snapshot.to_message(None)
