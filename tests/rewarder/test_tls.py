"""The rewarder over TLS (``wss://``) on 127.0.0.1, with certificates made at test time:
a verifying client gets in, a client that trusts another CA is refused at once with what
to do, and every file ``server_tls``/``client_context`` cannot use is named."""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from rewarder.blocking import BlockingRewarder
from rewarder.client import RewarderClient
from rewarder.errors import Refused, Untrusted
from rewarder.server import CLOSE_TIMEOUT, RewarderServer
from rewarder.tls import CA_ENV, MIN_VERSION, TLSSetupError, client_context, server_tls
from tests.rewarder.test_client import FakeEnv
from tests.tls import Certs, certs_fixture, make_certs, other_ca_fixture  # noqa: F401

TIMEOUT = 5.0

MakeServer = Callable[..., Awaitable[RewarderServer]]


@pytest.fixture
async def make_server() -> AsyncIterator[MakeServer]:
    servers: list[RewarderServer] = []

    async def make(tls: ssl.SSLContext | None) -> RewarderServer:
        env = FakeEnv()
        server = RewarderServer(env, tls=tls)
        env.server = server
        await server.start("127.0.0.1", 0)
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.close("test over")


async def test_wss_with_a_verifying_client(make_server: MakeServer, certs: Certs) -> None:
    server = await make_server(certs.server().context)
    async with RewarderClient(
        f"127.0.0.1:{server.port}", tls=client_context(certs.ca), start_timeout=TIMEOUT
    ) as client:
        assert client.url == f"wss://127.0.0.1:{server.port}/"
        assert client.describe.env_id == "test.Fake-v0"
        assert await client.ping() >= 0
        assert server.clients and all(
            c.transport is not None and c.transport.get_extra_info("ssl_object") for c in server.clients
        )


async def test_the_ca_may_come_from_the_environment(
    make_server: MakeServer, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await make_server(certs.server().context)
    monkeypatch.setenv(CA_ENV, str(certs.ca))
    async with RewarderClient(f"wss://127.0.0.1:{server.port}", start_timeout=TIMEOUT) as client:
        assert client.describe.env_id == "test.Fake-v0"


async def refusal(server: RewarderServer, tls: ssl.SSLContext | None, url: str = "{port}") -> str:
    """The message of the final error a client with ``tls`` gets from ``server``: final,
    not retried (a ConnectTimeout would come only after the 30 s start timeout)."""
    with pytest.raises(Untrusted) as refused:
        async with RewarderClient(url.format(port=f"127.0.0.1:{server.port}"), tls=tls,
                                  start_timeout=30.0):
            pass
    return str(refused.value)


async def test_a_certificate_of_another_ca_is_refused_at_once_saying_what_to_do(
    make_server: MakeServer, certs: Certs, other_ca: Certs
) -> None:
    server = await make_server(certs.server().context)
    message = await refusal(server, client_context(other_ca.ca))
    assert f"certificate of 127.0.0.1:{server.port} not trusted" in message
    assert "tls_ca=" in message and CA_ENV in message


async def test_the_system_trust_store_does_not_trust_a_private_ca(
    make_server: MakeServer, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CA_ENV, raising=False)
    server = await make_server(certs.server().context)
    assert "not trusted" in await refusal(server, None, "wss://{port}")


async def test_a_certificate_for_another_name_is_refused(
    make_server: MakeServer, tmp_path: Path
) -> None:
    elsewhere = make_certs(tmp_path, names=("remote.example",))
    server = await make_server(elsewhere.server().context)
    message = await refusal(server, client_context(elsewhere.ca))
    assert "not trusted" in message and "127.0.0.1" in message


async def test_tls_client_to_a_plain_remote_says_it_does_not_speak_tls(
    make_server: MakeServer, certs: Certs
) -> None:
    server = await make_server(None)
    message = await refusal(server, client_context(certs.ca))
    assert "does not speak TLS" in message and "vnc://, not vnc+tls://" in message


async def test_plain_client_to_a_tls_remote_is_told_to_use_tls(
    make_server: MakeServer, certs: Certs
) -> None:
    server = await make_server(certs.server().context)
    with pytest.raises(Refused, match="serves TLS.*use wss:// or vnc\\+tls://"):
        async with RewarderClient(f"127.0.0.1:{server.port}", start_timeout=30.0):
            pass
    assert not server.clients


async def test_universes_viewer_url_redirects_to_the_https_viewer(
    make_server: MakeServer, certs: Certs
) -> None:
    server = await make_server(certs.server().context)
    server.viewer_port = 4321
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", server.port, ssl=client_context(certs.ca), server_hostname="127.0.0.1"
    )
    try:
        writer.write(b"GET /viewer/ HTTP/1.1\r\nHost: evil.example\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 302")
    assert b"\r\nLocation: https://127.0.0.1:4321/viewer/\r\n" in head


