"""VeNCrypt over real sockets on 127.0.0.1: our server and client with certificates made
by trustme, the refusals an agent meets (untrusted certificate, plain client, wrong
password, bytes in clear), and TigerVNC's ``vncviewer -X509CA`` on Xvfb showing a game
served over TLS."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from runtimes.builtin import Catch
from tests.tls import Certs, certs_fixture, other_ca_fixture  # noqa: F401
from tests.vncdriver.test_server_peers import (  # noqa: F401  (fixtures)
    TIMEOUT,
    Viewer,
    scene,
    serve_fixture,
    viewer_fixture,
)
from tests.vncdriver.xserver import require, xservers_fixture  # noqa: F401
from vncdriver.client import VNCClient
from vncdriver.errors import AuthenticationFailed, ProtocolError, TLSFailed
from vncdriver.handshake import SecurityType, VeNCryptSubtype
from vncdriver.messages import KeyEvent
from vncdriver.server import VNCServer

PASSWORD = "s3cret"


def trusting(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


async def test_frames_and_keys_cross_over_tls(serve, certs: Certs) -> None:  # type: ignore[no-untyped-def]
    frame = scene(120, 160, seed=3)
    keys: list[int] = []
    server: VNCServer = await serve(
        frame, password=PASSWORD, tls=certs.server().context,
        on_input=lambda _id, events: keys.extend(e.key for e in events if isinstance(e, KeyEvent)),
    )
    async with VNCClient(f"127.0.0.1::{server.port}", password=PASSWORD, encoding="raw",
                         tls=trusting(certs.ca), start_timeout=TIMEOUT) as client:
        await client.wait_update(timeout=TIMEOUT)
        assert np.array_equal(client.frame(), frame)
        (connection,) = server.connections.values()
        assert connection.transport is not None
        assert connection.transport.get_extra_info("ssl_object") is not None  # really TLS
        assert connection.handshake is not None
        assert connection.handshake.result is not None
        assert connection.handshake.result.security_type == SecurityType.VENCRYPT
        assert connection.handshake.result.tls_subtype == VeNCryptSubtype.X509_VNC
        # An update after the first one, and input the other way.
        frame[:20] = 255 - frame[:20]
        seen = client.updates
        server.frame_ready()
        await client.wait_update(after=seen, timeout=TIMEOUT)
        assert np.array_equal(client.frame(), frame)
        client.key_event("a", True)
        client.key_event("a", False)
        async with asyncio.timeout(TIMEOUT):
            while len(keys) < 2:
                await asyncio.sleep(0.01)  # polls the callback's list; bounded by the timeout
        assert keys == [ord("a"), ord("a")]


async def test_untrusted_certificate_fails_at_once_and_names_why(  # type: ignore[no-untyped-def]
    serve, certs: Certs, other_ca: Certs
) -> None:
    server = await serve(scene(16, 16, seed=1), password=PASSWORD, tls=certs.server().context)
    started = time.monotonic()
    with pytest.raises(TLSFailed, match="certificate verify failed|unable to get local issuer") as info:
        async with VNCClient(f"127.0.0.1::{server.port}", password=PASSWORD,
                             tls=trusting(other_ca.ca), start_timeout=30.0):
            pass
    assert time.monotonic() - started < 5.0  # final: no retrying until the start timeout
    assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
    # The server dropped that one and serves the next.
    async with VNCClient(f"127.0.0.1::{server.port}", password=PASSWORD,
                         tls=trusting(certs.ca), start_timeout=TIMEOUT) as client:
        await client.wait_update(timeout=TIMEOUT)
    assert not server.handshaking


async def test_plain_and_tls_mismatches_say_what_to_do(serve, certs: Certs) -> None:  # type: ignore[no-untyped-def]
    tls_server = await serve(scene(16, 16, seed=1), password=PASSWORD, tls=certs.server().context)
    with pytest.raises(ProtocolError, match=r"serves TLS only.*vnc\+tls://"):
        async with VNCClient(f"127.0.0.1::{tls_server.port}", password=PASSWORD, start_timeout=30.0):
            pass
    plain_server = await serve(scene(16, 16, seed=1), password=PASSWORD)
    with pytest.raises(ProtocolError, match="not VeNCrypt.*vnc://"):
        async with VNCClient(f"127.0.0.1::{plain_server.port}", password=PASSWORD,
                             tls=trusting(certs.ca), start_timeout=30.0):
            pass


async def test_wrong_password_inside_tls_is_refused(serve, certs: Certs) -> None:  # type: ignore[no-untyped-def]
    server = await serve(scene(16, 16, seed=1), password=PASSWORD, tls=certs.server().context)
    with pytest.raises(AuthenticationFailed, match="authentication failed"):
        async with VNCClient(f"127.0.0.1::{server.port}", password="wrong!!!",
                             tls=trusting(certs.ca), start_timeout=30.0):
            pass


async def test_clear_bytes_where_tls_belongs_are_dropped_and_others_served(serve, certs: Certs) -> None:  # type: ignore[no-untyped-def]
    server = await serve(scene(16, 16, seed=1), tls=certs.server().context)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        assert await reader.readexactly(12) == b"RFB 003.008\n"
        writer.write(b"RFB 003.008\n\x13")
        assert await reader.readexactly(2) == b"\x01\x13"
        assert await reader.readexactly(2) == b"\x00\x02"
        writer.write(b"\x00\x02")
        assert await reader.readexactly(6) == b"\x00\x01\x00\x00\x01\x04"  # X509None
        writer.write(b"\x00\x00\x01\x04")
        assert await reader.readexactly(1) == b"\x01"
        writer.write(b"\x01" * 64)  # a ClientInit and more, in clear: not a TLS ClientHello
        async with asyncio.timeout(TIMEOUT):
            assert await reader.read() == b""  # the server closed the connection
    finally:
        writer.close()
    async with VNCClient(f"127.0.0.1::{server.port}", tls=trusting(certs.ca),
                         start_timeout=TIMEOUT) as client:
        await client.wait_update(timeout=TIMEOUT)


def vnc_password_file(directory: Path, password: str) -> Path:
    """A TigerVNC password file (``vncpasswd -f`` reads the password on stdin)."""
    require("vncpasswd")
    path = directory / "passwd"
    path.write_bytes(subprocess.run(["vncpasswd", "-f"], input=f"{password}\n{password}\n".encode(),
                                    capture_output=True, check=True).stdout)
    return path


async def test_tigervnc_viewer_connects_over_x509vnc_and_shows_the_game(
    start_remote, viewer: Viewer, certs: Certs, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    remote = await start_remote("builtin.Catch-v0", password=PASSWORD, tls=certs.server())
    runtime = remote.runtime
    assert isinstance(runtime, Catch)
    passwd = vnc_password_file(tmp_path, PASSWORD)
    # Full colour, lossless: TigerVNC's link-speed guess must not pick 8-bit colour.
    await viewer.start(remote.vnc_port, "-X509CA", str(certs.ca), "-passwd", str(passwd),
                       "-AutoSelect=0", "-FullColor=1", "-NoJPEG=1", security="X509Vnc")
    assert viewer.geometry[2:] == (160, 210)
    await viewer.shows(lambda shot: np.mean(shot == runtime.framebuffer) > 0.97)
    assert remote.vnc is not None
    (connection,) = remote.vnc.connections.values()
    assert connection.transport is not None
    assert connection.transport.get_extra_info("ssl_object") is not None
