"""The agent side of TLS remotes: ``vnc+tls://`` addresses, ``tls_ca=``, both channels
verifying the remote's certificate, and a gymnasium env stepping a remote served with
``--tls-cert/--tls-key`` (real processes on 127.0.0.1, certificates made by trustme)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import gymnasium
import numpy as np
import pytest

from remotes import RemoteEnv, start_local
from remotes.address import AddressError, RemoteAddress, format_remotes, parse_remotes, tls_context
from remotes.local import LocalRemotes
from remotes.session import RemoteSession, RemoteUnavailable
from rewarder.server import RewarderServer
from rewarder.tls import CA_ENV, client_context
from tests.tls import Certs, certs_fixture, other_ca_fixture, tls_rewarder_fixture  # noqa: F401

# Addresses --------------------------------------------------------------------------------


def test_vnc_tls_addresses() -> None:
    remotes, password = parse_remotes("vnc+tls://10.0.0.1:5900+15900,h2:5901+15901?password=pw")
    assert remotes == [RemoteAddress("10.0.0.1", 5900, 15900, tls=True),
                       RemoteAddress("h2", 5901, 15901, tls=True)]
    assert password == "pw"
    assert str(remotes[0]) == "vnc+tls://10.0.0.1:5900+15900" and remotes[0].entry == "10.0.0.1:5900+15900"
    assert parse_remotes(format_remotes(remotes, "pw")) == (remotes, "pw")
    # A list may mix them, each string with its scheme; one string cannot.
    mixed, _ = parse_remotes(["vnc+tls://a:1+2", "vnc://b:3+4", "c:5+6"])
    assert [r.tls for r in mixed] == [True, False, False]
    with pytest.raises(AddressError, match="cannot mix TLS and plain"):
        format_remotes(mixed)
    with pytest.raises(AddressError, match="vnc\\+tls://host:5900\\+15900 for a remote served with TLS"):
        parse_remotes("vncs://a:1+2")
    with pytest.raises(AddressError, match="different passwords"):
        parse_remotes(["vnc+tls://a:1+2?password=x", "vnc://b:3+4?password=y"])


def test_tls_ca_needs_a_tls_address(certs: Certs) -> None:
    plain = [RemoteAddress("127.0.0.1", 1, 2)]
    assert tls_context(plain, None) is None
    with pytest.raises(ValueError, match="no remote in the address serves TLS: write vnc\\+tls://"):
        tls_context(plain, certs.ca)
    with pytest.raises(ValueError, match="no remote in the address serves TLS"):
        RemoteEnv("vnc://127.0.0.1:1+2", tls_ca=certs.ca, start_timeout=0.5)
    context = tls_context([RemoteAddress("127.0.0.1", 1, 2, tls=True)], certs.ca)
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED


# The rewarder channel of a session (needs no VeNCrypt) ------------------------------------------


async def test_a_session_dials_wss_and_verifies_the_certificate(
    tls_rewarder: RewarderServer, certs: Certs, other_ca: Certs
) -> None:
    address = RemoteAddress("127.0.0.1", None, tls_rewarder.port, tls=True)
    session = RemoteSession(address, tls=client_context(certs.ca), start_timeout=5.0)
    await session.connect()
    try:
        assert session.rewarder is not None and session.rewarder.url.startswith("wss://")
        assert session.rewarder.describe.env_id == "test.Fake-v0"
    finally:
        await session.close()
    stranger = RemoteSession(address, tls=client_context(other_ca.ca), start_timeout=30.0)
    with pytest.raises(RemoteUnavailable) as refused:
        await stranger.connect()
    message = str(refused.value)
    assert f"certificate of 127.0.0.1:{tls_rewarder.port} not trusted" in message
    assert "pass tls_ca=" in message and CA_ENV in message
    assert "Is it running" not in message  # the reason is known: no generic hint


# End to end: a remote served with --tls-cert/--tls-key ------------------------------------------


@pytest.fixture(scope="module")
def tls_catch(certs: Certs) -> Iterator[LocalRemotes]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CA_ENV, str(certs.ca))  # start_local's readiness probe verifies too
        local = start_local(
            "builtin.Catch-v0", 1, password="s3cret",
            extra_args=["--tls-cert", str(certs.cert), "--tls-key", str(certs.key)],
        )
    with local:
        yield local


def test_remote_env_steps_catch_over_tls(tls_catch: LocalRemotes, certs: Certs) -> None:
    (address,) = tls_catch.addresses
    assert address.tls and str(address).startswith("vnc+tls://127.0.0.1:")
    env = RemoteEnv(address, "s3cret", tls_ca=certs.ca, start_timeout=30.0)
    try:
        obs, _ = env.reset(seed=1)
        assert obs.shape == (210, 160, 3) and obs.any()
        total = 0.0
        for _ in range(30):
            obs, reward, terminated, truncated, info = env.step([("KeyEvent", "Left", True)])
            total += float(reward)
            assert "remote.error" not in info
        assert obs.shape == (210, 160, 3) and np.isfinite(total)

        async def channels() -> tuple[str, object]:
            session = env.session
            assert session.rewarder is not None and session.vnc is not None
            return session.rewarder.url, session.vnc
        url, _ = env.loop.run(channels())
        assert url.startswith("wss://127.0.0.1:")
        assert env.spec is not None and env.spec.kwargs["address"].startswith("vnc+tls://")
        assert env.spec.kwargs["tls_ca"] == str(certs.ca)
    finally:
        env.close()


def test_gymnasium_make_takes_tls_ca_and_a_wrong_ca_is_named(
    tls_catch: LocalRemotes, certs: Certs, other_ca: Certs
) -> None:
    address = f"{tls_catch.addresses[0]}?password=s3cret"
    env = gymnasium.make("universe-remote/builtin.Catch-v0", remotes=address, tls_ca=str(certs.ca))
    try:
        env.reset(seed=0)
        env.step(0)
    finally:
        env.close()
    with pytest.raises(RemoteUnavailable, match="not trusted.*pass tls_ca="):
        RemoteEnv(address, tls_ca=other_ca.ca, start_timeout=30.0)
    # In clear, the TLS remote answers nothing an agent could use, and says why.
    plain = address.replace("vnc+tls://", "vnc://")
    with pytest.raises(RemoteUnavailable, match="serves TLS"):
        RemoteEnv(plain, start_timeout=30.0)
