"""Content blocks: the eleven kinds a message is made of, as one msgspec tagged union.

Every block is a frozen ``msgspec.Struct`` with a stable ``type`` tag (B100), so a snapshot
decodes to exactly the types it encoded and a class rename is never a wire change.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import msgspec
from msgspec.structs import force_setattr

from parlour.runtime.errors import IllegalStateError, UncorrectableLLMError

__all__ = [
    "BLOCK_KINDS",
    "ContentBlock",
    "ContentBlockSnapshot",
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
    "render_text",
    "render_tool_text",
    "revive",
]


class Block(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every content block: frozen, keyword-only, tagged by ``type``."""


class TextBlock(Block, tag="text", frozen=True):
    text: str


class PojoBlock(Block, tag="pojo", frozen=True):
    """A typed value (a msgspec Struct, a dataclass or a dict) the model reads as JSON.

    ``class_path`` ("module:QualName") is filled in on construction so that a snapshot can
    bring the value back typed; see ``revive``.
    """

    value: Any
    class_path: str | None = None

    def __post_init__(self) -> None:
        if self.class_path is None and not isinstance(self.value, dict):
            force_setattr(self, "class_path", class_path_of(type(self.value)))


class JsonBlock(Block, tag="json", frozen=True):
    json: str


class ToolDefinitionBlock(Block, tag="tool_definition", frozen=True):
    """A tool the model may call; it is its own declared tool (``definition()`` is ``self``)."""

    name: str
    description: str
    schema_json: str | None = None

    def definition(self) -> ToolDefinitionBlock:
        return self


class ImageBlock(Block, tag="image", frozen=True):
    data: str  # base64
    mime_type: str
    description: str | None = None


class FileBlock(Block, tag="file", frozen=True):
    data: str  # base64
    mime_type: str
    filename: str | None = None


class ToolUseBlock(Block, tag="tool_use", frozen=True):
    id: str
    name: str
    input_json: str


class ToolResultBlock(Block, tag="tool_result", frozen=True):
    tool_use_id: str
    content: str
    is_error: bool = False


class ThinkingBlock(Block, tag="thinking", frozen=True):
    text: str
    signature: str | None = None


class RedactedThinkingBlock(Block, tag="redacted_thinking", frozen=True):
    data: str


class SkillBlock(Block, tag="skill", frozen=True):
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


BLOCK_KINDS: dict[str, type[ContentBlock]] = {
    cls.__struct_config__.tag: cls  # type: ignore[misc]
    for cls in (
        TextBlock,
        PojoBlock,
        JsonBlock,
        ToolDefinitionBlock,
        ImageBlock,
        FileBlock,
        ToolUseBlock,
        ToolResultBlock,
        ThinkingBlock,
        RedactedThinkingBlock,
        SkillBlock,
    )
}
"""Every stored kind name (B100) and the block class it decodes to."""


class ContentBlockSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One block as stored: its kind name and its fields as plain data (B97-B99).

    The lenient form of a block: it decodes whatever kind a record names, and refuses an
    unknown one only when asked for the block, with an error that names the kind.
    """

    type: str
    fields: dict[str, Any] = msgspec.field(default_factory=dict)

    _unknown: ClassVar[str] = (
        "Stored content block kind '{}' is unknown; known kinds are {}. The record was "
        "written by a newer or foreign parlour."
    )

    @classmethod
    def from_block(cls, block: ContentBlock) -> ContentBlockSnapshot:
        """The stored form of ``block``; a PojoBlock keeps its class path beside the data."""
        raw = msgspec.to_builtins(block)
        kind = raw.pop("type")
        return cls(type=kind, fields=raw)

    def to_block(self) -> ContentBlock:
        """The block this snapshot holds.

        A PojoBlock comes back typed when its class still imports, else as a JsonBlock of
        the same data (B98).

        Raises:
            IllegalStateError: the kind is not one of ``BLOCK_KINDS`` (B99), or the fields
                do not fit it.
        """
        cls = BLOCK_KINDS.get(self.type)
        if cls is None:
            raise IllegalStateError(self._unknown.format(self.type, sorted(BLOCK_KINDS)))
        try:
            block = msgspec.convert(self.fields, cls)
        except msgspec.ValidationError as exc:
            raise IllegalStateError(
                f"Stored content block of kind '{self.type}' does not fit it: {exc}"
            ) from exc
        return revive(block)


def render_tool_text(tool: ToolDefinitionBlock) -> str:
    """The text form of a tool definition: what the text dialect sends and every count
    measures (B14)."""
    if tool.schema_json is None:
        return f"{tool.name}: {tool.description}"
    return f"{tool.name}: {tool.description}\n  Input parameters: {tool.schema_json}"


def render_text(block: ContentBlock) -> str:
    """The text-fallback encoding of one block, for a dialect that carries only text (B102).

    An empty string means the block emits nothing (thinking, redacted thinking, empty text).

    Raises:
        UncorrectableLLMError: a PojoBlock reached the encoder unconverted; the render
            pipeline turns every PojoBlock into a JsonBlock first (B103).
    """
    match block:
        case TextBlock(text=text):
            return text
        case JsonBlock(json=json):
            return json
        case ToolDefinitionBlock():
            return render_tool_text(block)
        case ToolUseBlock(name=name, input_json=input_json):
            return f"[Tool Use {name}] {input_json}"
        case ToolResultBlock(tool_use_id=tool_use_id, content=content):
            return f"[Tool Result {tool_use_id}] {content}"
        case ImageBlock(mime_type=mime_type):
            return f"[image {mime_type}]"
        case FileBlock(filename=filename, mime_type=mime_type):
            return f"[file {filename or mime_type}]"
        case SkillBlock(body=body):
            return body
        case ThinkingBlock() | RedactedThinkingBlock():
            return ""
        case PojoBlock():
            raise UncorrectableLLMError(
                f"A PojoBlock of {block.class_path or 'dict'} reached the text encoder "
                "unconverted; content must go through prepare_messages_for_llm."
            )
    raise UncorrectableLLMError(f"No text encoding for {type(block).__name__}.")
