"""The viewer's files behind the password (the page's session cookie), and the viewer
over https with certificates made at test time. Real sockets on 127.0.0.1 only."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from http.cookies import SimpleCookie
from typing import Any

import aiohttp
import numpy as np
import pytest

from envserver.viewer import Viewer
from envserver.viewer_auth import MAX_SESSIONS, SESSION_LIFETIME, ViewerAuth
from rewarder.tls import client_context
from tests.envserver.test_viewer import PASSWORD, RFBOverWebSocket, basic
from tests.tls import Certs, certs_fixture  # noqa: F401
from vncdriver.handshake import SecurityType
from vncdriver.server import VNCServer

FILES = ("/viewer/static/viewer.js", "/viewer/static/viewer.css")


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    # No cookie jar: each test sends the cookie it means to (aiohttp's jar would also
    # refuse cookies from an IP address).
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
        yield session


@pytest.fixture
async def start_viewer() -> AsyncIterator[Any]:
    """``await start_viewer(**Viewer kwargs)``: a viewer attached to an in-process VNC
    server showing a known frame, on a free port of 127.0.0.1."""
    started: list[Viewer] = []
    frame = np.arange(48 * 64 * 3, dtype=np.uint32).astype(np.uint8).reshape(48, 64, 3)

    async def start(**kwargs: Any) -> Viewer:
        viewer = Viewer(0, vnc_server=VNCServer(frame, name="tls-test"), **kwargs)
        await viewer.start("127.0.0.1", 0)
        started.append(viewer)
        return viewer

    yield start
    for viewer in started:
        await viewer.close()


def the_cookie(response: aiohttp.ClientResponse, viewer: Viewer) -> Any:
    """The session cookie a response sets (a Morsel), from its raw header."""
    jar: SimpleCookie = SimpleCookie()
    for header in response.headers.getall("Set-Cookie", []):
        jar.load(header)
    assert viewer.auth.cookie in jar, response.headers
    return jar[viewer.auth.cookie]


async def test_page_files_need_the_password_or_the_pages_cookie(
    start_viewer: Any, http: aiohttp.ClientSession
) -> None:
    viewer = await start_viewer(password=PASSWORD, view_only_password="watcher")
    base = f"http://127.0.0.1:{viewer.port}"
    for path in FILES:
        async with http.get(base + path) as r:
            assert r.status == 401
            text = await r.text()
            assert "part of the viewer page" in text and "/viewer/?password=" in text
    async with http.get(f"{base}/viewer/?password={PASSWORD}") as r:
        assert r.status == 200
        morsel = the_cookie(r, viewer)
    assert morsel.key == f"universe-remote-viewer-{viewer.port}"  # one per viewer port
    assert morsel["httponly"] and morsel["samesite"] == "Strict" and morsel["path"] == "/"
    assert not morsel["secure"]  # http: a Secure cookie would never come back
    assert int(morsel["max-age"]) == SESSION_LIFETIME
    cookie = {"Cookie": f"{morsel.key}={morsel.value}"}
    for path in FILES:
        async with http.get(base + path, headers=cookie) as r:
            assert r.status == 200 and the_cookie(r, viewer).value == morsel.value  # renewed
    async with http.get(f"{base}/viewer/status", headers=cookie) as r:
        assert r.status == 200
    # The full password's page controls (if the viewer lets it); the view-only one's watches.
    async with http.get(f"{base}/viewer/session", headers=cookie) as r:
        assert (await r.json())["view_only"] is True  # Viewer(view_only=True), the default
    async with http.get(f"{base}/viewer/", headers=basic("watcher")) as r:
        watcher = the_cookie(r, viewer)
    assert watcher.value != morsel.value
    assert viewer.auth.session_role(watcher.value) == "view"
    assert viewer.auth.session_role(morsel.value) == "control"
    # A made-up cookie, another port's, or the right one sent under another name: refused.
    # (The made-up one changes the first character, whatever it was: a fixed "x" was the real
    # cookie whenever the token began with "x", one run in 64.)
    altered = ("y" if morsel.value[0] == "x" else "x") + morsel.value[1:]
    for forged in (f"{morsel.key}={altered}", f"universe-remote-viewer-1={morsel.value}"):
        async with http.get(base + FILES[0], headers={"Cookie": forged}) as r:
            assert r.status == 401


async def test_a_session_expires_after_it_was_last_used(
    start_viewer: Any, http: aiohttp.ClientSession
) -> None:
    viewer = await start_viewer(password=PASSWORD)
    base = f"http://127.0.0.1:{viewer.port}"
    async with http.get(f"{base}/viewer/", headers=basic(PASSWORD)) as r:
        morsel = the_cookie(r, viewer)
    cookie = {"Cookie": f"{morsel.key}={morsel.value}"}
    now = viewer.auth.clock()
    viewer.auth.clock = lambda: now + SESSION_LIFETIME * 0.9
    async with http.get(base + FILES[0], headers=cookie) as r:
        assert r.status == 200  # used: good for another SESSION_LIFETIME from here
    viewer.auth.clock = lambda: now + SESSION_LIFETIME * 1.8
    async with http.get(base + FILES[0], headers=cookie) as r:
        assert r.status == 200
    viewer.auth.clock = lambda: now + SESSION_LIFETIME * 3
    async with http.get(base + FILES[0], headers=cookie) as r:
        assert r.status == 401 and "expired" in await r.text()


async def test_without_a_password_loopback_needs_no_cookie(
    start_viewer: Any, http: aiohttp.ClientSession
) -> None:
    viewer = await start_viewer()
    base = f"http://127.0.0.1:{viewer.port}"
    async with http.get(f"{base}/viewer/") as r:
        assert r.status in (200, 503)  # 503: the page says noVNC is missing
        assert "Set-Cookie" not in r.headers
    for path in FILES:
        async with http.get(base + path) as r:
            assert r.status == 200


def test_sessions_are_random_and_capped() -> None:
    auth = ViewerAuth(PASSWORD)
    first = auth.open_session("control")
    assert len(first) >= 40 and auth.open_session("control") != first
    for _ in range(MAX_SESSIONS):
        auth.open_session("view")
    assert auth.session_role(first) is None  # the least recently used went first
    assert len(auth._sessions) == MAX_SESSIONS
    assert auth.session_role(None) is None and auth.session_role("") is None


# https ------------------------------------------------------------------------------------


async def test_the_viewer_over_https_serves_the_page_its_files_and_its_websocket(
    start_viewer: Any, certs: Certs
) -> None:
    viewer = await start_viewer(password=PASSWORD, tls=certs.server().context)
    base = f"https://127.0.0.1:{viewer.port}"
    connector = aiohttp.TCPConnector(ssl=client_context(certs.ca))
    async with aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar()
    ) as https:
        async with https.get(f"{base}/viewer/?password={PASSWORD}") as r:
            assert r.status in (200, 503)
            morsel = the_cookie(r, viewer)
        assert morsel.key == f"__Host-universe-remote-viewer-{viewer.port}"
        assert morsel["secure"] and morsel["httponly"] and morsel["samesite"] == "Strict"
        cookie = {"Cookie": f"{morsel.key}={morsel.value}"}
        async with https.get(base + FILES[0], headers=cookie) as r:
            assert r.status == 200
        async with https.get(f"{base}/viewer/session", headers=cookie) as r:
            websocket = (await r.json())["websocket"]
        rfb = await RFBOverWebSocket.open(https, f"wss://127.0.0.1:{viewer.port}/viewer/{websocket}")
        try:
            assert rfb.security == SecurityType.NONE and rfb.proto.name == "tls-test"
            assert rfb.ws.get_extra_info("ssl_object") is not None
            frame = await rfb.frame()
            assert frame.shape == (48, 64, 3)
        finally:
            await rfb.close()
    # Nothing in clear (a 400 saying so), and a client that does not trust the CA is refused.
    async with aiohttp.ClientSession() as plain:
        async with plain.get(f"http://127.0.0.1:{viewer.port}/viewer/") as r:
            assert r.status == 400 and "this port speaks https:// (TLS)" in await r.text()
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with plain.get(f"{base}/viewer/", ssl=ssl.create_default_context()):
                pass
