from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vncdriver.client_protocol import (
    DIRECT_READ_BYTES,
    ClientProtocol,
    CursorShape,
    DesktopResized,
    FramebufferUpdated,
)
from vncdriver.errors import LimitExceeded, LocalProtocolError, ProtocolError
from vncdriver.handshake import HandshakeComplete
from vncdriver.messages import (
    Bell,
    Encoding,
    FramebufferUpdate,
    FramebufferUpdateRequest,
    FrameTag,
    KeyEvent,
    PointerEvent,
    RectangleHeader,
    ServerCutText,
    SetColourMapEntries,
    SetEncodings,
    SetPixelFormat,
    build_encodings,
)
from vncdriver.pixelformat import NATIVE, pixels_to_rgb, rgb_to_pixels
from vncdriver.tiles import changed_tiles

from .helpers import feed, make_frame, protocol_pair
from .test_encodings import KINDS, quantised
from .test_pixelformat import FORMATS


def client(width: int = 32, height: int = 24, **kwargs: object) -> ClientProtocol:
    result = HandshakeComplete(width, height, NATIVE, "t", True, (3, 8))
    proto = ClientProtocol(result, **kwargs)  # type: ignore[arg-type]
    proto.data_to_send()
    return proto


def raw_rect(x: int, y: int, patch: np.ndarray) -> bytes:
    h, w = patch.shape[:2]
    return (
        RectangleHeader(x, y, w, h, Encoding.RAW).serialize()
        + rgb_to_pixels(patch, NATIVE).tobytes()
    )


def update(*rects: bytes, count: int | None = None) -> bytes:
    return FramebufferUpdate(len(rects) if count is None else count).serialize() + b"".join(rects)


def test_setup_messages_and_first_request() -> None:
    result = HandshakeComplete(32, 24, NATIVE, "t", True, (3, 8))
    proto = ClientProtocol(result, encodings=[Encoding.ZRLE, Encoding.RAW])
    proto.request_update()
    proto.request_update()
    data = proto.data_to_send()
    expected = (
        SetPixelFormat(NATIVE).serialize()
        + SetEncodings((16, 0)).serialize()
        + FramebufferUpdateRequest(False, 0, 0, 32, 24).serialize()  # first: full
        + FramebufferUpdateRequest(True, 0, 0, 32, 24).serialize()
    )
    assert data == expected
    assert proto.pending_requests == 2


def test_input_messages() -> None:
    proto = client()
    proto.key_event("Return", True)
    proto.key_event(0x61, False)
    proto.pointer_event(-5, 70000, buttons=0x104)
    proto.cut_text("hi")
    assert proto.data_to_send() == (
        KeyEvent(True, 0xFF0D).serialize()
        + KeyEvent(False, 0x61).serialize()
        + PointerEvent(4, 0, 0xFFFF).serialize()
        + b"\x06\0\0\0\0\0\0\x02hi"
    )
    with pytest.raises(LocalProtocolError, match="we cannot decode encodings"):
        proto.set_encodings([Encoding.HEXTILE])


def test_universe_actions_are_all_checked_before_any_is_queued() -> None:
    proto = client()
    proto.send_events([("KeyEvent", "Return", True), ["PointerEvent", 7, 8, 1]])
    assert proto.data_to_send() == (
        KeyEvent(True, 0xFF0D).serialize() + PointerEvent(1, 7, 8).serialize()
    )
    with pytest.raises(ValueError, match="event 1 is"):
        proto.send_events([("KeyEvent", "a", True), ("PointerEvent", 1, 2)])
    assert proto.data_to_send() == b""  # the good first event was not queued either


def test_raw_update_in_one_byte_chunks() -> None:
    proto = client()
    a, b = make_frame(5, 7, "noise", 1), make_frame(24, 32, "few3", 2)
    data = update(raw_rect(3, 4, a), raw_rect(0, 0, b), raw_rect(10, 2, a))
    feed(proto, data, 1)
    expected = b.copy()
    expected[2:7, 10:17] = a
    assert np.array_equal(proto.framebuffer, expected)
    (event,) = proto.events_received()
    assert isinstance(event, FramebufferUpdated)
    assert event.nbytes == len(data)
    assert event.npixels == 35 * 2 + 24 * 32
    assert [r.encoding for r in event.rects] == [0, 0, 0]
    assert proto.stats.updates == 1 and proto.stats.rectangles == 3
    assert proto.stats.bytes_received == len(data)


