"""The transformation pipeline, in one place: every block of every turn and every
objective slot goes through it, so the head and the turns render alike. With a registry, a
PojoBlock becomes model-facing JSON with artifacts as references and long fields
summarized."""

from __future__ import annotations

import msgspec

from parlour.runtime._artifacts import ArtifactRegistry
from parlour.runtime._serializer import write_summarized_with_refs
from parlour.runtime._summarizers import Summarizer
from parlour.runtime.blocks import ContentBlock, JsonBlock, PojoBlock, TextBlock, render_text

_json = msgspec.json.Encoder()


def to_llm_block(
    block: ContentBlock,
    registry: ArtifactRegistry | None = None,
    summarizer: Summarizer | None = None,
) -> ContentBlock:
    """The transformation pipeline for one block: a PojoBlock becomes a JsonBlock; every
    other kind passes through unchanged (B119).

    With a registry, the JSON is the model-facing write: artifacts registered and replaced
    by ``{"@ref": ...}``, long summarizable fields summarized (B110, B111).
    """
    if isinstance(block, PojoBlock):
        if registry is not None:
            return JsonBlock(json=write_summarized_with_refs(block.value, registry, summarizer))
        return JsonBlock(json=_json.encode(block.value).decode())
    return block


def render_slot(
    block: ContentBlock,
    registry: ArtifactRegistry | None = None,
    summarizer: Summarizer | None = None,
) -> str:
    """The text an objective slot contributes to ``system_text``, through the same pipeline
    as the turns (B41, B139)."""
    if isinstance(block, TextBlock):
        return block.text
    return render_text(to_llm_block(block, registry, summarizer))
