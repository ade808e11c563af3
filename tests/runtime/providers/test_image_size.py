"""An image's width and height read from its header alone (PNG, GIF, WebP, JPEG), and
whatever else is read as unknown, never as an error: the provider then decides."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parlour.runtime.providers._image_size import image_size, image_size_b64

from ._image_headers import gif, jpeg, png, webp

sides = st.integers(min_value=1, max_value=16_383)  # what every format here can say


@given(sides, sides)
def test_each_format_reads_back_the_size_its_header_says(width: int, height: int) -> None:
    made = [png(width, height), gif(width, height), jpeg(width, height)]
    made += [webp(width, height, chunk) for chunk in ("VP8 ", "VP8L", "VP8X")]
    made.append(jpeg(width, height, frame=0xC2))  # progressive
    for raw in made:
        assert image_size(raw) == (width, height)
        assert image_size_b64(base64.b64encode(raw).decode()) == (width, height)


def test_a_jpeg_frame_header_after_a_phone_sized_metadata_block_is_found() -> None:
    raw = jpeg(12_000, 9_000, metadata=300_000)  # past the base64 decoded first
    assert image_size_b64(base64.b64encode(raw).decode()) == (12_000, 9_000)


@given(st.binary(max_size=200))
def test_any_bytes_read_as_a_size_or_as_unknown_never_raise(data: bytes) -> None:
    size = image_size(data)
    assert size is None or (len(size) == 2 and min(size) >= 0)


@given(st.text(max_size=200))
def test_any_text_as_base64_reads_as_a_size_or_as_unknown(data: str) -> None:
    size = image_size_b64(data)
    assert size is None or min(size) >= 0


@pytest.mark.parametrize(
    "raw",
    [
        png(10, 10)[:20],  # cut inside IHDR
        gif(10, 10)[:8],
        webp(10, 10)[:24],
        jpeg(10, 10)[:26],  # cut inside the frame header
        jpeg(10, 0),  # height set later (a DNL marker)
        b"\xff\xd8\xff\xda\x00\x0c" + bytes(10),  # a scan before any frame header
        b"\xff\xd8\x00\x00\x00\x00",  # not a marker where one must be
        b"BM" + bytes(30),  # a BMP: not a type read here
    ],
)
def test_a_header_cut_short_or_of_another_kind_is_unknown(raw: bytes) -> None:
    assert image_size(raw) is None


def test_text_that_is_not_base64_is_unknown() -> None:
    assert image_size_b64("not base64 at all!") is None
    assert image_size_b64("/9j/" + "*" * 200_000) is None  # a JPEG's start, then no base64
