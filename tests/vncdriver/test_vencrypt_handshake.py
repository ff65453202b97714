"""VeNCrypt (security type 19, version 0.2, X509None/X509Vnc) in the sans-I/O handshakes:
what goes in clear, where each side pauses for TLS, and every refusal's words. TLS itself
is the caller's (tests/vncdriver/test_vencrypt.py runs it over real sockets); here the
switch is a call to ``tls_started()`` on each side."""

from __future__ import annotations

import struct

import pytest

from vncdriver.errors import AuthenticationFailed, ProtocolError, ServerRefused
from vncdriver.handshake import (
    ClientHandshake,
    SecurityType,
    ServerHandshake,
    StartTLS,
    VeNCryptSubtype,
)

from .helpers import feed

RFB38 = b"RFB 003.008\n"


def run(client: ClientHandshake, server: ServerHandshake, chunk: int | None = None) -> list[bytes]:
    """Move bytes both ways, switching each side to "TLS" when it says so (after writing
    out what it queued before the switch, as a caller must); returns every chunk that
    crossed in clear (what a listener on the wire would read)."""
    clear: list[bytes] = []
    switched: set[int] = set()
    peer = {id(client): server, id(server): client}

    def send(src: ClientHandshake | ServerHandshake) -> bool:
        data = src.data_to_send()
        if data:
            if id(src) not in switched:
                clear.append(data)
            feed(peer[id(src)], data, chunk)
        return bool(data)

    for _ in range(30):
        moved = False
        for src in (server, client):
            moved |= send(src)
            for side in (client, server):
                for event in side.events_received():
                    if isinstance(event, StartTLS):
                        assert event.server_side is (side is server) and side.tls_pending
                        send(side)  # what it queued before the switch goes in clear
                        side.tls_started()
                        switched.add(id(side))
        if client.complete and server.complete:
            return clear
        if not moved:
            break
    raise AssertionError("handshake stalled")


@pytest.mark.parametrize("chunk", [None, 1])
@pytest.mark.parametrize(
    ("password", "subtype"),
    [("s3cret", VeNCryptSubtype.X509_VNC), (None, VeNCryptSubtype.X509_NONE)],
)
def test_vencrypt_handshake(password: str | None, subtype: int, chunk: int | None) -> None:
    server = ServerHandshake(64, 48, "desk", password=password, tls=True)
    client = ClientHandshake(password=password, tls=True)
    clear = run(client, server, chunk)
    assert client.result is not None and server.result is not None
    for result in (client.result, server.result):
        assert result.security_type == SecurityType.VENCRYPT and result.tls_subtype == subtype
        assert (result.width, result.height, result.name) == (64, 48, "desk")
    wire = b"".join(clear)
    # In clear: versions, the one type offered, VeNCrypt's own exchange, and nothing more.
    assert wire == (
        RFB38 + RFB38 + b"\x01\x13" + b"\x13" + b"\x00\x02" + b"\x00\x02"
        + b"\x00\x01" + struct.pack("!I", subtype) + struct.pack("!I", subtype) + b"\x01"
    )


def test_view_only_password_over_vencrypt() -> None:
    server = ServerHandshake(8, 8, password="full", view_only_password="look", tls=True)
    client = ClientHandshake(password="look", tls=True)
    run(client, server)
    assert server.result is not None and server.result.view_only


def test_wrong_password_over_vencrypt_fails_inside_tls() -> None:
    server = ServerHandshake(8, 8, password="right", tls=True)
    client = ClientHandshake(password="wrong", tls=True)
    with pytest.raises(AuthenticationFailed, match="authentication failed"):
        run(client, server)


def test_bytes_in_clear_after_the_switch_was_agreed_are_refused() -> None:
    server = ServerHandshake(8, 8, tls=True)
    server.receive_data(RFB38 + b"\x13" + b"\x00\x02")
    server.data_to_send()
    with pytest.raises(ProtocolError, match="3 bytes in clear where the switch to TLS was agreed"):
        server.receive_data(struct.pack("!I", VeNCryptSubtype.X509_NONE) + b"GET")


def test_a_plain_client_is_told_to_use_tls() -> None:
    server = ServerHandshake(8, 8, password="pw", tls=True)
    client = ClientHandshake(password="pw")
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    with pytest.raises(ProtocolError, match=r"serves TLS only \(VeNCrypt\).*vnc\+tls://"):
        client.receive_data(server.data_to_send())


def test_a_tls_client_is_told_the_server_has_no_tls() -> None:
    server = ServerHandshake(8, 8, password="pw")
    client = ClientHandshake(password="pw", tls=True)
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    with pytest.raises(ProtocolError, match=r"not VeNCrypt \(19\).*its address is vnc://"):
        client.receive_data(server.data_to_send())


def test_rfb33_clients_are_refused_by_a_tls_server_with_the_way_out() -> None:
    server = ServerHandshake(8, 8, tls=True)
    server.data_to_send()
    with pytest.raises(ServerRefused, match="requires TLS"):
        server.receive_data(b"RFB 003.003\n")
    out = server.data_to_send()
    assert out[:4] == b"\0\0\0\0" and b"-X509CA" in out
    client = ClientHandshake(tls=True)
    with pytest.raises(ProtocolError, match="RFB 3.3, which has no VeNCrypt"):
        client.receive_data(b"RFB 003.003\n")


def test_server_refuses_other_versions_and_subtypes() -> None:
    server = ServerHandshake(8, 8, tls=True)
    server.receive_data(RFB38 + b"\x13")
    server.data_to_send()
    with pytest.raises(ProtocolError, match=r"VeNCrypt 0\.1; we speak 0\.2"):
        server.receive_data(b"\x00\x01")
    assert server.data_to_send() == b"\xff"

    server = ServerHandshake(8, 8, password="pw", tls=True)
    server.receive_data(RFB38 + b"\x13\x00\x02")
    server.data_to_send()
    with pytest.raises(ProtocolError, match=r"subtype TLSNone \(257\); we offer X509Vnc \(261\)"):
        server.receive_data(struct.pack("!I", 257))
    assert server.data_to_send() == b"\x00"


def test_client_refuses_what_it_cannot_speak() -> None:
    client = ClientHandshake(tls=True)
    client.receive_data(RFB38 + b"\x01\x13")
    with pytest.raises(ProtocolError, match=r"VeNCrypt 0\.1; we need 0\.2"):
        client.receive_data(b"\x00\x01")
    client = ClientHandshake(tls=True)
    client.receive_data(RFB38 + b"\x01\x13\x00\x02\x00")
    with pytest.raises(ProtocolError, match=r"\[TLSNone \(257\), Plain \(256\)\]; we speak X509None"):
        client.receive_data(b"\x02" + struct.pack("!II", 257, 256))
    assert client.data_to_send().endswith(b"\0\0\0\0")  # "cannot choose": 0
    client = ClientHandshake(tls=True)  # X509Vnc only, and no password to answer with
    client.receive_data(RFB38 + b"\x01\x13\x00\x02\x00")
    with pytest.raises(AuthenticationFailed, match="asks for a VNC password"):
        client.receive_data(b"\x01" + struct.pack("!I", VeNCryptSubtype.X509_VNC))
    client = ClientHandshake(tls=True)
    client.receive_data(RFB38 + b"\x01\x13\x00\x02\x00\x01" + struct.pack("!I", 260))
    with pytest.raises(ServerRefused, match=r"refused VeNCrypt subtype X509None \(260\)"):
        client.receive_data(b"\x00")
