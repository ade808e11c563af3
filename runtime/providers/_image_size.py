"""An image's width and height read from its header, without decoding the image: PNG, GIF,
WebP and JPEG, the types Anthropic and Converse take. Both refuse an image over 8,000
pixels on a side, and a conversation that stored one would have every later request
refused; so their clients check it at ``check_attachments``, before a message enters a
conversation (once per image). Anthropic also refuses a request of more than 20 images
with one over 2,000 pixels on a side: ``images_left_out`` reads the sizes for that, on a
request only when it holds more than 20.

What cannot be read (another type, a header cut short, a JPEG whose frame header is
missing) is None: the provider decides, as it would without this.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from ..blocks import ContentBlock, ImageBlock

__all__ = ["MAX_SIDE", "check_sides", "image_size", "image_size_b64", "images_left_out"]

MAX_SIDE = 8_000  # pixels: the longest side Anthropic and Converse take
_PREFIX = 128 * 1024  # base64 characters decoded first: past a JPEG's usual metadata
# JPEG markers that start a frame (its header holds the size): SOF0-3, 5-7, 9-11, 13-15
_FRAMES = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_UNSIZED = frozenset({0x01, *range(0xD0, 0xD8)})  # markers with no length after them


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the header of ``data``, or None when it does not read as a
    PNG, GIF, WebP or JPEG header (or is cut before the size)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp(data)
    if data[:2] == b"\xff\xd8":
        return _jpeg(data)
    return None


def image_size_b64(data: str) -> tuple[int, int] | None:
    """``image_size`` of base64 ``data``, decoding its start only (all of it only for a
    JPEG whose frame header lies further in); None when it is not base64."""
    try:
        size = image_size(base64.b64decode(data[:_PREFIX]))
        if size is None and len(data) > _PREFIX and data.startswith("/9j/"):  # a JPEG
            size = image_size(base64.b64decode(data))
    except (binascii.Error, ValueError):
        return None
    return size


def check_sides(
    blocks: Sequence[ContentBlock], provider: str, most: int, conversation_id: str | None
) -> None:
    """Refuse an image among ``blocks`` past ``most`` pixels on a side (``provider`` names
    who refuses it); one whose size cannot be read is let through.

    Raises:
        ValueError: one is past it; the message names the conversation and its size.
    """
    for block in blocks:
        size = image_size_b64(block.data) if type(block) is ImageBlock else None
        if size is not None and max(size) > most:
            width, height = size
            raise ValueError(
                f"Conversation {conversation_id}: {provider} takes images of at most "
                f"{most:,} pixels on a side, and one is {width:,} x {height:,}."
            )


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk, body = data[12:16], data[20:30]
    if chunk == b"VP8 " and len(body) == 10 and body[3:6] == b"\x9d\x01\x2a":
        width = int.from_bytes(body[6:8], "little") & 0x3FFF
        return width, int.from_bytes(body[8:10], "little") & 0x3FFF
    if chunk == b"VP8L" and len(body) >= 5 and body[0] == 0x2F:
        bits = int.from_bytes(body[1:5], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(body) == 10:
        width = int.from_bytes(body[4:7], "little") + 1
        return width, int.from_bytes(body[7:10], "little") + 1
    return None


def _jpeg(data: bytes) -> tuple[int, int] | None:
    """The frame header's size, found by walking the segments from the start."""
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # a fill byte before the marker
            at += 1
            continue
        if marker in _UNSIZED:
            at += 2
            continue
        if marker == 0xDA:  # the scan starts: no frame header before it
            return None
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        if marker in _FRAMES:
            frame = data[at + 5 : at + 9]
            if len(frame) < 4 or length < 7:
                return None
            height, width = int.from_bytes(frame[:2], "big"), int.from_bytes(frame[2:], "big")
            return (width, height) if height else None  # 0: set later (a DNL marker)
        if length < 2:
            return None
        at += 2 + length
    return None


def images_left_out(images: Sequence[str], most: int, many: int, side: int) -> int:
    """How many of a request's images (base64, oldest first) to leave out, for a provider
    that takes at most ``most`` images a request and, in a request of more than ``many``,
    none over ``side`` pixels on a side (Anthropic: 100, 20, 2,000): those past the latest
    ``most``, or past the latest ``many`` when more are sent and one of them is larger.
    Sizes are read (``image_size_b64``) only when more than ``many`` images are sent."""
    kept = min(len(images), most)
    if kept > many and any(
        (size := image_size_b64(data)) is not None and max(size) > side
        for data in images[len(images) - kept :]
    ):
        kept = many
    return len(images) - kept
