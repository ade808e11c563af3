"""Content blocks: the twelve kinds a message is made of, as one msgspec tagged union.

Every block is a frozen, keyword-only ``msgspec.Struct`` with a stable ``type`` tag, so a
snapshot decodes to exactly the types it encoded and a class rename is never a wire change.
Every kind declares ``kw_only`` (msgspec does not inherit it) and repeats ``frozen``:
msgspec would inherit it, but type checkers read a Struct as a dataclass, and a dataclass
subclass that does not say ``frozen`` is a mutable one (mypy refuses it).

The block-to-text functions live here too: ``render_text`` (what a text-only dialect
sends), ``render_tool_text`` (a tool definition as text) and ``transcript_text`` (what a
person reads in a transcript).

Restore never imports: ``revive`` resolves a stored ``PojoBlock.class_path`` only among the
classes the application registered (artifact type aliases) and modules already imported; a
path naming anything else, or not shaped like ``module:QualName``, brings the value back as
a ``JsonBlock`` of the same data.
"""

from __future__ import annotations

import inspect
import sys
import types
import typing
from typing import Any, ClassVar

import msgspec
from msgspec.structs import force_setattr

from ._validation import check_text, check_value, is_valid_text
from .errors import IllegalStateError, UncorrectableLLMError
from .schema._aliases import registered_classes

__all__ = [
    "BLOCK_KINDS",
    "ContentBlock",
    "ContentBlockSnapshot",
    "FileBlock",
    "ImageBlock",
    "JsonBlock",
    "PojoBlock",
    "ReasoningBlock",
    "RedactedThinkingBlock",
    "SkillBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolDefinitionBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "check_block",
    "class_path_of",
    "plainly_storable",
    "render_text",
    "render_tool_text",
    "revive",
    "transcript_text",
]


