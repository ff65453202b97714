"""What the server's fast path assumes of websockets' sans-I/O ``ServerProtocol``, pinned
for the versions pyproject allows: if a websockets release stops keeping any of it, this
fails here instead of the remote silently falling back to the slow path (issue 45).

The fast path (rewarder/server_link.py) reads ``reader.buffer``, ``current_size``,
``expect_continuation_frame`` and the parser's generator, and appends a reply's frame
to ``writes`` itself."""

from __future__ import annotations

from importlib import metadata

import websockets
from packaging.specifiers import SpecifierSet
from websockets.protocol import State
from websockets.server import ServerProtocol

from rewarder import server_link
from rewarder.ws_frames import text_header

HANDSHAKE = (b"GET / HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


def opened() -> ServerProtocol:
    ws = ServerProtocol()
    ws.receive_data(HANDSHAKE)
    (request,) = ws.events_received()
    ws.send_response(ws.accept(request))  # type: ignore[arg-type]
    ws.data_to_send()
    assert ws.state is State.OPEN
    return ws


def masked(payload: bytes, key: bytes = b"\x01\x02\x03\x04") -> bytes:
    return text_header(len(payload), masked=True) + key + bytes(
        b ^ key[i % 4] for i, b in enumerate(payload))


def test_the_installed_websockets_is_one_pyproject_allows_and_takes_the_fast_path() -> None:
    requirement = next(r for r in (metadata.requires("universe-remote") or []) if r.startswith("websockets"))
    allowed = SpecifierSet(requirement.removeprefix("websockets").split(";")[0])
    assert websockets.version.version in allowed, (websockets.version.version, allowed)
    assert server_link.SHORT_PATH, "websockets no longer keeps what the fast path reads"


def test_the_state_the_fast_path_reads_is_where_it_looks() -> None:
    ws = opened()
    assert isinstance(ws.reader.buffer, bytearray) and not ws.reader.buffer
    assert ws.current_size is None and ws.expect_continuation_frame is False
    assert server_link.between_frames(ws)
    frame = masked(b"hello")
    ws.receive_data(frame[:6])  # a header and its mask: the parser is inside the frame
    assert not ws.reader.buffer and not server_link.between_frames(ws)
    ws.receive_data(frame[6:])
    (event,) = ws.events_received()
    assert event.data == b"hello" and server_link.between_frames(ws)


def test_a_frame_appended_to_writes_is_what_data_to_send_sends() -> None:
    ws = opened()
    reply = text_header(5, masked=False) + b"world"
    ws.writes.append(reply)
    assert b"".join(ws.data_to_send()) == reply
    ws.send_text(b"again")  # and websockets' own frames still follow in order
    assert b"".join(ws.data_to_send()) == text_header(5, masked=False) + b"again"