def test_large_raw_rect_is_received_straight_into_staging() -> None:
    proto = client(200, 100)
    patch = make_frame(100, 200, "noise", 0)
    data = update(raw_rect(0, 0, patch))
    head = 4 + 12
    buf = proto.get_buffer(-1)
    buf[:head] = data[:head]
    proto.buffer_updated(head)
    buf = proto.get_buffer(-1)
    assert len(buf) == 200 * 100 * 4  # exactly the rectangle's pixels, no more
    staging = proto.staging(len(buf))
    assert np.shares_memory(np.frombuffer(buf, np.uint8), staging)
    buf[: len(buf) - 5] = data[head:-5]
    proto.buffer_updated(len(buf) - 5)
    assert len(proto.get_buffer(-1)) > 5  # the small rest goes through read-ahead
    proto.receive_data(data[-5:])
    assert np.array_equal(proto.framebuffer, patch)


@pytest.mark.parametrize("encoding", [Encoding.RAW, Encoding.TIGHT, Encoding.ZRLE])
@settings(max_examples=15, deadline=None)
@given(
    size=st.tuples(st.integers(1, 150), st.integers(1, 150)),
    steps=st.lists(
        st.tuples(st.sampled_from(KINDS), st.integers(0, 2**32), st.integers(1, 4)),
        min_size=1,
        max_size=4,
    ),
    chunks=st.lists(st.integers(1, 5000), min_size=1, max_size=5) | st.just([1]),
    pf_index=st.sampled_from([0, 1, 2, 4, 6]),
)
def test_server_to_client_updates(
    encoding: int,
    size: tuple[int, int],
    steps: list[tuple[str, int, int]],
    chunks: list[int],
    pf_index: int,
) -> None:
    """Frames change in random patches; incremental updates keep the client exact."""
    h, w = size
    pf = FORMATS[pf_index]
    c, s = protocol_pair(
        w, h, client_kwargs={"encodings": [encoding, Encoding.RAW], "pixel_format": pf}
    )
    frame = make_frame(h, w, "few3", 0)
    for kind, seed, patches in steps:
        rng = np.random.default_rng(seed)
        prev = frame.copy()
        for _ in range(patches):
            y0, x0 = rng.integers(0, h), rng.integers(0, w)
            y1, x1 = rng.integers(y0, h) + 1, rng.integers(x0, w) + 1
            frame[y0:y1, x0:x1] = make_frame(y1 - y0, x1 - x0, kind, seed)
        s.mark_dirty(changed_tiles(prev, frame))
        c.request_update()
        s.receive_data(c.data_to_send())
        s.send_update(frame)
        data = s.data_to_send()
        if data:
            feed(c, data, chunks if len(data) < 200_000 else 4096)
        assert np.array_equal(c.framebuffer, quantised(frame, pf))
    assert c.stats.rectangles_by_encoding.keys() <= {encoding}


def test_desktop_size_and_last_rect() -> None:
    proto = client(encodings=build_encodings())
    patch = make_frame(3, 3, "noise", 0)
    data = (
        update(
            RectangleHeader(0, 0, 50, 40, Encoding.DESKTOP_SIZE).serialize(),
            raw_rect(45, 35, patch),
            RectangleHeader(0, 0, 0, 0, Encoding.LAST_RECT).serialize(),
            count=0xFFFF,
        )
        + Bell().serialize()
    )
    feed(proto, data, 3)
    resized, updated, bell = proto.events_received()
    assert resized == DesktopResized(50, 40)
    assert proto.framebuffer.shape == (40, 50, 3)
    assert np.array_equal(proto.framebuffer[35:38, 45:48], patch)
    assert isinstance(updated, FramebufferUpdated) and len(updated.rects) == 3
    assert isinstance(bell, Bell)
    proto.request_update()  # after a resize the next request is a full one
    assert proto.data_to_send() == FramebufferUpdateRequest(False, 0, 0, 50, 40).serialize()


