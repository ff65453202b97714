from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
import simplejpeg
from hypothesis import given, settings, strategies as st

from vncdriver.encodings import DECODERS, ENCODERS, decode_bytes
from vncdriver.encodings.common import (
    compact_length,
    pack_indices,
    read_compact_length,
    unpack_indices,
)
from vncdriver.encodings.copyrect import CopyRectDecoder
from vncdriver.encodings.raw import RawEncoder
from vncdriver.encodings.tight import TightDecoder, TightEncoder
from vncdriver.encodings.zrle import ZRLEDecoder, ZRLEEncoder
from vncdriver.errors import LimitExceeded, ProtocolError
from vncdriver.messages import Encoding, RectangleHeader
from vncdriver.pixelformat import NATIVE, PixelFormat, pixels_to_rgb, rgb_to_pixels
from vncdriver.streams import BytesFeeder

from .helpers import make_frame
from .test_pixelformat import FORMATS

KINDS = ["solid", "few2", "few3", "few16", "few100", "few300", "noise", "smooth", "mixed"]

frames = st.tuples(
    st.integers(1, 140), st.integers(1, 140), st.sampled_from(KINDS), st.integers(0, 2**32)
).map(lambda t: make_frame(*t))


def quantised(rgb: np.ndarray, pf: PixelFormat) -> np.ndarray:
    """What a lossless encoding can deliver in ``pf``: rgb through the format and back."""
    return pixels_to_rgb(rgb_to_pixels(rgb, pf).reshape(-1), pf, out=np.empty_like(rgb))


def round_trip(
    encoder: object,
    decoder: object,
    frame: np.ndarray,
    pf: PixelFormat,
    area: tuple[int, int, int, int] | None = None,
) -> np.ndarray:
    """Encode ``area`` of ``frame``; decode every rectangle into a black framebuffer."""
    h, w = frame.shape[:2]
    x, y, rw, rh = area or (0, 0, w, h)
    chunks: list[bytes] = []
    count = encoder.encode(frame, x, y, rw, rh, chunks)  # type: ignore[attr-defined]
    data = b"".join(chunks)
    fb = np.zeros_like(frame)
    pos = 0
    for _ in range(count):
        rect = RectangleHeader.parse(data[pos : pos + 12])
        assert rect.encoding == encoder.encoding  # type: ignore[attr-defined]
        pos += 12
        pos += decode_bytes(decoder, data[pos:], fb, rect.x, rect.y, rect.width, rect.height, pf)  # type: ignore[arg-type]
    assert pos == len(data)
    return fb


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(float) - b.astype(float)) ** 2))
    return 99.0 if mse == 0 else 10 * np.log10(255**2 / mse)


@pytest.mark.parametrize("encoding", [Encoding.RAW, Encoding.TIGHT, Encoding.ZRLE])
@settings(max_examples=40, deadline=None)
@given(frame=frames, pf_index=st.sampled_from(range(len(FORMATS))))
def test_lossless_round_trip(encoding: int, frame: np.ndarray, pf_index: int) -> None:
    pf = FORMATS[pf_index]
    encoder = ENCODERS[encoding](pixel_format=pf)
    decoded = round_trip(encoder, DECODERS[encoding](), frame, pf)
    assert np.array_equal(decoded, quantised(frame, pf))


@pytest.mark.parametrize("encoding", [Encoding.TIGHT, Encoding.ZRLE])
def test_streams_continue_across_rectangles(encoding: int) -> None:
    """One encoder and one decoder per connection: many rects share the zlib streams."""
    encoder, decoder = ENCODERS[encoding](), DECODERS[encoding]()
    for seed, kind in enumerate(KINDS * 2):
        frame = make_frame(50, 70, kind, seed)
        assert np.array_equal(
            round_trip(encoder, decoder, frame, NATIVE, (3, 5, 60, 40))[5:45, 3:63],
            frame[5:45, 3:63],
        )


#: Lowest PSNR (dB) we accept for any test frame per quality level 0..9.
JPEG_MIN_PSNR = (9.5, 10, 10, 10.5, 11, 12, 20, 24, 28, 45)


