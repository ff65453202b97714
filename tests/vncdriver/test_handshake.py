from __future__ import annotations

import struct

import pytest

from vncdriver.errors import (
    AuthenticationFailed,
    LimitExceeded,
    LocalProtocolError,
    ProtocolError,
    ServerRefused,
)
from vncdriver.handshake import (
    ClientHandshake,
    HandshakeComplete,
    SecurityType,
    ServerHandshake,
    vnc_auth_response,
)
from vncdriver.pixelformat import NATIVE

from .helpers import feed, run_handshake

VERSIONS = {(3, 3): b"RFB 003.003\n", (3, 7): b"RFB 003.007\n", (3, 8): b"RFB 003.008\n"}


class OldServer(ServerHandshake):
    """Our server, but offering an older version (the client then answers with it)."""

    def __init__(self, version: bytes, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.data_to_send()
        self._out += version


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("password", [None, "secret"])
@pytest.mark.parametrize("chunk", [None, 1])
def test_versions_and_security(
    version: tuple[int, int], password: str | None, chunk: int | None
) -> None:
    server = OldServer(VERSIONS[version], 640, 480, "desk", password=password)
    client = ClientHandshake(password=password, shared=False)
    run_handshake(client, server, chunk)
    expected = SecurityType.VNC_AUTH if password else SecurityType.NONE
    assert client.result == HandshakeComplete(640, 480, NATIVE, "desk", False, version, expected)
    assert server.result is not None
    assert server.result.version == version and not server.result.shared
    assert not server.result.view_only
    assert client.events_received() == [client.result]


def test_trailing_bytes_belong_to_the_next_stage() -> None:
    client, server = ClientHandshake(), ServerHandshake(10, 10)
    for _ in range(3):  # version, security types, SecurityResult
        client.receive_data(server.data_to_send())
        server.receive_data(client.data_to_send())
    server.receive_data(b"\x03")  # ClientInit went in the last round: pipelined message
    client.receive_data(server.data_to_send() + b"\x02\x02")  # ServerInit, then two Bells
    assert client.complete and server.complete
    assert client.trailing_data() == b"\x02\x02"
    assert server.trailing_data() == b"\x03"


@pytest.mark.parametrize("version", list(VERSIONS))
def test_wrong_password(version: tuple[int, int]) -> None:
    server = OldServer(VERSIONS[version], 10, 10, password="right")
    client = ClientHandshake(password="wrong")
    with pytest.raises(AuthenticationFailed, match="authentication failed"):
        run_handshake(client, server)
    # The server queued a failed SecurityResult (with the reason in 3.8) before raising.
    failure = server.data_to_send()
    with pytest.raises(AuthenticationFailed) as info:
        client.receive_data(failure)
    assert info.value.reason == "authentication failed"
    expected = b"\0\0\0\x01" + (b"\0\0\0\x15authentication failed" if version == (3, 8) else b"")
    assert failure == expected


class Gate:
    """A PasswordGate that refuses once told to, and records what it was asked."""

    def __init__(self) -> None:
        self.refuse: str | None = None
        self.log: list[object] = []

    def admit(self) -> str | None:
        self.log.append("admit")
        return self.refuse

    def compared(self, right: bool) -> None:
        self.log.append(right)


def test_the_gate_decides_when_the_answer_arrives_and_hears_the_outcome() -> None:
    """Asked after the challenge is answered (a block that began meanwhile counts), not when
    the client connects; a refusal is the SecurityResult's reason and nothing is compared."""
    gate = Gate()
    server = ServerHandshake(10, 10, password="right", gate=gate)
    client = ClientHandshake(password="right")
    feed(client, server.data_to_send())
    feed(server, client.data_to_send())  # version
    feed(client, server.data_to_send())  # security types
    feed(server, client.data_to_send())  # VNC Authentication chosen
    feed(client, server.data_to_send())  # the challenge: the client answers it
    assert gate.log == []  # nothing asked yet
    gate.refuse = "blocked for 9 s more"
    with pytest.raises(ServerRefused, match="blocked for 9 s"):
        feed(server, client.data_to_send())
    assert gate.log == ["admit"]  # the right password was never compared
    with pytest.raises(AuthenticationFailed) as info:
        client.receive_data(server.data_to_send())
    assert info.value.reason == "blocked for 9 s more"
    for password, outcome in (("right", True), ("wrong", False)):
        gate = Gate()
        try:
            run_handshake(ClientHandshake(password=password),
                          ServerHandshake(10, 10, password="right", gate=gate))
        except AuthenticationFailed:
            pass
        assert gate.log == ["admit", outcome]


def test_view_only_password() -> None:
    def connect(password: str) -> HandshakeComplete:
        server = ServerHandshake(10, 10, password="full", view_only_password="look")
        run_handshake(ClientHandshake(password=password), server)
        assert server.result is not None
        return server.result

    assert connect("look").view_only
    assert not connect("full").view_only
    with pytest.raises(AuthenticationFailed):
        connect("nope")


def test_view_only_password_alone_requires_auth() -> None:
    server = ServerHandshake(10, 10, view_only_password="look")
    run_handshake(ClientHandshake(password="look"), server)
    assert server.result is not None and server.result.view_only


def test_password_truncated_to_8_bytes() -> None:
    server = ServerHandshake(10, 10, password="12345678")
    run_handshake(ClientHandshake(password="12345678-and-more"), server)


def test_vnc_auth_response_known_answer() -> None:
    # Password "password", challenge 0..15: the value libvncserver/TigerVNC compute.
    challenge = bytes(range(16))
    response = vnc_auth_response("password", challenge)
    from Cryptodome.Cipher import DES

    key = bytes(int(f"{b:08b}"[::-1], 2) for b in b"password")
    assert response == DES.new(key, DES.MODE_ECB).encrypt(challenge)
    assert key[:2] == b"\x0e\x86"  # 'p' = 0x70 -> 0x0e, 'a' = 0x61 -> 0x86


@pytest.mark.parametrize("version", list(VERSIONS))
def test_server_refuses_with_reason(version: tuple[int, int]) -> None:
    server = OldServer(VERSIONS[version], 10, 10, refuse_reason="too many clients")
    client = ClientHandshake()
    client.receive_data(server.data_to_send())
    with pytest.raises(ServerRefused, match="too many clients"):
        server.receive_data(client.data_to_send())
    with pytest.raises(ServerRefused) as info:
        client.receive_data(server.data_to_send())
    assert info.value.reason == "too many clients"


def test_client_without_password_against_auth_server() -> None:
    with pytest.raises(AuthenticationFailed, match="asks for a VNC password and none was given"):
        run_handshake(ClientHandshake(), ServerHandshake(10, 10, password="x"))


@pytest.mark.parametrize(
    ("greeting", "message"),
    [
        (b"HTTP/1.1 400 ", "where a ProtocolVersion like b'RFB 003.008\\\\n' belongs"),
        (b"RFB 002.000\n", "server speaks RFB 2.0"),
        (b"RFB 03.8\n\0\0\0", "where a ProtocolVersion"),
    ],
)
def test_bad_server_version(greeting: bytes, message: str) -> None:
    client = ClientHandshake()
    with pytest.raises(ProtocolError, match=message):
        client.receive_data(greeting)


@pytest.mark.parametrize(
    ("server_version", "answer"),
    [
        (b"RFB 003.003\n", b"RFB 003.003\n"),
        (b"RFB 003.005\n", b"RFB 003.003\n"),
        (b"RFB 003.007\n", b"RFB 003.007\n"),
        (b"RFB 003.008\n", b"RFB 003.008\n"),
        (b"RFB 003.889\n", b"RFB 003.008\n"),  # Apple Remote Desktop
        (b"RFB 005.000\n", b"RFB 003.008\n"),  # RealVNC
    ],
)
def test_client_version_answer(server_version: bytes, answer: bytes) -> None:
    client = ClientHandshake()
    client.receive_data(server_version)
    assert client.data_to_send() == answer


@pytest.mark.parametrize("reply", [b"RFB 003.005\n", b"RFB 004.000\n"])
def test_server_rejects_unsupported_client_version(reply: bytes) -> None:
    server = ServerHandshake(10, 10)
    with pytest.raises(ProtocolError, match=r"we speak 3\.3, 3\.7 and 3\.8"):
        server.receive_data(reply)


def test_unknown_security_types() -> None:
    client = ClientHandshake()
    client.receive_data(b"RFB 003.008\n")
    with pytest.raises(
        ProtocolError, match=r"offers security types \[VeNCrypt \(19\), Tight \(16\)\]"
    ):
        client.receive_data(b"\x02\x13\x10")
    client = ClientHandshake()
    client.receive_data(b"RFB 003.003\n")
    with pytest.raises(ProtocolError, match=r"chose security type unknown \(77\)"):
        client.receive_data(struct.pack("!I", 77))


def test_server_rejects_type_it_did_not_offer() -> None:
    server = ServerHandshake(10, 10)
    server.receive_data(b"RFB 003.008\n")
    server.data_to_send()
    with pytest.raises(ProtocolError, match=r"VNC Authentication \(2\) was not offered"):
        server.receive_data(b"\x02")
    assert server.data_to_send().startswith(b"\0\0\0\x01")


def test_security_result_failure_reason_in_38() -> None:
    client = ClientHandshake(password="pw")
    client.receive_data(b"RFB 003.008\n\x01\x02" + bytes(16))
    with pytest.raises(AuthenticationFailed, match="too many attempts"):
        client.receive_data(b"\0\0\0\x02\0\0\0\x11too many attempts")


def test_limits_on_server_strings() -> None:
    client = ClientHandshake()
    client.receive_data(b"RFB 003.008\n")
    with pytest.raises(LimitExceeded, match="reason length is 1000000, over the limit of 4096"):
        client.receive_data(b"\x00" + struct.pack("!I", 1_000_000))
    client = ClientHandshake()
    header = b"RFB 003.008\n\x01\x01\0\0\0\0" + struct.pack("!HH", 10, 10) + NATIVE.serialize()
    with pytest.raises(LimitExceeded, match="desktop name length"):
        client.receive_data(header + struct.pack("!I", 10**8))
    client = ClientHandshake()
    header = b"RFB 003.008\n\x01\x01\0\0\0\0" + struct.pack("!HH", 60000, 10) + NATIVE.serialize()
    with pytest.raises(LimitExceeded, match="ServerInit screen width is 60000"):
        client.receive_data(header + b"\0\0\0\0")


def test_dead_handshake_stays_dead() -> None:
    client = ClientHandshake()
    with pytest.raises(ProtocolError):
        client.receive_data(b"SSH-2.0-OpenSSH\r\n")
    with pytest.raises(LocalProtocolError, match="already failed"):
        client.receive_data(b"more")


def test_feed_helper_handles_empty() -> None:
    server = ServerHandshake(10, 10)
    feed(server, b"", 1)
    assert not server.complete
