from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from vncdriver.errors import ProtocolError
from vncdriver.pixelformat import (
    NATIVE,
    PixelFormat,
    cpixels_to_rgb,
    pack_rgb,
    pixels_to_rgb,
    rgb_to_cpixels,
    rgb_to_pixels,
    unpack_rgb,
)

#: Formats real clients ask for: ours, X servers' BGRX, big endian, 16-bit, 8-bit.
FORMATS = [
    NATIVE,
    PixelFormat(32, 24, False, True, 255, 255, 255, 16, 8, 0),  # BGRX (X11 default)
    PixelFormat(32, 24, True, True, 255, 255, 255, 24, 16, 8),  # RGBX big endian
    PixelFormat(32, 24, True, True, 255, 255, 255, 16, 8, 0),  # XRGB big endian
    PixelFormat(16, 16, False, True, 31, 63, 31, 11, 5, 0),  # RGB565
    PixelFormat(16, 15, True, True, 31, 31, 31, 10, 5, 0),  # RGB555 big endian
    PixelFormat(8, 8, False, True, 7, 7, 3, 0, 3, 6),  # BGR233
    PixelFormat(8, 6, False, True, 3, 3, 3, 4, 2, 0),  # RGB222 (noVNC low colour)
]


def rgb_arrays(max_side: int = 20) -> st.SearchStrategy[np.ndarray]:
    return st.tuples(st.integers(1, max_side), st.integers(1, max_side), st.integers(0, 2**32)).map(
        lambda t: np.random.default_rng(t[2]).integers(0, 256, (t[0], t[1], 3), dtype=np.uint8)
    )


def test_native_is_rgbx_in_memory() -> None:
    rgb = np.array([[[1, 2, 3], [4, 5, 6]]], np.uint8)
    assert rgb_to_pixels(rgb, NATIVE).tobytes() == b"\x01\x02\x03\x00\x04\x05\x06\x00"
    assert NATIVE.is_native and NATIVE.is_888
    assert NATIVE.cpixel_bytes == (0, 3)


def test_known_pixel_values() -> None:
    red = np.array([[255, 0, 0]], np.uint8)
    assert rgb_to_pixels(red, FORMATS[1]).tobytes() == b"\x00\x00\xff\x00"
    assert rgb_to_pixels(red, FORMATS[2]).tobytes() == b"\xff\x00\x00\x00"
    assert rgb_to_pixels(red, FORMATS[4]).tobytes() == b"\x00\xf8"  # 0xf800 little endian


@pytest.mark.parametrize("pf", FORMATS, ids=lambda pf: pf.describe())
@given(rgb=rgb_arrays())
def test_pixels_round_trip(pf: PixelFormat, rgb: np.ndarray) -> None:
    pixels = rgb_to_pixels(rgb, pf)
    assert pixels.shape == (*rgb.shape[:2], pf.bytes_per_pixel)
    back = pixels_to_rgb(pixels.reshape(-1), pf, out=np.empty_like(rgb))
    if pf.is_888:
        assert np.array_equal(back, rgb)
    else:  # fewer bits: quantised once, then stable
        again = rgb_to_pixels(back, pf)
        assert np.array_equal(again, pixels)
        bits = min(pf.red_max, pf.green_max, pf.blue_max).bit_length()
        assert np.abs(back.astype(int) - rgb).max() <= 256 >> bits


@pytest.mark.parametrize("pf", FORMATS, ids=lambda pf: pf.describe())
@given(rgb=rgb_arrays())
def test_cpixels_round_trip(pf: PixelFormat, rgb: np.ndarray) -> None:
    cpix = rgb_to_cpixels(rgb, pf)
    assert cpix.shape[-1] == pf.cpixel_bytes[1]
    back = cpixels_to_rgb(np.ascontiguousarray(cpix).reshape(-1), pf)
    assert np.array_equal(back, pixels_to_rgb(rgb_to_pixels(rgb, pf).reshape(-1), pf))


def test_cpixel_layouts() -> None:
    assert FORMATS[1].cpixel_bytes == (0, 3)  # BGRX LE: low three bytes come first
    assert FORMATS[2].cpixel_bytes == (0, 3)  # colours in the top three bytes, big endian
    assert FORMATS[3].cpixel_bytes == (1, 3)  # colours in the low three bytes, big endian
    assert FORMATS[4].cpixel_bytes == (0, 2)  # not 32 bpp: whole pixels
    assert PixelFormat(32, 24, False, True, 255, 255, 255, 24, 16, 8).cpixel_bytes == (1, 3)
    assert PixelFormat(32, 32, False, True, 255, 255, 255, 0, 8, 16).cpixel_bytes == (0, 4)


@given(rgb=rgb_arrays())
def test_pack_unpack(rgb: np.ndarray) -> None:
    assert np.array_equal(unpack_rgb(pack_rgb(rgb)), rgb)


@pytest.mark.parametrize(
    ("pf", "problem"),
    [
        (PixelFormat(true_colour=False), "must be true colour"),
        (PixelFormat(24, 24), "bits-per-pixel must be 8, 16 or 32, not 24"),
        (PixelFormat(16, 16, red_max=255, green_max=255, blue_max=255), "does not fit in 16 bits"),
        (PixelFormat(red_max=200), "red-max 200 must be 2**n - 1"),
        (PixelFormat(depth=0), "depth 0 must be 1..32"),
    ],
)
def test_check_names_the_problem(pf: PixelFormat, problem: str) -> None:
    with pytest.raises(ProtocolError) as info:
        pf.check()
    assert problem in str(info.value)


def test_all_test_formats_are_usable() -> None:
    for pf in FORMATS:
        pf.check()
