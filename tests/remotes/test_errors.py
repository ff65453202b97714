"""What a user sees when something is wrong: the specific cause once, and the fix; the
generic "is it running?" only when nothing said why (issue 10/10's first-hour list)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Final

import pytest

from remotes import RemoteEnv, session as session_module, start_local
from remotes.local import LocalRemotes
from remotes.session import RemoteUnavailable

PASSWORD: Final = "err-pw"
#: The generic hint, for remotes that did not say why.
GENERIC: Final = "Is it running"


@pytest.fixture(scope="module")
def guarded() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 1, password=PASSWORD) as local:
        yield local


def _address(local: LocalRemotes) -> str:
    return local.address.split("?")[0]  # without the password the address may carry


def test_a_wrong_password_says_so_without_the_generic_hint(guarded: LocalRemotes) -> None:
    with pytest.raises(RemoteUnavailable) as caught:
        RemoteEnv(_address(guarded), password="nope", start_timeout=5)
    message = str(caught.value)
    assert "wrong password" in message and GENERIC not in message  # VNC's or the rewarder's words


def test_a_busy_remote_says_so_without_the_generic_hint(guarded: LocalRemotes) -> None:
    env = RemoteEnv(_address(guarded), password=PASSWORD)
    try:
        other = subprocess.run(
            [sys.executable, "-c", "from remotes import RemoteEnv; "
             f"RemoteEnv({_address(guarded)!r}, password={PASSWORD!r}, start_timeout=5)"],
            capture_output=True, text=True, timeout=60,
        )
        last = other.stderr.strip().splitlines()[-1]
        assert "busy" in last and "openai-observer" in last and GENERIC not in last
    finally:
        env.close()


def test_nothing_listening_is_told_what_to_check_once() -> None:
    # On loopback with nothing starting there, at once (remotes/listening.py).
    with pytest.raises(RemoteUnavailable, match="nothing listens on 127.0.0.1 ports 1 and 2") as caught:
        RemoteEnv("vnc://127.0.0.1:1+2", start_timeout=0.5)
    assert GENERIC not in str(caught.value)  # its own advice, not a second one


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "universe_remote", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_mistyped_id_is_one_line_naming_the_closest() -> None:
    for command in (["play", "builtin.catch-v0", "--steps", "1"], ["serve", "builtin.catch-v0"]):
        done = _cli(*command)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, done.stderr
        assert len(lines) == 1 and "did you mean builtin.Catch-v0" in lines[0], done.stderr
        assert "Traceback" not in done.stderr


def test_health_without_the_password_suggests_the_option(guarded: LocalRemotes) -> None:
    port = _address(guarded).rpartition("+")[2]
    done = _cli("health", "--rewarder-port", port, "--timeout", "5")
    assert done.returncode == 1 and "pass --password" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_swapped_ports_are_named_at_once(guarded: LocalRemotes) -> None:
    vnc, rewarder = _address(guarded).removeprefix("vnc://127.0.0.1:").split("+")
    started = time.monotonic()
    with pytest.raises(RemoteUnavailable, match="ports swapped") as caught:
        RemoteEnv(f"vnc://127.0.0.1:{rewarder}+{vnc}", password=PASSWORD, start_timeout=20)
    assert time.monotonic() - started < 5  # not after the start timeout
    assert GENERIC not in str(caught.value)


def test_waiting_for_a_remote_says_so_while_it_waits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(session_module, "WAIT_REPORT_INTERVAL", 0.2)
    caplog.set_level("WARNING", logger=session_module.__name__)
    # Ports that accept and never answer (a stopped remote): refused ones fail at once.
    with socket.create_server(("127.0.0.1", 0)) as vnc, socket.create_server(("127.0.0.1", 0)) as rewarder:
        with pytest.raises(RemoteUnavailable):
            RemoteEnv(f"vnc://127.0.0.1:{vnc.getsockname()[1]}+{rewarder.getsockname()[1]}",
                      start_timeout=1)
    waiting = [r.getMessage() for r in caplog.records if "waiting for remote" in r.getMessage()]
    assert waiting and "VNC and rewarder not answering yet" in waiting[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