def test_other_server_messages() -> None:
    proto = client()
    colours = SetColourMapEntries(3, ((1, 2, 3), (65535, 0, 7)))
    feed(proto, Bell().serialize() + ServerCutText("clip\xe9").serialize() + colours.serialize(), 1)
    assert proto.events_received() == [Bell(), ServerCutText("clip\xe9"), colours]


def test_cursor_pseudo_encoding() -> None:
    proto = client(encodings=[Encoding.RAW, Encoding.CURSOR])
    shape = make_frame(2, 10, "noise", 0)
    mask = bytes([0b10000000, 0b01000000, 0xFF, 0b11000000])
    data = update(
        RectangleHeader(4, 1, 10, 2, Encoding.CURSOR).serialize()
        + rgb_to_pixels(shape, NATIVE).tobytes()
        + mask
    )
    proto.receive_data(data)
    cursor, _ = proto.events_received()
    assert isinstance(cursor, CursorShape) and (cursor.hotspot_x, cursor.hotspot_y) == (4, 1)
    assert np.array_equal(cursor.rgb, shape)
    assert cursor.mask[0].tolist() == [True] + [False] * 8 + [True]
    assert cursor.mask[1].tolist() == [True] * 10


def test_copyrect_through_the_parser() -> None:
    proto = client()
    first = make_frame(24, 32, "noise", 0)
    proto.receive_data(update(raw_rect(0, 0, first)))
    proto.receive_data(
        update(
            RectangleHeader(10, 10, 5, 5, Encoding.COPYRECT).serialize() + struct.pack("!HH", 0, 0)
        )
    )
    assert np.array_equal(proto.framebuffer[10:15, 10:15], first[:5, :5])


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (b"\x07", ProtocolError, "unknown server message type 7"),
        (
            update(raw_rect(30, 0, make_frame(2, 3, "noise", 0))),
            ProtocolError,
            r"rectangle 1 \(3x2 at \(30, 0\), RAW \(0\)\) is outside the 32x24 screen",
        ),
        (
            update(count=10_001),
            LimitExceeded,
            "FramebufferUpdate rectangle count is 10001, over the limit of 10000",
        ),
        (
            update(RectangleHeader(0, 0, 1, 1, Encoding.HEXTILE).serialize()),
            ProtocolError,
            r"encoding HEXTILE \(5\), which we did not ask for",
        ),
        (
            ServerCutText("x" * 10).serialize(),
            LimitExceeded,
            "ServerCutText length is 10, over the limit of 5",
        ),
        (
            update(RectangleHeader(0, 0, 9000, 10, Encoding.DESKTOP_SIZE).serialize()),
            LimitExceeded,
            "DesktopSize width is 9000, over the limit of 8192",
        ),
        (
            update(RectangleHeader(0, 0, 2000, 2, Encoding.CURSOR).serialize()),
            LimitExceeded,
            "cursor size is 2000",
        ),
    ],
)
def test_malformed_server_input(data: bytes, error: type[Exception], message: str) -> None:
    proto = client(max_cut_text=5)
    with pytest.raises(error, match=message):
        proto.receive_data(data)
    with pytest.raises(LocalProtocolError, match="already failed"):
        proto.receive_data(b"\x02")


def test_rectangles_until_last_rect_are_limited() -> None:
    proto = client(max_rectangles=3)
    rect = raw_rect(0, 0, make_frame(1, 1, "noise", 0))
    with pytest.raises(LimitExceeded, match="rectangles before LastRect is 4, over the limit of 3"):
        proto.receive_data(update(rect, rect, rect, rect, count=0xFFFF))


def test_direct_read_threshold_is_respected() -> None:
    proto = client(200, 200)
    small = make_frame(10, 10, "noise", 0)  # 400 bytes: read-ahead, not direct
    proto.receive_data(FramebufferUpdate(1).serialize() + raw_rect(0, 0, small)[:12])
    assert len(proto.get_buffer(-1)) > 400
    assert DIRECT_READ_BYTES > 400


