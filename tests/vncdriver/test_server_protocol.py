from __future__ import annotations

import numpy as np
import pytest

from vncdriver.errors import LimitExceeded, LocalProtocolError, ProtocolError
from vncdriver.handshake import HandshakeComplete
from vncdriver.messages import (
    ClientCutText,
    Encoding,
    FramebufferUpdate,
    FramebufferUpdateRequest,
    KeyEvent,
    PointerEvent,
    RectangleHeader,
    SetEncodings,
    SetPixelFormat,
    build_encodings,
)
from vncdriver.pixelformat import NATIVE, PixelFormat
from vncdriver.server_protocol import ServerProtocol
from vncdriver.tiles import changed_tile_mask, tile_mask_to_rects

from .helpers import feed, make_frame, protocol_pair


def server(
    width: int = 200, height: int = 150, view_only: bool = False, **kwargs: object
) -> ServerProtocol:
    result = HandshakeComplete(width, height, NATIVE, "t", True, (3, 8), view_only=view_only)
    return ServerProtocol(result, **kwargs)  # type: ignore[arg-type]


def request(incremental: bool = True, x: int = 0, y: int = 0, w: int = 200, h: int = 150) -> bytes:
    return FramebufferUpdateRequest(incremental, x, y, w, h).serialize()


def rects_of(data: bytes) -> list[RectangleHeader]:
    """Rectangle headers of one Raw update (Raw: we can skip the pixel data)."""
    count = FramebufferUpdate.parse(data[:4]).count
    pos, rects = 4, []
    for _ in range(count):
        rect = RectangleHeader.parse(data[pos : pos + 12])
        rects.append(rect)
        pos += 12 + (rect.width * rect.height * 4 if rect.encoding == Encoding.RAW else 0)
    assert pos == len(data)
    return rects


def test_client_messages_become_events() -> None:
    messages = [
        SetPixelFormat(PixelFormat(16, 16, False, True, 31, 63, 31, 11, 5, 0)),
        SetEncodings((16, 0, -223)),
        FramebufferUpdateRequest(True, 0, 0, 10, 10),
        KeyEvent(True, 0x61),
        PointerEvent(1, 5, 6),
        ClientCutText("copy"),
    ]
    proto = server()
    feed(proto, b"".join(m.serialize() for m in messages), 1)
    assert proto.events_received() == messages
    assert proto.pixel_format == messages[0].pixel_format
    assert proto.encoding == Encoding.ZRLE and proto.preferences.desktop_size


def test_view_only_client_input_is_dropped() -> None:
    proto = server(view_only=True)
    proto.receive_data(
        KeyEvent(True, 1).serialize()
        + PointerEvent(0, 1, 1).serialize()
        + ClientCutText("x").serialize()
        + request()
    )
    assert proto.events_received() == [FramebufferUpdateRequest(True, 0, 0, 200, 150)]


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (
            SetPixelFormat(PixelFormat(24, 24)).serialize(),
            ProtocolError,
            "SetPixelFormat: unusable pixel format 24bpp .*bits-per-pixel must be 8, 16 or 32",
        ),
        (
            SetPixelFormat(PixelFormat(8, 8, False, False)).serialize(),
            ProtocolError,
            "must be true colour",
        ),
        (
            SetEncodings(tuple(range(257))).serialize(),
            LimitExceeded,
            "SetEncodings count is 257, over the limit of 256",
        ),
        (
            request(x=150, w=100),
            ProtocolError,
            r"FramebufferUpdateRequest for 100x150 at \(150, 0\) is outside the 200x150 screen",
        ),
        (
            ClientCutText("x" * 101).serialize(),
            LimitExceeded,
            "ClientCutText length is 101, over the limit of 100",
        ),
        (b"\x01", ProtocolError, "unknown client message type 1"),
        (b"\xfc", ProtocolError, "unknown client message type 252"),
    ],
)
def test_malformed_client_input(data: bytes, error: type[Exception], message: str) -> None:
    proto = server(max_cut_text=100)
    with pytest.raises(error, match=message):
        proto.receive_data(data)
    with pytest.raises(LocalProtocolError, match="already failed"):
        proto.receive_data(b"\x03")


def test_updates_follow_requests_and_dirty_tiles() -> None:
    proto = server()
    frame = make_frame(150, 200, "noise", 0)
    assert not proto.update_wanted and proto.send_update(frame) == 0
    proto.receive_data(request(incremental=True))
    assert proto.update_wanted  # everything is dirty at first
    assert proto.send_update(frame) > 0
    assert not proto.update_wanted
    proto.receive_data(request())
    assert not proto.update_wanted  # nothing changed: the request waits
    proto.data_to_send()
    proto.mark_dirty([(70, 10, 5, 5), (130, 140, 70, 10)])
    assert proto.update_wanted
    proto.send_update(frame)
    rects = rects_of(proto.data_to_send())
    assert [(r.x, r.y, r.width, r.height) for r in rects] == [(64, 0, 64, 64), (128, 128, 72, 22)]


