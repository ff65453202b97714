from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from vncdriver.errors import LimitExceeded, LocalProtocolError, ProtocolError
from vncdriver.messages import (
    CLIENT_MESSAGES,
    SERVER_MESSAGES,
    Bell,
    ClientCutText,
    Encoding,
    EncodingPreferences,
    FramebufferUpdate,
    FramebufferUpdateRequest,
    KeyEvent,
    PointerEvent,
    RectangleHeader,
    ServerCutText,
    SetColourMapEntries,
    SetEncodings,
    SetPixelFormat,
    Subsampling,
    build_encodings,
)
from vncdriver.pixelformat import NATIVE, PixelFormat

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
s32 = st.integers(-(2**31), 2**31 - 1)
latin1 = st.text(st.characters(max_codepoint=0xFF), max_size=200)

pixel_formats = st.builds(
    PixelFormat, u8, u8, st.booleans(), st.booleans(), u16, u16, u16, u8, u8, u8
)

messages = st.one_of(
    st.builds(SetPixelFormat, pixel_formats),
    st.builds(SetEncodings, st.lists(s32, max_size=40).map(tuple)),
    st.builds(FramebufferUpdateRequest, st.booleans(), u16, u16, u16, u16),
    st.builds(KeyEvent, st.booleans(), u32),
    st.builds(PointerEvent, u8, u16, u16),
    st.builds(ClientCutText, latin1),
    st.builds(FramebufferUpdate, u16),
    st.builds(SetColourMapEntries, u16, st.lists(st.tuples(u16, u16, u16), max_size=30).map(tuple)),
    st.builds(Bell),
    st.builds(ServerCutText, latin1),
)


@given(messages)
def test_message_round_trip(message: object) -> None:
    data = message.serialize()  # type: ignore[attr-defined]
    assert type(message).parse(data) == message  # type: ignore[attr-defined]
    assert data[0] == type(message).TYPE  # type: ignore[attr-defined]


@given(st.builds(RectangleHeader, u16, u16, u16, u16, s32))
def test_rectangle_header_round_trip(rect: RectangleHeader) -> None:
    assert RectangleHeader.parse(rect.serialize()) == rect


@given(pixel_formats)
def test_pixel_format_round_trip(pf: PixelFormat) -> None:
    assert len(pf.serialize()) == 16
    assert PixelFormat.parse(pf.serialize()) == pf


def test_message_tables_cover_rfb_38() -> None:
    assert sorted(CLIENT_MESSAGES) == [0, 2, 3, 4, 5, 6]
    assert sorted(SERVER_MESSAGES) == [0, 1, 2, 3]


def test_wire_layouts_match_rfc_6143() -> None:
    assert FramebufferUpdateRequest(True, 1, 2, 3, 4).serialize() == bytes.fromhex(
        "03 01 0001 0002 0003 0004"
    )
    assert KeyEvent(True, 0xFF0D).serialize() == bytes.fromhex("04 01 0000 0000ff0d")
    assert PointerEvent(1, 10, 20).serialize() == bytes.fromhex("05 01 000a 0014")
    assert SetEncodings((7, -239)).serialize() == bytes.fromhex("02 00 0002 00000007 ffffff11")
    assert ClientCutText("hé").serialize() == b"\x06\0\0\0\0\0\0\x02h\xe9"
    assert NATIVE.serialize() == bytes.fromhex("20 18 00 01 00ff 00ff 00ff 00 08 10 000000")


def test_parse_rejects_wrong_type_and_length() -> None:
    with pytest.raises(ProtocolError, match="KeyEvent starts with message type 4, got 5"):
        KeyEvent.parse(PointerEvent(0, 0, 0).serialize() + b"\0\0")
    with pytest.raises(ProtocolError, match="PointerEvent is 6 bytes, got 5"):
        PointerEvent.parse(b"\x05\0\0\0\0")


def test_length_limits() -> None:
    with pytest.raises(LimitExceeded, match="ClientCutText length is 11, over the limit of 10"):
        ClientCutText.parse(ClientCutText("x" * 11).serialize(), max_bytes=10)
    with pytest.raises(LimitExceeded, match="SetEncodings count is 300, over the limit of 256"):
        SetEncodings.parse(SetEncodings(tuple(range(300))).serialize())
    with pytest.raises(LimitExceeded, match="SetColourMapEntries count"):
        SetColourMapEntries.parse(SetColourMapEntries(0, ((1, 2, 3),) * 5).serialize(), 4)


def test_cut_text_must_be_latin1() -> None:
    with pytest.raises(LocalProtocolError, match="Latin-1"):
        ClientCutText("snowman ☃").serialize()


def test_build_encodings_and_preferences() -> None:
    listed = build_encodings(
        [Encoding.TIGHT, Encoding.RAW],
        quality=5,
        compress_level=2,
        fine_quality=80,
        subsample=Subsampling.S420,
    )
    assert listed == [7, 0, -27, -432, -767, -254, -223, -224]
    prefs = EncodingPreferences.from_list(listed)
    assert prefs.encodings == (7, 0)
    assert (prefs.quality, prefs.compress_level, prefs.fine_quality) == (5, 2, 80)
    assert prefs.subsampling is Subsampling.S420
    assert prefs.desktop_size and prefs.last_rect
    assert prefs.first_of({Encoding.RAW, Encoding.ZRLE}) == Encoding.RAW
    assert EncodingPreferences.from_list([5, 16]).first_of({0, 7, 16}) == 16
    assert EncodingPreferences.from_list([5]).first_of({0, 7, 16}) == Encoding.RAW
    with pytest.raises(LocalProtocolError, match=r"JPEG quality level must be 0\.\.9, not 10"):
        build_encodings(quality=10)


@given(
    st.integers(0, 9) | st.none(),
    st.integers(0, 9) | st.none(),
    st.integers(0, 100) | st.none(),
    st.sampled_from(list(Subsampling)) | st.none(),
)
def test_preferences_read_back_what_build_encodings_wrote(
    quality: int | None, level: int | None, fine: int | None, sub: Subsampling | None
) -> None:
    prefs = EncodingPreferences.from_list(
        build_encodings(quality=quality, compress_level=level, fine_quality=fine, subsample=sub)
    )
    assert (prefs.quality, prefs.compress_level, prefs.fine_quality, prefs.subsampling) == (
        quality,
        level,
        fine,
        sub,
    )