@settings(max_examples=25, deadline=None)
@given(frame=frames, quality=st.integers(0, 9))
def test_tight_jpeg_round_trip(frame: np.ndarray, quality: int) -> None:
    encoder = TightEncoder(quality=quality)
    decoded = round_trip(encoder, TightDecoder(), frame, NATIVE)
    # Worst cases are noise and sharp-edged blocks (measured minimum minus a margin);
    # smooth content, what JPEG is for, does far better.
    assert psnr(decoded, frame) > JPEG_MIN_PSNR[quality]
    if len(np.unique(frame.reshape(-1, 3), axis=0)) <= 64:  # few colours: palette, exact
        assert np.array_equal(decoded, frame)


def test_tight_jpeg_quality_on_smooth_content() -> None:
    frame = make_frame(120, 130, "smooth", 1)
    for quality, minimum in ((2, 25), (9, 38)):
        decoded = round_trip(TightEncoder(quality=quality), TightDecoder(), frame, NATIVE)
        assert psnr(decoded, frame) > minimum
    decoded = round_trip(TightEncoder(fine_quality=95), TightDecoder(), frame, NATIVE)
    assert np.abs(decoded.astype(int) - frame).mean() < 2.0


def test_tight_splits_large_rectangles() -> None:
    frame = make_frame(100, 2100, "noise", 3)
    chunks: list[bytes] = []
    count = TightEncoder().encode(frame, 0, 0, 2100, 100, chunks)
    assert count > 2  # width over 2048 and area over 65536 both split
    assert np.array_equal(round_trip(TightEncoder(), TightDecoder(), frame, NATIVE), frame)


def test_tight_chooses_subencodings() -> None:
    def control(frame: np.ndarray, **kwargs: object) -> int:
        chunks: list[bytes] = []
        TightEncoder(**kwargs).encode(frame, 0, 0, frame.shape[1], frame.shape[0], chunks)  # type: ignore[arg-type]
        return chunks[1][0]

    assert control(make_frame(20, 20, "solid", 0)) == 0x80  # fill
    assert control(make_frame(20, 20, "few2", 0)) & 0x70 == 0x50  # stream 1, filter: mono palette
    assert control(make_frame(20, 20, "few16", 0)) & 0x70 == 0x60  # stream 2, palette
    assert control(make_frame(20, 20, "noise", 0)) & 0xF0 == 0x00  # copy, stream 0
    assert control(make_frame(20, 20, "noise", 0), quality=5) == 0x90  # JPEG


# ------------------------------------------------------------------ Tight, by hand


def tight(
    fb: np.ndarray, data: bytes, decoder: TightDecoder | None = None, pf: PixelFormat = NATIVE
) -> np.ndarray:
    h, w = fb.shape[:2]
    consumed = decode_bytes(decoder or TightDecoder(), data, fb, 0, 0, w, h, pf)
    assert consumed == len(data)
    return fb


def test_tight_fill() -> None:
    fb = tight(np.zeros((3, 4, 3), np.uint8), b"\x80\x10\x20\x30")
    assert (fb == [0x10, 0x20, 0x30]).all()


def test_tight_fill_16bpp_uses_whole_pixels() -> None:
    pf = FORMATS[4]  # RGB565 little endian
    fb = tight(np.zeros((2, 2, 3), np.uint8), b"\x80\x00\xf8", pf=pf)
    assert (fb == [255, 0, 0]).all()


def test_tight_small_data_is_not_compressed() -> None:
    # Copy filter, 1x3 pixels = 9 bytes < 12: sent raw, no length.
    fb = tight(np.zeros((1, 3, 3), np.uint8), b"\x00" + bytes(range(9)))
    assert fb.reshape(-1).tolist() == list(range(9))


def test_tight_mono_palette_rows_are_padded() -> None:
    # Palette filter, 2 colours, 10x2 pixels: 2 bytes per row, 4 bytes < 12 -> raw.
    data = b"\x40\x01\x01" + b"\0\0\0" + b"\xff\xff\xff" + b"\xa0\x40" + b"\x00\xc0"
    fb = tight(np.zeros((2, 10, 3), np.uint8), data)
    assert fb[..., 0].tolist() == [
        [255, 0, 255, 0, 0, 0, 0, 0, 0, 255],
        [0, 0, 0, 0, 0, 0, 0, 0, 255, 255],
    ]