def test_non_incremental_sends_the_area() -> None:
    proto = server()
    proto.receive_data(request(False, 10, 20, 30, 40))
    proto.send_update(make_frame(150, 200, "noise", 0))
    assert [(r.x, r.y, r.width, r.height) for r in rects_of(proto.data_to_send())] == [
        (10, 20, 30, 40)
    ]


def test_requests_merge_and_clip_to_the_area() -> None:
    proto = server()
    proto.mark_all_dirty()
    proto.receive_data(request(True, 0, 0, 10, 10) + request(True, 100, 100, 10, 10))
    proto.send_update(make_frame(150, 200, "noise", 0))
    rects = rects_of(proto.data_to_send())
    assert min(r.x for r in rects) == 0 and max(r.x + r.width for r in rects) == 110
    assert all(r.x + r.width <= 110 and r.y + r.height <= 110 for r in rects)


def test_encoding_choice_respects_the_client() -> None:
    proto = server()
    proto.receive_data(SetEncodings((5, 2)).serialize())  # Hextile, RRE: none of ours
    assert proto.encoding == Encoding.RAW  # Raw is always allowed
    proto.receive_data(SetEncodings((5, 7, 16)).serialize())
    assert proto.encoding == Encoding.TIGHT
    proto = server(encodings=[Encoding.ZRLE])
    proto.receive_data(SetEncodings((7, 16)).serialize())
    assert proto.encoding == Encoding.ZRLE


def test_tight_jpeg_only_with_a_quality() -> None:
    frame = make_frame(150, 200, "noise", 0)
    for quality, jpeg in ((None, False), (6, True)):
        proto = server()
        proto.receive_data(
            SetEncodings(tuple(build_encodings([7], quality=quality))).serialize() + request(False)
        )
        proto.send_update(frame)
        data = proto.data_to_send()
        assert data[4 + 12] == (0x90 if jpeg else 0x01)  # JPEG, or basic stream 0 (+reset)


def test_resize_with_and_without_desktop_size() -> None:
    proto = server()
    proto.receive_data(SetEncodings((0,)).serialize())
    assert not proto.resize(100, 50)  # the client said it only knows Raw
    proto = server()
    assert proto.resize(100, 50)  # no SetEncodings yet: we cannot tell
    with pytest.raises(ProtocolError, match="does not accept DesktopSize"):
        proto.receive_data(SetEncodings((0,)).serialize())
    proto = server()
    assert proto.resize(100, 50)
    proto.receive_data(SetEncodings((0, -223)).serialize())
    proto.receive_data(request(True, 0, 0, 200, 150))  # sent before it saw the new size
    assert proto.update_wanted
    proto.send_update(make_frame(50, 100, "noise", 0))
    rects = rects_of(proto.data_to_send())
    assert rects[0] == RectangleHeader(0, 0, 100, 50, Encoding.DESKTOP_SIZE)
    assert [(r.x, r.y, r.width, r.height) for r in rects[1:]] == [(0, 0, 100, 50)]
    with pytest.raises(LocalProtocolError, match="call resize"):
        proto.send_rects(make_frame(150, 200, "noise", 0), [])


def test_pixel_format_is_the_clients() -> None:
    c, s = protocol_pair(
        40,
        30,
        client_kwargs={
            "encodings": [Encoding.RAW],
            "pixel_format": PixelFormat(16, 16, False, True, 31, 63, 31, 11, 5, 0),
        },
    )
    c.request_update()
    s.receive_data(c.data_to_send())
    s.send_update(make_frame(30, 40, "noise", 0))
    assert len(s.data_to_send()) == 4 + 12 + 40 * 30 * 2


def test_bell_and_cut_text() -> None:
    proto = server()
    proto.bell()
    proto.cut_text("hello")
    assert proto.data_to_send() == b"\x02\x03\0\0\0\0\0\0\x05hello"


def test_raw_encodings_are_shared_between_clients_of_one_frame() -> None:
    from vncdriver.messages import Encoding, build_encodings
    from vncdriver.pixelformat import PixelFormat

    raw = build_encodings([Encoding.RAW])
    frame = make_frame(48, 64, "noise", 3)
    shared: dict = {}
    outputs = []
    for _ in range(3):
        client, server = protocol_pair(64, 48, client_kwargs={"encodings": raw})
        client.request_update()
        server.receive_data(client.data_to_send())
        server.send_update(frame, shared)
        data = server.data_to_send()
        client.receive_data(data)
        assert np.array_equal(client.framebuffer, frame)
        outputs.append(data)
    assert len(shared) == 1 and outputs[0] == outputs[1] == outputs[2]  # encoded once
    bgr = PixelFormat(32, 24, False, True, 255, 255, 255, 16, 8, 0)
    client, server = protocol_pair(64, 48, client_kwargs={"encodings": raw, "pixel_format": bgr})
    client.request_update()
    server.receive_data(client.data_to_send())
    server.send_update(frame, shared)
    client.receive_data(server.data_to_send())
    assert np.array_equal(client.framebuffer, frame) and len(shared) == 2  # its own format
    tight, server = protocol_pair(64, 48)  # Tight keeps zlib state per client: never shared
    tight.request_update()
    server.receive_data(tight.data_to_send())
    server.send_update(frame, shared)
    assert len(shared) == 2