def test_a_tls_context_with_a_ws_url_is_a_contradiction(certs: Certs) -> None:
    with pytest.raises(ValueError, match="ws:// \\(no TLS\\) but a TLS context"):
        RewarderClient("ws://127.0.0.1:15901", tls=client_context(certs.ca))


def test_both_contexts_refuse_tls_before_1_2(certs: Certs) -> None:
    assert certs.server().context.minimum_version == MIN_VERSION == ssl.TLSVersion.TLSv1_2
    assert client_context(certs.ca).minimum_version == MIN_VERSION
    assert client_context(certs.ca).verify_mode == ssl.CERT_REQUIRED
    assert client_context(certs.ca).check_hostname


# Files that cannot be used, named -------------------------------------------------------------


def _encrypted(key: Path, out: Path) -> Path:
    loaded = serialization.load_pem_private_key(key.read_bytes(), None)
    out.write_bytes(loaded.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    ))
    return out


def test_server_tls_names_the_file_and_what_to_do(certs: Certs, other_ca: Certs, tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    text = tmp_path / "text.pem"
    text.write_text("not a certificate\n")
    cases = [
        ((missing, certs.key), [str(missing), "does not exist", "--tls-cert"]),
        ((certs.cert, missing), [str(missing), "does not exist", "--tls-key"]),
        ((tmp_path, certs.key), [str(tmp_path), "is a directory"]),
        ((text, certs.key), [str(text), "holds no PEM certificate", "trustme"]),
        ((certs.key, certs.cert), [str(certs.key), "swapped"]),
        ((certs.cert, text), [str(text), "holds no PEM private key"]),
        ((certs.cert, other_ca.key), [str(other_ca.key), "is not the key of the certificate"]),
        ((certs.cert, _encrypted(certs.key, tmp_path / "enc.key")),
         ["enc.key", "is encrypted", "openssl pkey"]),
    ]
    for (cert, key), words in cases:
        with pytest.raises(TLSSetupError) as error:
            server_tls(cert, key)
        for word in words:
            assert word in str(error.value), (cert, key, str(error.value))


def test_client_context_names_a_bad_ca_file(certs: Certs, tmp_path: Path) -> None:
    with pytest.raises(TLSSetupError, match=f"does not exist: check tls_ca=.*{CA_ENV}"):
        client_context(tmp_path / "nope.pem")
    with pytest.raises(TLSSetupError, match="holds no PEM certificate: pass the CA"):
        client_context(certs.key)
    copy = shutil.copy(certs.ca, tmp_path / "ca copy.pem")
    assert client_context(copy).cert_store_stats()["x509_ca"] == 1


# Plain HTTP to the TLS port ---------------------------------------------------------------

async def _plain_request(port: int, request: bytes, eof: bool = False) -> bytes:
    """Send ``request`` in clear to ``port`` (then EOF if ``eof``); everything the server
    answers until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        if eof:
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), TIMEOUT)
    finally:
        writer.close()


WS_HANDSHAKE = (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


async def test_a_plain_ws_handshake_to_the_tls_port_gets_a_400_saying_it_speaks_wss(
    make_server: MakeServer, certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    server = await make_server(certs.server().context)
    caplog.set_level(logging.WARNING, "rewarder.tls")
    answer = await _plain_request(server.port, WS_HANDSHAKE)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    assert b"\r\nConnection: close" in head
    text = body.decode()
    assert text.startswith("this port speaks wss:// (TLS), not plain ws://")
    assert f"wss://127.0.0.1:{server.port}/" in text and "vnc+tls://" in text
    assert int(dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])[b"Content-Length"]) == len(body)
    lines = [r for r in caplog.records if r.name == "rewarder.tls"]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "plain HTTP ('GET / HTTP/1.1') from 127.0.0.1 to the rewarder port" in lines[0].getMessage()
    assert lines[0].exc_info is None
    # A browser's or curl's plain http:// gets the same answer.
    answer = await _plain_request(server.port, b"HEAD /viewer/ HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and b"this port speaks wss:// (TLS)" in answer


async def test_plain_requests_to_the_tls_port_log_one_line_per_interval_counted(
    make_server: MakeServer, certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    server = await make_server(certs.server().context)
    caplog.set_level(logging.WARNING, "rewarder.tls")
    answers = await asyncio.gather(*(_plain_request(server.port, WS_HANDSHAKE) for _ in range(20)))
    assert all(a.startswith(b"HTTP/1.1 400 ") for a in answers)
    assert len([r for r in caplog.records if r.name == "rewarder.tls"]) == 1
    assert server.tls_port is not None and server.tls_port.log.counts == {"plain HTTP": 20}
    # TLS clients are served as before, in between and after.
    async with RewarderClient(
        f"127.0.0.1:{server.port}", tls=client_context(certs.ca), start_timeout=TIMEOUT
    ) as client:
        assert await client.ping() >= 0
    await server.close("test over")  # the 19 held back are counted in one more line
    lines = [r.getMessage() for r in caplog.records if r.name == "rewarder.tls"]
    assert len(lines) == 2 and lines[1].startswith("plain HTTP: 19 more"), lines


async def test_bytes_that_are_neither_tls_nor_http_are_closed_with_a_line_and_tls_goes_on(
    make_server: MakeServer, certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    server = await make_server(certs.server().context)
    caplog.set_level(logging.WARNING, "rewarder.tls")
    try:  # closed at once (reset: its bytes were left unread), not left to the TLS deadline
        assert await _plain_request(server.port, b"\x00\x01garbage" * 10) == b""
    except ConnectionResetError:
        pass
    assert await _plain_request(server.port, b"", eof=True) == b""  # said nothing, left
    assert [r.getMessage() for r in caplog.records if r.name == "rewarder.tls"] == [
        "a connection to the rewarder port began with b'\\x00\\x01garbag', neither TLS nor "
        "HTTP: closed"
    ]
    async with RewarderClient(
        f"127.0.0.1:{server.port}", tls=client_context(certs.ca), start_timeout=TIMEOUT
    ) as client:
        assert client.describe.env_id == "test.Fake-v0"


async def test_closing_the_server_drops_connections_that_never_spoke(
    make_server: MakeServer, certs: Certs
) -> None:
    server = await make_server(certs.server().context)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        await server.close("test over")
        # Closed at once: not left to a TLS handshake deadline (10 s).
        assert await asyncio.wait_for(reader.read(), 2.0) == b""
    finally:
        writer.close()


async def test_connections_that_never_reached_tls_leave_nothing_for_close_to_wait_for(
    make_server: MakeServer, certs: Certs, other_ca: Certs
) -> None:
    """A plain request answered 400, bytes that are neither TLS nor HTTP, a handshake the
    client refused: none of them made a link. (Each had: kept while the server served,
    and waited for at close, 2 x CLOSE_TIMEOUT, since a link that never connected never
    closes: a TLS remote's shutdown after any such client took 4 s more.)"""
    server = await make_server(certs.server().context)
    assert (await _plain_request(server.port, WS_HANDSHAKE)).startswith(b"HTTP/1.1 400 ")
    try:
        assert await _plain_request(server.port, b"\x00\x01garbage") == b""
    except ConnectionResetError:
        pass
    assert "not trusted" in await refusal(server, client_context(other_ca.ca))
    assert not server.links
    loop = asyncio.get_running_loop()
    started = loop.time()
    await server.close("test over")
    assert loop.time() - started < CLOSE_TIMEOUT


async def test_a_blocking_plain_client_to_a_tls_rewarder_is_told_to_use_tls(
    make_server: MakeServer, certs: Certs
) -> None:
    server = await make_server(certs.server().context)
    client = BlockingRewarder(f"127.0.0.1:{server.port}", start_timeout=TIMEOUT)
    with pytest.raises(Refused, match="serves TLS \\(a remote served with --tls-cert\\): use wss://"):
        await asyncio.to_thread(client.connect)
    client.close()
    assert not server.clients
