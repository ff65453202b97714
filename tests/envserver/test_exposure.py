"""Who ``serve`` lets reach a remote: the non-loopback policy (a password always, TLS or
``--insecure``), the TLS flags checked before anything binds, the banner's schemes, and
``health --tls-ca``.

Nothing here binds anything but 127.0.0.1: the policy is a function, and the command's
refusals happen before ``envserver.games.run`` (replaced by a stub that records the
configuration it was given).
"""

from __future__ import annotations

import argparse
import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from envserver import cli as server_cli, games
from envserver.banner import banner
from envserver.cli import serve_config
from envserver.config import ServeConfig, exposure_refusal
from rewarder.server import RewarderServer
from rewarder.tls import CA_ENV, CERT_ENV, KEY_ENV, ServerTLS
from tests.tls import Certs, certs_fixture, other_ca_fixture, tls_rewarder_fixture  # noqa: F401
from universe_remote.cli import build_parser, main

ELSEWHERE = ("0.0.0.0", "::", "192.0.2.7", "remote.example")  # never bound: refused or stubbed


@pytest.mark.parametrize("host", ELSEWHERE)
def test_off_loopback_needs_a_password_and_tls_or_insecure(host: str) -> None:
    no_password = exposure_refusal(host, password=None, tls=True, insecure=True)
    assert no_password is not None and "without a password" in no_password and "--password" in no_password
    in_clear = exposure_refusal(host, password="pw", tls=False, insecure=False)
    assert in_clear is not None and f"refusing to serve on {host} in clear" in in_clear
    assert "--tls-cert CERT --tls-key KEY" in in_clear and "--insecure" in in_clear
    assert CERT_ENV in in_clear and "docs/security.md" in in_clear
    assert exposure_refusal(host, password="pw", tls=True, insecure=False) is None
    assert exposure_refusal(host, password="pw", tls=False, insecure=True) is None


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_needs_neither(host: str) -> None:
    assert exposure_refusal(host, password=None, tls=False, insecure=False) is None


class Served:
    """Stands in for ``envserver.games.run``: records the call instead of binding."""

    def __init__(self) -> None:
        self.calls: list[tuple[ServeConfig, ServerTLS | None]] = []

    def __call__(self, config: ServeConfig, tls: ServerTLS | None = None) -> int:
        self.calls.append((config, tls))
        return 0


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Served:
    stub = Served()
    monkeypatch.setattr(games, "run", stub)
    for name in (CERT_ENV, KEY_ENV, "UNIVERSE_REMOTE_PASSWORD", "UNIVERSE_REMOTE_PASSWORD_FILE"):
        monkeypatch.delenv(name, raising=False)
    return stub


def serve(*args: str) -> int:
    return main(["serve", "builtin.Catch-v0", *args])


