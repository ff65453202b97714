"""Fixtures shared by the test tree: remotes on 127.0.0.1 with free ports."""

from __future__ import annotations

import os
import signal
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Final

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# What remotes cost under the suite's load stays the suite's (remotes/capacity.py caches
# CPU per frame for start_local; this machine's own cache is left alone).
os.environ.setdefault(
    "UNIVERSE_REMOTE_CAPACITY_CACHE",
    os.path.join(tempfile.gettempdir(), f"universe-remote-tests-frame-cpu-{os.getpid()}.json"),
)

# A suite started from a script that ignores SIGINT (nohup, `cmd &` in a non-interactive
# shell) would pass SIG_IGN to every child, and the Ctrl-C tests' children would never see
# their Ctrl-C. Python's own handler here makes children start with the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from envserver.remote import Remote  # noqa: E402

StartRemote = Callable[..., Awaitable[Remote]]


def pytest_collection_finish(session: pytest.Session) -> None:
    """When the MCP SDK majors' test is to run, start building its environments now, in
    the background (a cold build is a minute or two of pip: CI's whole budget is 20)."""
    if any("test_mcp_sdk_majors" in item.nodeid for item in session.items):
        from tests.sdk_venv import prebuild

        prebuild()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Parametrized tests naming an env id whose family is not installed skip (with the
    registry's install hint) instead of failing to start it."""
    from tests.optional import skip_missing_env_params

    for item in items:
        skip_missing_env_params(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """In CI nothing optional may be missing: a skipped test fails the run."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every optional part is installed: {report.longrepr}"


#: The ports a remote of `make run` (or the README's examples) holds: no test may need them.
DEFAULT_PORTS: Final = (5900, 15900, 16000, 8900, 8800, 8700)


@pytest.fixture(scope="session", autouse=True)
def default_ports_taken() -> Iterator[None]:
    """In CI, hold the default ports for the whole run, as a remote from `make run` would:
    a test that binds a fixed port fails there, not on a user's machine. (Not elsewhere: a
    `make run` started while the tests run must get its ports.)"""
    held = []
    for port in DEFAULT_PORTS if os.environ.get("CI") == "true" else ():
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            held.append(sock)
        except OSError:  # taken already, by a real remote: just as good
            sock.close()
    yield
    for sock in held:
        sock.close()


@pytest.fixture
async def start_remote() -> AsyncIterator[StartRemote]:
    """``await start_remote(env_id, **kwargs)``: a running remote, closed after the test."""
    started: list[Remote] = []

    async def start(env_id: str = "builtin.Catch-v0", **kwargs: object) -> Remote:
        remote = Remote(env_id, **kwargs)  # type: ignore[arg-type]
        await remote.start("127.0.0.1", 0, 0)
        started.append(remote)
        return remote

    yield start
    for remote in started:
        await remote.close()
