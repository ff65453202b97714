"""A server that closes, or breaks the WebSocket protocol, ends the blocking client's wait
at once: the call raises ConnectionClosed with the close code and what happened, the
channel says it is not connected, and the next call says the same (never a timeout, a
bare UnicodeDecodeError or websockets' InvalidState). The server is scripted: it answers
the client's first request with the bytes each case names, then keeps its socket open."""

from __future__ import annotations

import struct
import time

import pytest

from rewarder.blocking import BlockingRewarder
from rewarder.dial import MAX_SERVER_MESSAGE_BYTES
from rewarder.errors import ConnectionClosed

from .scripted import ScriptedServer

#: How long the client would wait for a reply: a case that ends the wait ends it far sooner.
TIMEOUT = 20.0
#: What "at once" means here (a loaded 2-core machine included).
AT_ONCE = 5.0


def close_frame(payload: bytes) -> bytes:
    return bytes((0x88, len(payload))) + payload


#: (bytes the server sends, close code the client reports, words its reason holds)
CASES = {
    "length over the limit": (
        b"\x81\x7f" + struct.pack("!Q", MAX_SERVER_MESSAGE_BYTES + 1), 1009, "exceeds limit"),
    "64-bit length with its top bit": (b"\x81\x7f" + b"\x80" + b"\0" * 7, 1009, "exceeds limit"),
    "masked server frame": (b"\x81\x85\x01\x02\x03\x04hello", 1002, "incorrect masking"),
    "RSV1 bit": (b"\xc1\x05hello", 1002, "reserved bits"),
    "RSV2 bit": (b"\xa1\x05hello", 1002, "reserved bits"),
    "opcode 3": (b"\x83\x00", 1002, "invalid opcode"),
    "opcode 11": (b"\x8b\x00", 1002, "invalid opcode"),
    "ping over 125 bytes": (b"\x89\x7e\x00\x80" + b"p" * 128, 1002, "control frame too long"),
    "fragmented ping": (b"\x09\x00", 1002, "fragmented control frame"),
    "continuation with nothing to continue": (b"\x80\x01x", 1002, "unexpected continuation"),
    "new message inside a fragmented one": (b"\x01\x01a\x81\x01b", 1002, "expected a continuation"),
    "close of one byte": (close_frame(b"\x03"), 1002, "close frame too short"),
    "close code 999": (close_frame(struct.pack("!H", 999)), 1002, "invalid status code"),
    "close code 1005 on the wire": (close_frame(struct.pack("!H", 1005)), 1002, "invalid status code"),
    "close reason not UTF-8": (close_frame(struct.pack("!H", 1000) + b"\xff\xfe"), 1007, "utf-8"),
    "invalid UTF-8 text": (b"\x81\x02\xff\xfe", 1007, "invalid UTF-8"),
    "a valid close 4001": (close_frame(struct.pack("!H", 4001) + b"go away"), 4001, "4001 go away"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_close_or_protocol_error_ends_the_wait_at_once(case: str) -> None:
    data, code, words = CASES[case]

    def script(server: ScriptedServer) -> None:
        while not server.frames():  # the client's request came
            pass
        server.send(data)
        server.stop.wait(TIMEOUT + 10)

    with ScriptedServer(script) as server:
        rewarder = BlockingRewarder(server.address, start_timeout=10, calibration_pings=0, local=False)
        try:
            rewarder.connect()
            started = time.monotonic()
            with pytest.raises(ConnectionClosed) as info:
                rewarder.step([], 1, timeout=TIMEOUT)
            assert time.monotonic() - started < AT_ONCE
            assert info.value.code == code, info.value
            assert words.lower() in str(info.value).lower()
            assert not rewarder.connected
            with pytest.raises(ConnectionClosed) as again:  # the next call: the same story
                rewarder.ping(timeout=1.0)
            assert again.value.code == code and words.lower() in str(again.value).lower()
        finally:
            rewarder.close()
        assert server.error is None