class Block(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every content block: frozen, keyword-only, tagged by ``type``."""


class TextBlock(Block, tag="text", frozen=True, kw_only=True):
    text: str


class PojoBlock(Block, tag="pojo", frozen=True, kw_only=True):
    """A typed value (a msgspec Struct, a dataclass or a dict) the model reads as JSON.

    ``class_path`` ("module:QualName") is filled in on construction so that a snapshot can
    bring the value back typed; see ``revive``.
    """

    value: Any
    class_path: str | None = None

    def __post_init__(self) -> None:
        if self.class_path is None and not isinstance(self.value, dict):
            force_setattr(self, "class_path", class_path_of(type(self.value)))


class JsonBlock(Block, tag="json", frozen=True, kw_only=True):
    json: str


class ToolDefinitionBlock(Block, tag="tool_definition", frozen=True, kw_only=True):
    """A tool the model may call; it is its own declared tool (``definition()`` is ``self``)."""

    name: str
    description: str
    schema_json: str | None = None

    def definition(self) -> ToolDefinitionBlock:
        return self


class ImageBlock(Block, tag="image", frozen=True, kw_only=True):
    data: str  # base64
    mime_type: str
    description: str | None = None


class FileBlock(Block, tag="file", frozen=True, kw_only=True):
    data: str  # base64
    mime_type: str
    filename: str | None = None


class ToolUseBlock(Block, tag="tool_use", frozen=True, kw_only=True):
    id: str
    name: str
    input_json: str


class ToolResultBlock(Block, tag="tool_result", frozen=True, kw_only=True):
    tool_use_id: str
    content: str
    is_error: bool = False


class ThinkingBlock(Block, tag="thinking", frozen=True, kw_only=True):
    text: str
    signature: str | None = None


class RedactedThinkingBlock(Block, tag="redacted_thinking", frozen=True, kw_only=True):
    data: str


class ReasoningBlock(Block, tag="reasoning", frozen=True, kw_only=True):
    """A reasoning item of OpenAI's Responses API as it came (``item_json``), sent back
    unchanged by that dialect and left out by the others (only OpenAI reads its encrypted
    content); ``summary`` is its readable text, ``followed_by`` the id of the output item
    after it, which the API pairs it with."""

    item_json: str
    summary: str = ""
    followed_by: str | None = None


class SkillBlock(Block, tag="skill", frozen=True, kw_only=True):
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
    | ReasoningBlock
    | SkillBlock
)


def class_path_of(cls: type) -> str:
    """The import path ``module:QualName`` of ``cls``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve(class_path: str) -> type | None:
    """The class ``class_path`` names, found without importing anything; None if there is
    none: a registered artifact class first, then a module already in ``sys.modules``."""
    registered = registered_classes().get(class_path)
    if registered is not None:
        return registered
    module_name, _, qualname = class_path.partition(":")
    parts = qualname.split(".")
    if not _dotted_identifiers(module_name) or not all(p.isidentifier() for p in parts):
        return None
    target: Any = sys.modules.get(module_name)
    for part in parts:
        # static lookup: a module's __getattr__ (a lazy importer) or a descriptor never runs
        target = inspect.getattr_static(target, part, None)
    return target if isinstance(target, type) else None


def _dotted_identifiers(name: str) -> bool:
    return all(part.isidentifier() for part in name.split("."))


_json_encoder = msgspec.json.Encoder()


def revive(block: ContentBlock) -> ContentBlock:
    """Bring a decoded ``PojoBlock`` back to its class, never importing a module.

    The class is looked up among registered artifact classes and modules already imported;
    when it is not found, the path is malformed, or the data does not convert, the block
    degrades to a ``JsonBlock`` of the same value. Every other block is returned as it is.
    Nothing is raised for an odd path.
    """
    if not isinstance(block, PojoBlock) or block.class_path is None:
        return block
    if not isinstance(block.value, dict):
        return block  # already typed
    cls = _resolve(block.class_path)
    if cls is not None:
        try:
            return PojoBlock(value=msgspec.convert(block.value, cls), class_path=block.class_path)
        except Exception:  # whatever the class refuses, the data comes back as JSON
            pass
    return JsonBlock(json=_json_encoder.encode(block.value).decode())


BLOCK_KINDS: dict[str, type[ContentBlock]] = {
    cls.__struct_config__.tag: cls for cls in typing.get_args(ContentBlock)
}
"""Every stored kind name and the block class it decodes to, derived from the union."""


def _field_types(cls: type) -> tuple[tuple[str, tuple[type, ...]], ...]:
    """Each field of a block kind with the Python types it may hold (Any: none listed)."""
    hints = typing.get_type_hints(cls)
    out = []
    for name in cls.__struct_fields__:  # type: ignore[attr-defined]
        hint = hints[name]
        args = typing.get_args(hint) if typing.get_origin(hint) is types.UnionType else (hint,)
        out.append((name, () if hint is Any else tuple(args)))
    return tuple(out)


_FIELDS: dict[type, tuple[tuple[str, tuple[type, ...]], ...]] = {
    cls: _field_types(cls) for cls in BLOCK_KINDS.values()
}


def plainly_storable(block: object) -> bool:
    """True when ``block`` is a content block whose text is all ASCII and whose other fields
    have their declared types: the common case, proven without building any message.
    False only means "look closer" (``check_block`` decides)."""
    if type(block) is TextBlock:  # the most common block: one field, checked inline
        text = block.text
        return type(text) is str and text.isascii()
    fields = _FIELDS.get(type(block))
    if fields is None or type(block) is PojoBlock:
        return False
    for name, allowed in fields:
        value = getattr(block, name)
        if isinstance(value, str):
            if not value.isascii():
                return False
        elif allowed and not isinstance(value, allowed):
            return False
    return True


def check_block(block: object, where: str) -> None:
    """Refuse a block that could not be stored and read back (see ``_validation``).

    Cheap: a type lookup, then per text field one ``isascii`` (a strict encode only for
    non-ASCII text); only a PojoBlock's value is walked. A caller on a hot path may test
    ``plainly_storable(block)`` first and build ``where`` only when it is False.

    Raises:
        ValueError: ``block`` is no content block, a field has the wrong type or holds a
            lone surrogate, or a PojoBlock's value fails ``check_value``; the message names
            ``where``, the kind and the field.
    """
    if plainly_storable(block):
        return
    fields = _FIELDS.get(type(block))
    if fields is None:
        kind = "a Block subclass" if isinstance(block, Block) else type(block).__name__
        raise ValueError(f"{where} is {kind}, not one of the content block kinds; refused")
    kind = type(block).__name__
    for name, allowed in fields:
        value = getattr(block, name)
        if isinstance(value, str):
            if not is_valid_text(value):
                check_text(value, f"{where} ({kind}.{name})")
        elif allowed and not isinstance(value, allowed):
            expected = " or ".join(t.__name__ for t in allowed)
            raise ValueError(
                f"{where} ({kind}.{name}) is of type {type(value).__name__}, not {expected}; "
                "refused"
            )
    if type(block) is PojoBlock:
        check_value(block.value, f"{where} (PojoBlock.value)")


class ContentBlockSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One block as stored: its kind name and its fields as plain data.

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

        A PojoBlock comes back typed when its class is registered or already imported, else
        as a JsonBlock of the same data (see ``revive``).

        Raises:
            IllegalStateError: the kind is not one of ``BLOCK_KINDS``, or the fields do not
                fit it.
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
    measures."""
    if tool.schema_json is None:
        return f"{tool.name}: {tool.description}"
    return f"{tool.name}: {tool.description}\n  Input parameters: {tool.schema_json}"


def render_text(block: ContentBlock) -> str:
    """The text-fallback encoding of one block, for a dialect that carries only text.

    An empty string means the block emits nothing (thinking, redacted thinking, empty text).

    Raises:
        UncorrectableLLMError: a PojoBlock reached the encoder unconverted; the render
            pipeline turns every PojoBlock into a JsonBlock first.
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
        case ThinkingBlock() | RedactedThinkingBlock() | ReasoningBlock():
            return ""
        case PojoBlock():
            raise UncorrectableLLMError(
                f"A PojoBlock of {block.class_path or 'dict'} reached the text encoder "
                "unconverted; content must go through prepare_messages_for_llm."
            )
    raise UncorrectableLLMError(f"No text encoding for {type(block).__name__}.")


def transcript_text(block: ContentBlock) -> str:
    """One block as a person reads it in a transcript; an empty string leaves it out.

    Thinking (the provider's channel, meant for nobody else) and tool definitions are left
    out; typed data reads as its JSON.
    """
    match block:
        case TextBlock(text=text) | JsonBlock(json=text):
            return text
        case ToolUseBlock(id=call_id, name=name, input_json=arguments):
            return f"<tool call {name} id={call_id}> {arguments}"
        case ToolResultBlock(tool_use_id=call_id, content=content, is_error=is_error):
            return f"<tool result id={call_id}{' error' if is_error else ''}> {content}"
        case SkillBlock(name=name):
            return f"<skill {name}>"
        case ImageBlock(mime_type=mime_type):
            return f"<image {mime_type}>"
        case FileBlock(filename=filename, mime_type=mime_type):
            return f"<file {filename or mime_type}>"
        case PojoBlock(value=value):
            return _json_encoder.encode(value).decode()
    return ""