def test_set_pixel_format_changes_decoding() -> None:
    proto = client()
    pf = FORMATS[4]
    proto.set_pixel_format(pf)
    assert proto.data_to_send() == SetPixelFormat(pf).serialize()
    patch = make_frame(4, 4, "noise", 0)
    proto.receive_data(
        update(
            RectangleHeader(0, 0, 4, 4, Encoding.RAW).serialize()
            + rgb_to_pixels(patch, pf).tobytes()
        )
    )
    expected = pixels_to_rgb(rgb_to_pixels(patch, pf).reshape(-1), pf, out=np.empty_like(patch))
    assert np.array_equal(proto.framebuffer[:4, :4], expected)
    with pytest.raises(LocalProtocolError, match="must be true colour"):
        proto.set_pixel_format(NATIVE.__class__(true_colour=False))


def test_keeping_a_colour_mapped_server_format_is_refused() -> None:
    result = HandshakeComplete(8, 8, NATIVE.__class__(8, 8, False, False), "t", True, (3, 8))
    with pytest.raises(LocalProtocolError, match="pass pixel_format=NATIVE"):
        ClientProtocol(result, pixel_format=None)


# Whole updates applied in one pass from the read-ahead buffer (issue 13) --------------------


def _tagged_client(**kwargs: object) -> ClientProtocol:
    return client(
        encodings=build_encodings([Encoding.RAW], pseudo=(Encoding.LAST_RECT, Encoding.FRAME_TAG)),
        **kwargs,  # type: ignore[arg-type]
    )


def _mixed_update(rng: np.random.Generator, tag: FrameTag | None) -> bytes:
    rects = [raw_rect(3, 2, rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)),
             raw_rect(0, 0, rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)),
             raw_rect(31, 23, rng.integers(0, 256, (1, 1, 3), dtype=np.uint8)),
             raw_rect(4, 4, np.zeros((0, 3, 3), np.uint8))]  # empty: allowed
    if tag is not None:
        rects.insert(1, tag.serialize())
    return update(*rects)


@pytest.mark.parametrize("tagged", [False, True])
def test_a_whole_update_applies_as_the_parser_would(tagged: bool) -> None:
    rng = np.random.default_rng(7)
    tag = FrameTag(41, 3, 1.5) if tagged else None
    data = b"".join(_mixed_update(rng, tag) for _ in range(3)) + Bell().serialize()
    fast, slow = _tagged_client(), _tagged_client()
    taken: list[int] = []
    one_pass = fast._whole_update

    def spy(view: memoryview, pos: int, end: int) -> int:
        taken.append(one_pass(view, pos, end))
        return taken[-1]

    fast._whole_update = spy  # type: ignore[method-assign]
    fast.receive_data(data)  # whole updates in the read-ahead buffer: the one-pass path
    assert len([n for n in taken if n]) == 3  # it took all three
    feed(slow, data, 1)  # one byte at a time: the generator parser only
    assert fast.events_received() == slow.events_received()
    assert np.array_equal(fast.framebuffer, slow.framebuffer)
    assert fast.stats == slow.stats and fast.frame_tag == slow.frame_tag == tag
    assert fast._consumed == slow._consumed == len(data)


def test_updates_the_one_pass_path_leaves_to_the_parser() -> None:
    rng = np.random.default_rng(8)
    patch = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
    # A rectangle off the screen: the parser's error, not a silent skip.
    proto = client()
    with pytest.raises(ProtocolError, match="outside the 32x24 screen"):
        proto.receive_data(update(raw_rect(30, 0, patch)))
    # A frame tag we did not ask for.
    proto = client()
    with pytest.raises(ProtocolError, match="did not ask for"):
        proto.receive_data(update(FrameTag(1, 1, 0.0).serialize()))
    # Another pixel format, and an update cut short: the parser reads them right.
    proto = client()
    proto.set_pixel_format(FORMATS[1])
    proto.receive_data(update(RectangleHeader(0, 0, 4, 4, Encoding.RAW).serialize()
                              + rgb_to_pixels(patch, FORMATS[1]).tobytes()))
    assert np.array_equal(proto.framebuffer[:4, :4], quantised(patch, FORMATS[1]))
    proto = client()
    whole = update(raw_rect(1, 1, patch))
    proto.receive_data(whole[:20])
    assert proto.events_received() == []
    proto.receive_data(whole[20:])
    assert np.array_equal(proto.framebuffer[1:5, 1:5], patch)
    assert [type(e) for e in proto.events_received()] == [FramebufferUpdated]