def test_tight_stream_reset_bits() -> None:
    decoder = TightDecoder()
    fb = np.zeros((4, 4, 3), np.uint8)
    first = make_frame(4, 4, "noise", 1)
    second = make_frame(4, 4, "noise", 2)
    for image in (first, second):
        comp = zlib.compressobj()  # a new stream each time: only works with the reset bit
        z = comp.compress(image.tobytes()) + comp.flush(zlib.Z_SYNC_FLUSH)
        tight(fb, b"\x01" + compact_length(len(z)) + z, decoder)
        assert np.array_equal(fb, image)
    comp = zlib.compressobj()
    z = comp.compress(first.tobytes()) + comp.flush(zlib.Z_SYNC_FLUSH)
    with pytest.raises(ProtocolError, match="Tight stream 0"):
        tight(fb, b"\x00" + compact_length(len(z)) + z, decoder)  # no reset: corrupt


def gradient_filter(img: np.ndarray, maxes: tuple[int, int, int] = (255, 255, 255)) -> np.ndarray:
    """The encoder side of Tight's gradient filter, written independently (vectorised)."""
    x = img.astype(np.int32)
    p = np.zeros((x.shape[0] + 1, x.shape[1] + 1, 3), np.int32)
    p[1:, 1:] = x
    pred = np.clip(p[1:, :-1] + p[:-1, 1:] - p[:-1, :-1], 0, np.array(maxes))
    return (x - pred) & np.array(maxes)


@settings(max_examples=20, deadline=None)
@given(frame=frames)
def test_tight_gradient_filter(frame: np.ndarray) -> None:
    diff = gradient_filter(frame).astype(np.uint8).tobytes()
    if len(diff) < 12:
        payload = diff
    else:
        z = zlib.compress(diff)
        payload = compact_length(len(z)) + z
    fb = tight(np.zeros_like(frame), b"\x41\x02" + payload)  # stream 0, gradient filter
    assert np.array_equal(fb, frame)


def test_tight_gradient_filter_16bpp() -> None:
    pf = FORMATS[4]
    frame = make_frame(9, 11, "smooth", 0)
    q = rgb_to_pixels(frame, pf).reshape(-1).view("<u2").reshape(9, 11).astype(np.int32)
    comps = np.stack([(q >> 11) & 31, (q >> 5) & 63, q & 31], -1)
    d = gradient_filter(comps, (31, 63, 31))
    diff = ((d[..., 0] << 11) | (d[..., 1] << 5) | d[..., 2]).astype("<u2").tobytes()
    z = zlib.compress(diff)
    fb = tight(np.zeros_like(frame), b"\x41\x02" + compact_length(len(z)) + z, pf=pf)
    assert np.array_equal(fb, quantised(frame, pf))


def test_tight_jpeg_by_hand() -> None:
    image = make_frame(16, 24, "smooth", 0)
    jpeg = simplejpeg.encode_jpeg(image, quality=95)
    fb = tight(np.zeros_like(image), b"\x90" + compact_length(len(jpeg)) + jpeg)
    assert psnr(fb, image) > 30
    with pytest.raises(ProtocolError, match="Tight JPEG is 24x16, the rectangle 8x8"):
        tight(np.zeros((8, 8, 3), np.uint8), b"\x90" + compact_length(len(jpeg)) + jpeg)
    with pytest.raises(ProtocolError, match=r"Tight JPEG .* is corrupt"):
        tight(np.zeros((8, 8, 3), np.uint8), b"\x90\x05hello")


