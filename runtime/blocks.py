"""Content blocks: the eleven kinds a message is made of, as one msgspec tagged union.

Every block is a frozen ``msgspec.Struct`` with a stable ``type`` tag (B100), so a snapshot
decodes to exactly the types it encoded and a class rename is never a wire change.
"""

from __future__ import annotations

import importlib
from typing import Any

import msgspec
from msgspec.structs import force_setattr

__all__ = [
    "ContentBlock",
    "FileBlock",
    "ImageBlock",
    "JsonBlock",
    "PojoBlock",
    "RedactedThinkingBlock",
    "SkillBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolDefinitionBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "class_path_of",
    "revive",
]


class Block(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every content block: frozen, keyword-only, tagged by ``type``."""


class TextBlock(Block, tag="text"):
    text: str


class PojoBlock(Block, tag="pojo"):
    """A typed value (a msgspec Struct, a dataclass or a dict) the model reads as JSON.

    ``class_path`` ("module:QualName") is filled in on construction so that a snapshot can
    bring the value back typed; see ``revive``.
    """

    value: Any
    class_path: str | None = None

    def __post_init__(self) -> None:
        if self.class_path is None and not isinstance(self.value, dict):
            force_setattr(self, "class_path", class_path_of(type(self.value)))


class JsonBlock(Block, tag="json"):
    json: str


class ToolDefinitionBlock(Block, tag="tool_definition"):
    """A tool the model may call; it is its own declared tool (``definition()`` is ``self``)."""

    name: str
    description: str
    schema_json: str | None = None

    def definition(self) -> ToolDefinitionBlock:
        return self


class ImageBlock(Block, tag="image"):
    data: str  # base64
    mime_type: str
    description: str | None = None


class FileBlock(Block, tag="file"):
    data: str  # base64
    mime_type: str
    filename: str | None = None


class ToolUseBlock(Block, tag="tool_use"):
    id: str
    name: str
    input_json: str


class ToolResultBlock(Block, tag="tool_result"):
    tool_use_id: str
    content: str
    is_error: bool = False


class ThinkingBlock(Block, tag="thinking"):
    text: str
    signature: str | None = None


class RedactedThinkingBlock(Block, tag="redacted_thinking"):
    data: str


class SkillBlock(Block, tag="skill"):
    name: str
    body: str


ContentBlock = (
    TextBlock
    | PojoBlock
    | JsonBlock
    | ToolDefinitionBlock
    | ImageBlock
    | FileBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | SkillBlock
)


def class_path_of(cls: type) -> str:
    """The import path ``module:QualName`` of ``cls``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve(class_path: str) -> type | None:
    module_name, _, qualname = class_path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError, ValueError):
        return None
    return target if isinstance(target, type) else None


_json_encoder = msgspec.json.Encoder()


def revive(block: ContentBlock) -> ContentBlock:
    """Bring a decoded ``PojoBlock`` back to its class; degrade to ``JsonBlock`` if it is gone.

    Every other block is returned as it is.
    """
    if not isinstance(block, PojoBlock) or block.class_path is None:
        return block
    if not isinstance(block.value, dict):
        return block  # already typed
    cls = _resolve(block.class_path)
    if cls is not None:
        try:
            return PojoBlock(value=msgspec.convert(block.value, cls), class_path=block.class_path)
        except (msgspec.ValidationError, TypeError):
            pass
    return JsonBlock(json=_json_encoder.encode(block.value).decode())