def test_serve_refuses_off_loopback_in_clear_before_binding(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    assert serve("--host", "0.0.0.0", "--password", "pw") == 2
    err = capsys.readouterr().err
    assert "refusing to serve on 0.0.0.0 in clear" in err and "--insecure" in err
    assert serve("--host", "0.0.0.0", "--tls-cert", "x.pem", "--tls-key", "x.key") == 2
    assert "without a password" in capsys.readouterr().err
    assert served.calls == []


def test_insecure_lets_it_start_in_clear_with_a_password(served: Served) -> None:
    assert serve("--host", "0.0.0.0", "--password", "pw", "--insecure") == 0
    ((config, tls),) = served.calls
    assert config.host == "0.0.0.0" and config.insecure and tls is None


def test_tls_flags_and_environment_load_the_certificate_once(
    served: Served, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert serve("--host", "0.0.0.0", "--password", "pw",
                 "--tls-cert", str(certs.cert), "--tls-key", str(certs.key)) == 0
    monkeypatch.setenv(CERT_ENV, str(certs.cert))
    monkeypatch.setenv(KEY_ENV, str(certs.key))
    assert serve("--host", "0.0.0.0", "--password", "pw") == 0
    for _, tls in served.calls:
        assert tls is not None and tls.cert == certs.cert and tls.key == certs.key
        assert b"BEGIN CERTIFICATE" in tls.cert_pem and b"PRIVATE KEY" in tls.key_pem


def test_bad_tls_files_stop_serve_before_it_binds(
    served: Served, certs: Certs, other_ca: Certs, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.pem"
    assert serve("--tls-cert", str(missing), "--tls-key", str(certs.key)) == 2
    assert f"the TLS certificate {missing} does not exist" in capsys.readouterr().err
    assert serve("--tls-cert", str(certs.cert), "--tls-key", str(other_ca.key)) == 2
    assert "is not the key of the certificate" in capsys.readouterr().err
    assert serve("--tls-cert", str(certs.cert)) == 2
    assert "--tls-cert needs --tls-key too" in capsys.readouterr().err
    assert serve("--tls-key", str(certs.key)) == 2
    assert "--tls-key needs --tls-cert too" in capsys.readouterr().err
    assert served.calls == []


def fake_remote(tls: ServerTLS | None, viewer: bool = True) -> Any:
    return SimpleNamespace(
        tls=tls, rewarder=SimpleNamespace(port=15901), vnc_port=5901,
        viewer=SimpleNamespace(port=8901) if viewer else None, dm_env_rpc=SimpleNamespace(port=16001),
        runtime=SimpleNamespace(env_id="builtin.Catch-v0", width=160, height=210), fps=60.0,
    )


def test_the_banner_prints_each_ports_scheme_and_how_to_connect(certs: Certs) -> None:
    config = serve_config(build_parser(agent=False).parse_args(
        ["serve", "builtin.Catch-v0", "--password", "pw"]))
    plain = banner(config, fake_remote(None))
    assert "ws://127.0.0.1:15901" in plain and "http://127.0.0.1:8901/viewer/" in plain
    assert "vncviewer 127.0.0.1:1" in plain and "vnc://127.0.0.1:5901+15901" in plain
    assert "wss://" not in plain and "X509" not in plain
    tls = banner(config, fake_remote(certs.server()))
    assert "wss://127.0.0.1:15901" in tls and "https://127.0.0.1:8901/viewer/" in tls
    assert "vncviewer -SecurityTypes X509Vnc -X509CA CA.pem 127.0.0.1:1" in tls
    assert "vnc+tls://127.0.0.1:5901+15901?password=<password>" in tls
    assert "gRPC with TLS" in tls and f"TLS with {certs.cert}" in tls and CA_ENV in tls
    no_password = dataclasses.replace(config, password=None)
    assert "-SecurityTypes X509None" in banner(no_password, fake_remote(certs.server()))


def health_args(*args: str) -> argparse.Namespace:
    return build_parser(agent=False).parse_args(["health", "--timeout", "5", *args])


async def test_health_checks_a_tls_remote_with_its_ca(
    tls_rewarder: RewarderServer, certs: Certs, other_ca: Certs, capsys: pytest.CaptureFixture[str]
) -> None:
    port = str(tls_rewarder.port)
    assert await server_cli._health(health_args("--rewarder-port", port, "--tls-ca", str(certs.ca))) == 0
    assert "healthy: test.Fake-v0" in capsys.readouterr().out
    assert await server_cli._health(health_args("--rewarder-port", port, "--tls-ca", str(other_ca.ca))) == 1
    err = capsys.readouterr().err
    assert f"certificate of 127.0.0.1:{port} not trusted" in err and "pass --tls-ca CA.pem" in err
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(CERT_ENV, raising=False)
        assert await server_cli._health(health_args("--rewarder-port", port)) == 1  # in clear
        assert "serves TLS" in capsys.readouterr().err
        # Inside the container: the certificate serve uses is the one to expect.
        patch.setenv(CERT_ENV, str(certs.cert))
        assert await server_cli._health(health_args("--rewarder-port", port)) == 0
        patch.setenv(CERT_ENV, str(other_ca.cert))  # another certificate: refused
        assert await server_cli._health(health_args("--rewarder-port", port)) == 1
        assert "not trusted" in capsys.readouterr().err