# The per-frame fast paths (issue 13): same results as the general code ----------------------

_FREQUENT: list[FramebufferUpdateRequest | KeyEvent | PointerEvent | ClientCutText] = [
    FramebufferUpdateRequest(True, 0, 0, 200, 150),
    KeyEvent(True, 0x61),
    PointerEvent(1, 5, 6),
    KeyEvent(False, 0x61),
    ClientCutText("x"),  # not a frequent message: the generator parser takes over mid-chunk
    FramebufferUpdateRequest(False, 10, 20, 30, 40),
    PointerEvent(0, 199, 149),
]


@pytest.mark.parametrize("view_only", [False, True])
def test_frequent_messages_parse_the_same_at_every_split(view_only: bool) -> None:
    data = b"".join(m.serialize() for m in _FREQUENT)
    expected = [
        m for m in _FREQUENT if not (view_only and isinstance(m, KeyEvent | PointerEvent | ClientCutText))
    ]
    for split in range(len(data) + 1):
        proto = server(view_only=view_only)
        proto.receive_data(data[:split])
        proto.receive_data(data[split:])
        assert proto.events_received() == expected, split
        # Both requests merged into one, as the generator parser does.
        assert proto.update_wanted


def test_a_request_outside_the_screen_fails_the_fast_path_for_good() -> None:
    proto = server()
    with pytest.raises(ProtocolError, match="outside the 200x150 screen"):
        proto.receive_data(request(x=190, w=20))
    with pytest.raises(LocalProtocolError, match="already failed"):
        proto.receive_data(request())


def test_dirty_tiles_from_a_mask_are_sent_like_rectangles() -> None:
    by_mask, by_rects = server(), server()
    frame = make_frame(150, 200, "noise", 0)
    for proto in (by_mask, by_rects):
        proto.receive_data(SetEncodings((0,)).serialize() + request(incremental=False))
        proto.send_update(frame)
        proto.data_to_send()
        proto.receive_data(request())
    mask = np.zeros((3, 4), bool)
    mask[0, 1] = mask[0, 2] = mask[2, 3] = True
    by_mask.mark_dirty_tiles(mask)
    by_rects.mark_dirty(tile_mask_to_rects(mask, 200, 150))
    assert by_mask.send_update(frame) == by_rects.send_update(frame) == 2
    assert by_mask.data_to_send() == by_rects.data_to_send()
    wrong = server()
    wrong.mark_dirty_tiles(np.zeros((1, 1), bool))  # another screen's mask: resend it all
    assert wrong._dirty.all()


def test_damage_is_sent_as_its_rectangles_merged_until_a_compare() -> None:
    """mark_damage: the next whole-screen update sends the rectangles (a sprite's old and
    new places merged into one, repeats dropped, several frames' damage together); a
    request for part of the screen, a tile mark or more than MAX_EXACT_RECTS rectangles
    fall back to whole dirty tiles until a whole-screen update is sent again."""
    from vncdriver.server_protocol import MAX_EXACT_RECTS, merge_rects

    proto = server()
    frame = make_frame(150, 200, "noise", 0)
    proto.receive_data(request())
    proto.send_update(frame)  # everything at first, as tiles
    proto.data_to_send()

    def sent() -> list[tuple[int, int, int, int]]:
        proto.receive_data(request())
        proto.send_update(frame)
        data = proto.data_to_send()
        return [(r.x, r.y, r.width, r.height) for r in rects_of(data)] if data else []

    proto.mark_damage([(10, 20, 6, 6), (10, 22, 6, 6)])  # a ball that fell 2 px
    proto.mark_damage([(150, 140, 20, 4), (10, 22, 6, 6)])  # next frame: the paddle, a repeat
    assert sent() == [(10, 20, 6, 8), (150, 140, 20, 4)]
    assert sent() == []  # nothing new: the request waits
    proto.mark_damage([(130, 10, 5, 5)])
    proto.mark_dirty_tiles(changed_tile_mask(frame, make_frame(150, 200, "noise", 1)))
    assert all(w % 64 == 0 or x + w == 200 for x, _, w, _ in sent())  # a compare: tiles
    proto.mark_damage([(i * 3, 30, 2, 2) for i in range(MAX_EXACT_RECTS + 1)])  # too many
    assert sent() == [(0, 0, 128, 64)]
    proto.mark_damage([(5, 5, 1, 1)])
    proto.receive_data(request(True, 0, 0, 100, 100))  # part of the screen: tiles
    proto.send_update(frame)
    assert [(r.x, r.y, r.width, r.height) for r in rects_of(proto.data_to_send())] == [(0, 0, 64, 64)]
    proto.mark_damage([(150, 140, 3, 3)])
    assert sent() == [(128, 128, 64, 22)]  # still tiles: the part left exact tracking
    proto.mark_damage([(150, 140, 3, 3)])
    assert sent() == [(150, 140, 3, 3)]  # a whole-screen update brought it back
    assert merge_rects([(0, 0, 10, 10), (100, 100, 10, 10), (0, 0, 10, 10)]) == [
        (0, 0, 10, 10), (100, 100, 10, 10)
    ]
