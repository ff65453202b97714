"""Certificates made at test time (trustme), never committed: a CA and a certificate for
127.0.0.1 and localhost signed by it, written to PEM files as ``serve --tls-cert/--tls-key``
and ``tls_ca=`` take them, and a second CA that trusts none of them.

Import the fixtures into a test module:
``from tests.tls import certs_fixture, other_ca_fixture  # noqa: F401``; also
``tls_rewarder_fixture``: a rewarder (of a fake env) serving ``wss://`` with ``certs``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from rewarder.server import RewarderServer
from rewarder.tls import ServerTLS, server_tls
from tests.rewarder.test_client import FakeEnv

#: The names agents on this machine dial: the certificate covers them.
NAMES = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Certs:
    """A CA's PEM file, and a certificate + key it issued for :data:`NAMES`."""

    ca: Path
    cert: Path
    key: Path

    def server(self) -> ServerTLS:
        return server_tls(self.cert, self.key)


def make_certs(directory: Path, names: tuple[str, ...] = NAMES) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="universe-remote tests")
    issued = ca.issue_cert(*names)
    certs = Certs(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    ca.cert_pem.write_to_path(str(certs.ca))
    issued.private_key_pem.write_to_path(str(certs.key))
    with certs.cert.open("wb") as f:  # the leaf first, then any intermediates
        for pem in issued.cert_chain_pems:
            f.write(pem.bytes())
    return certs


@pytest.fixture(scope="session", name="certs")
def certs_fixture(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session", name="other_ca")
def other_ca_fixture(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """Another CA (with its own certificate): the remote's certificate is not its."""
    return make_certs(tmp_path_factory.mktemp("tls-other"))


@pytest.fixture(name="tls_rewarder")
async def tls_rewarder_fixture(certs: Certs) -> AsyncIterator[RewarderServer]:
    env = FakeEnv()
    server = RewarderServer(env, tls=certs.server().context)
    env.server = server
    await server.start("127.0.0.1", 0)
    yield server
    await server.close("test over")
