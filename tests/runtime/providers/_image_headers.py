"""Image files whose headers say a width and a height, made by hand (no imaging library):
a PNG's signature and IHDR chunk, a GIF's screen descriptor, a WebP's three chunk kinds, a
JPEG's segments up to its frame header (after metadata, as a phone's carry); and a
conversation of user messages that carry attachments."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Sequence

from parlour.runtime import ConversationContext, Depth, IncomingMessage, OutgoingMessage
from parlour.runtime.blocks import ContentBlock, ImageBlock, TextBlock


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    )


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00;"


def webp(width: int, height: int, chunk: str = "VP8X") -> bytes:
    if chunk == "VP8 ":  # lossy: 14 bits a side
        body = b"\x00\x00\x00\x9d\x01\x2a" + struct.pack("<HH", width, height)
    elif chunk == "VP8L":  # lossless: 14 bits a side, less one
        body = b"\x2f" + ((width - 1) | (height - 1) << 14).to_bytes(4, "little")
    else:  # extended: 24 bits a side, less one
        body = bytes(4) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    data = chunk.encode() + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", 4 + len(data)) + b"WEBP" + data


def jpeg(width: int, height: int, metadata: int = 0, frame: int = 0xC0) -> bytes:
    """A JPEG whose frame header (``frame``: SOF0 baseline, SOF2 progressive) follows an
    APP0 segment and ``metadata`` bytes of APP1 segments (EXIF, at most 65,533 each)."""
    out = b"\xff\xd8" + b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + bytes(9)
    while metadata > 0:
        size = min(metadata, 65_533)
        out += b"\xff\xe1" + struct.pack(">H", size + 2) + bytes(size)
        metadata -= size
    sof = struct.pack(">BHHB", 8, height, width, 3) + bytes(9)
    out += b"\xff" + bytes([frame]) + struct.pack(">H", len(sof) + 2) + sof
    return out + b"\xff\xda" + struct.pack(">H", 12) + bytes(10) + b"\xff\xd9"


def image(raw: bytes, mime: str) -> ImageBlock:
    return ImageBlock(data=base64.b64encode(raw).decode(), mime_type=mime)


def conversation_of(
    cid: str, messages: Sequence[Sequence[ContentBlock]], answer: Sequence[ContentBlock] = ()
) -> ConversationContext:
    """A conversation of these user messages, each but the last answered with ``answer``
    (default: a line of text)."""
    c = ConversationContext(cid)
    c.output_declaration, c.depth = 16_000, Depth.IMMEDIATE
    for n, blocks in enumerate(messages):
        if n:
            c.add_message(IncomingMessage(blocks=list(answer) or [TextBlock(text="Read.")]))
        c.add_message(OutgoingMessage(blocks=list(blocks)))
    return c
