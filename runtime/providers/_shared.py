"""What the provider dialects share: spec lookup, block text, tool schemas, media types."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any
from urllib.parse import urlsplit

import msgspec

from .._prepared import PreparedConversation
from ..blocks import (
    ContentBlock,
    FileBlock,
    JsonBlock,
    SkillBlock,
    TextBlock,
    ToolDefinitionBlock,
)
from ..models._budget import OutputDeclaration
from ..models._catalog import ModelCatalog
from ..models._spec import ModelSpec

__all__ = [
    "OutputDeclaration",
    "block_text",
    "check_base_url",
    "check_size",
    "file_text",
    "image_subtype",
    "is_blank",
    "spec_of",
    "tool_schema",
]

_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
# the image types Anthropic and Converse both take, by MIME subtype; ``jpg`` is a common
# misspelling of ``jpeg`` that both refuse
_IMAGE_SUBTYPES = {"jpeg": "jpeg", "jpg": "jpeg", "png": "png", "gif": "gif", "webp": "webp"}


def image_subtype(mime: str, provider: str, conversation_id: str | None) -> str:
    """The image format of ``mime`` (``image/jpg`` is ``jpeg``).

    Raises:
        ValueError: not a JPEG, PNG, GIF or WebP image.
    """
    kind, _, subtype = mime.lower().partition("/")
    format_ = _IMAGE_SUBTYPES.get(subtype) if kind == "image" else None
    if format_ is None:
        raise ValueError(
            f"Conversation {conversation_id}: {provider} takes images as JPEG, PNG, GIF or "
            f"WebP, and an image block is {mime}."
        )
    return format_


def file_text(block: FileBlock, conversation_id: str | None) -> str:
    """A ``text/*`` file's text.

    Raises:
        ValueError: its data is not base64 of UTF-8 text.
    """
    try:
        return base64.b64decode(block.data, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(
            f"Conversation {conversation_id}: file {block.filename!r} ({block.mime_type}) "
            "is not base64 of UTF-8 text, which a plain-text document must be."
        ) from exc


def check_size(
    size: int, limit: int, provider: str, what: str, conversation_id: str | None
) -> None:
    """Refuse an attachment past the size ``provider`` takes (``what`` names it).

    Raises:
        ValueError: ``size`` is past ``limit``; the message names the conversation and both.
    """
    if size > limit:
        raise ValueError(
            f"Conversation {conversation_id}: {provider} takes {what} of at most "
            f"{limit:,} bytes, and one is {size:,}."
        )


def check_base_url(url: str) -> str:
    """``url`` itself, once it reads as an http(s) URL with a host (and a port that parses).

    Raises:
        ValueError: it does not; the message names it and shows one that does.
    """
    try:
        parts = urlsplit(url)
        port_parses = parts.port is None or parts.port >= 0  # a bad port raises ValueError
    except ValueError:
        port_parses = False
    if not port_parses or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"base_url {url!r} is not an http(s) URL with a host, such as "
            "http://localhost:11434/v1."
        )
    return url


def is_blank(text: str) -> bool:
    """True for text a provider refuses as a text block: empty or only whitespace."""
    return not text or text.isspace()


def spec_of(model: str | ModelSpec, catalog: ModelCatalog | None = None) -> ModelSpec:
    """``model`` itself, or its catalog entry.

    Raises:
        ValueError: an id the catalog does not know.
    """
    if isinstance(model, ModelSpec):
        return model
    return (catalog or ModelCatalog.default()).get(model)


def system_texts(prepared: PreparedConversation) -> list[str]:
    """The texts of a request's system slot, in order: the admitted skills, then the
    objective (when there is one); each dialect wraps or joins them as its wire wants."""
    texts = [block_text(skill) for skill in prepared.skills]
    if prepared.has_system_text():
        texts.append(prepared.system_text)
    return texts


def block_text(block: ContentBlock) -> str:
    """The text a text-only wire slot carries for ``block``."""
    match block:
        case TextBlock(text=text):
            return text
        case JsonBlock(json=text):
            return text
        case SkillBlock(name=name, body=body):
            return f"Skill {name}:\n{body}"
        case _:
            return json.dumps(_plain(block))


def _plain(block: ContentBlock) -> Any:
    return msgspec.to_builtins(block)


def tool_schema(tool: ToolDefinitionBlock) -> dict[str, Any]:
    """The tool's JSON Schema as an object; an absent schema is an empty object schema."""
    if tool.schema_json is None:
        return dict(_EMPTY_SCHEMA)
    schema = json.loads(tool.schema_json)
    return schema if isinstance(schema, dict) and schema else dict(_EMPTY_SCHEMA)