def test_tight_jpeg_size_is_checked_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """A small JPEG that claims 60000x60000 pixels is refused from its header alone."""
    from vncdriver.encodings import tight as tight_module

    jpeg = bytearray(simplejpeg.encode_jpeg(make_frame(16, 24, "smooth", 0), quality=90))
    sof = jpeg.index(b"\xff\xc0")  # baseline frame header: ..., height, width (big-endian)
    jpeg[sof + 5 : sof + 9] = (60000).to_bytes(2, "big") * 2
    decoded: list[bytes] = []
    monkeypatch.setattr(tight_module.simplejpeg, "decode_jpeg",
                        lambda data, **kw: decoded.append(data))
    with pytest.raises(ProtocolError, match="Tight JPEG is 60000x60000, the rectangle 24x16; not decoded"):
        tight(np.zeros((16, 24, 3), np.uint8), b"\x90" + compact_length(len(jpeg)) + bytes(jpeg))
    assert decoded == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xa0", r"compression type 10 \(PNG \(TightPNG only\)\)"),
        (b"\xf0", r"compression type 15 \(unknown\)"),
        (b"\x40\x07", "filter id 7 is not copy"),
    ],
)
def test_tight_errors(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        tight(np.zeros((8, 8, 3), np.uint8), data)


def test_tight_length_limit_is_limit_exceeded(monkeypatch: pytest.MonkeyPatch) -> None:
    from vncdriver.encodings import tight as tight_module

    monkeypatch.setattr(tight_module, "MAX_TIGHT_DATA_BYTES", 100)
    with pytest.raises(LimitExceeded, match="Tight zlib data length is 101, over the limit of 100"):
        tight(np.zeros((8, 8, 3), np.uint8), b"\x00" + compact_length(101))


@given(st.integers(0, (1 << 22) - 1))
def test_compact_length_round_trip(n: int) -> None:
    data = compact_length(n)
    assert len(data) == (1 if n < 128 else 2 if n < 16384 else 3)
    feeder = BytesFeeder(read_compact_length())
    feeder.feed(data)
    assert feeder.done and feeder.result == n


@given(st.integers(1, 40), st.integers(1, 40), st.sampled_from([1, 2, 4, 8]), st.integers(0, 2**32))
def test_index_packing_round_trip(h: int, w: int, bits: int, seed: int) -> None:
    idx = np.random.default_rng(seed).integers(0, 1 << bits, (h, w)).astype(np.uint8)
    packed = pack_indices(idx, bits)
    assert len(packed) == h * -(-w * bits // 8)
    assert np.array_equal(unpack_indices(packed, bits, h, w), idx)


# ------------------------------------------------------------------ ZRLE, by hand


def zrle(
    fb: np.ndarray,
    tiles: bytes,
    decoder: ZRLEDecoder | None = None,
    pf: PixelFormat = NATIVE,
    area: tuple[int, int, int, int] | None = None,
) -> np.ndarray:
    h, w = fb.shape[:2]
    x, y, rw, rh = area or (0, 0, w, h)
    comp = zlib.compressobj()
    z = comp.compress(tiles) + comp.flush(zlib.Z_SYNC_FLUSH)
    decode_bytes(decoder or ZRLEDecoder(), struct.pack("!I", len(z)) + z, fb, x, y, rw, rh, pf)
    return fb


def test_zrle_subencodings_by_hand() -> None:
    fb = np.zeros((2, 3, 3), np.uint8)
    red, green, blue = b"\xff\0\0", b"\0\xff\0", b"\0\0\xff"
    # Solid
    assert (zrle(fb, b"\x01" + red) == [255, 0, 0]).all()
    # Raw
    zrle(fb, b"\x00" + (red + green + blue) * 2)
    assert fb[0, :, 1].tolist() == [0, 255, 0]
    # Packed palette of 3 colours: 2 bits per index, rows padded: 0b00011000, 0b10010000
    zrle(fb, b"\x03" + red + green + blue + b"\x18\x90")
    assert fb.reshape(-1, 3).argmax(axis=1).tolist() == [0, 1, 2, 2, 1, 0]
    # Plain RLE: red x4, blue x2
    zrle(fb, b"\x80" + red + b"\x03" + blue + b"\x01")
    assert fb.reshape(-1, 3).argmax(axis=1).tolist() == [0, 0, 0, 0, 2, 2]
    # Palette RLE: palette (green, blue); index 1 once, index 0 run of 5
    zrle(fb, b"\x82" + green + blue + b"\x01\x80\x04")
    assert fb.reshape(-1, 3).argmax(axis=1).tolist() == [2, 1, 1, 1, 1, 1]


def test_zrle_long_runs_and_tiles() -> None:
    fb = np.zeros((70, 70, 3), np.uint8)
    red, blue = b"\xff\0\0", b"\0\0\xff"
    # Four tiles: 64x64 (4096 = 1 + 16*255 + 15), 6x64, 64x6, 6x6.
    first = b"\x80" + red + b"\xff" * 16 + b"\x0f"
    rest = b"\x01" + blue + b"\x01" + blue + b"\x80" + red + b"\x23"
    zrle(fb, first + rest)
    assert (fb[:64, :64] == [255, 0, 0]).all()
    assert (fb[:64, 64:] == [0, 0, 255]).all() and (fb[64:, :64] == [0, 0, 255]).all()
    assert (fb[64:, 64:] == [255, 0, 0]).all()


@pytest.mark.parametrize(
    ("tiles", "message"),
    [
        (b"\x11", "subencoding 17 is not defined"),
        (b"\x81", "subencoding 129 is not defined"),
        (b"\x00\x01\x02", "ends inside a raw tile"),
        (b"\x80\xff\0\0\x02", r"runs cover 3 pixels of a 6-pixel tile|ends inside"),
        (b"\x80\xff\0\0\x09", "runs cover 10 pixels of a 6-pixel tile"),
        (b"\x82\xff\0\0\0\0\xff\x85\x05", "index 5 is past the 2-colour palette"),
        (b"\x01\xff\0\0\x00", "1 bytes past its tiles"),
    ],
)
def test_zrle_errors(tiles: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        zrle(np.zeros((2, 3, 3), np.uint8), tiles)


def test_zrle_length_limit_and_zip_bomb() -> None:
    with pytest.raises(LimitExceeded, match="ZRLE data length"):
        decode_bytes(
            ZRLEDecoder(), struct.pack("!I", 1 << 30), np.zeros((4, 4, 3), np.uint8), 0, 0, 4, 4
        )
    with pytest.raises(LimitExceeded, match="ZRLE data inflated size"):
        zrle(np.zeros((4, 4, 3), np.uint8), bytes(100_000))


def test_zrle_encoder_picks_each_subencoding() -> None:
    encoder, decoder = ZRLEEncoder(), ZRLEDecoder()
    for kind in KINDS:
        frame = make_frame(64, 64, kind, 7)
        assert np.array_equal(round_trip(encoder, decoder, frame, NATIVE), frame)
    # Check the choice directly on the inflated tile data.
    from vncdriver.encodings.zrle import _encode_tile
    from vncdriver.pixelformat import pack_rgb, rgb_to_cpixels

    def sub(frame: np.ndarray) -> int:
        return _encode_tile(pack_rgb(frame), rgb_to_cpixels(frame, NATIVE), NATIVE)[0]

    assert sub(make_frame(64, 64, "solid", 0)) == 1
    assert sub(make_frame(64, 64, "noise", 0)) == 0
    assert 2 <= sub(make_frame(64, 64, "few3", 0)) <= 16
    stripes = np.zeros((64, 64, 3), np.uint8)
    stripes[::2] = 255
    assert sub(stripes) in (2, 130)
    runs = np.zeros((64, 64, 3), np.uint8)
    runs[:30] = make_frame(30, 64, "few100", 0)[:, :1]
    assert sub(runs) >= 128


# ------------------------------------------------------------------ Raw, CopyRect


def test_raw_decoder_writes_in_place() -> None:
    fb = np.zeros((4, 5, 3), np.uint8)
    patch = make_frame(2, 3, "noise", 0)
    data = rgb_to_pixels(patch, NATIVE).tobytes()
    decode_bytes(DECODERS[Encoding.RAW](), data, fb, 1, 2, 3, 2)
    assert np.array_equal(fb[2:4, 1:4], patch) and fb[:2].sum() == 0


def test_raw_encoder_output() -> None:
    frame = make_frame(2, 2, "noise", 0)
    chunks: list[bytes] = []
    assert RawEncoder().encode(frame, 1, 0, 1, 2, chunks) == 1
    assert chunks[0] == RectangleHeader(1, 0, 1, 2, 0).serialize()
    assert chunks[1] == rgb_to_pixels(frame[:, 1:2], NATIVE).tobytes()


def test_copyrect_overlapping() -> None:
    fb = make_frame(10, 10, "noise", 0)
    expected = fb.copy()
    expected[2:8, 3:9] = fb[0:6, 1:7]
    decode_bytes(CopyRectDecoder(), struct.pack("!HH", 1, 0), fb, 3, 2, 6, 6)
    assert np.array_equal(fb, expected)
    with pytest.raises(ProtocolError, match=r"CopyRect source 6x6 at \(5, 5\) is outside"):
        decode_bytes(CopyRectDecoder(), struct.pack("!HH", 5, 5), fb, 0, 0, 6, 6)
