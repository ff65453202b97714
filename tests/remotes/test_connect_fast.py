"""Connecting to nothing on loopback fails at once, and a mistyped ``env_id=`` is caught
when the env is made (issue 29, item 6); remotes that are still starting are waited for
as before (remotes/listening.py says when an env may give up at once)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from remotes import RemoteEnv, RemoteVectorEnv, listening, start_local
from remotes.listening import serving_ports, starting_here
from remotes.local import LocalRemotes
from remotes.options import check_env_id
from remotes.session import RemoteUnavailable
from runtimes.errors import UnknownEnvironment

#: Seconds a refused first connect may take (before: start_timeout, 30 s by default).
FAIL_FAST_WITHIN: Final = 5.0
#: start_timeout of the envs here: long enough that waiting it out cannot pass as fast.
START_TIMEOUT: Final = 30.0


def free_ports(n: int) -> list[int]:
    """Ports nothing listens on (bound for a moment by the kernel's choice, then freed)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def catch() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0") as local:
        yield local


def test_nothing_listening_on_loopback_fails_at_once_saying_so() -> None:
    vnc, rewarder = free_ports(2)
    started = time.monotonic()
    with pytest.raises(RemoteUnavailable) as caught:
        RemoteEnv(f"vnc://127.0.0.1:{vnc}+{rewarder}", start_timeout=START_TIMEOUT)
    assert time.monotonic() - started < FAIL_FAST_WITHIN
    message = str(caught.value)
    assert "nothing listens on 127.0.0.1 ports" in message and "universe-remote serve" in message


def test_a_vector_env_names_each_remote_that_is_not_there(catch: LocalRemotes) -> None:
    vnc, rewarder = free_ports(2)
    started = time.monotonic()
    with pytest.raises(RemoteUnavailable, match="1 of 2 remotes did not answer.*nothing listens"):
        RemoteVectorEnv([catch.address, f"vnc://127.0.0.1:{vnc}+{rewarder}"],
                        password=catch.password, start_timeout=START_TIMEOUT)
    assert time.monotonic() - started < FAIL_FAST_WITHIN


def test_a_remote_still_starting_is_waited_for(tmp_path: Path) -> None:
    vnc, rewarder = free_ports(2)
    serve = subprocess.Popen(
        [sys.executable, "-m", "universe_remote", "serve", "builtin.Catch-v0",
         "--vnc-port", str(vnc), "--rewarder-port", str(rewarder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        assert starting_here([vnc, rewarder]), "the serve process is not seen"
        env = RemoteEnv(f"vnc://127.0.0.1:{vnc}+{rewarder}", start_timeout=START_TIMEOUT)
        env.close()
    finally:
        serve.terminate()
        serve.wait(START_TIMEOUT)


def test_which_command_lines_start_a_remote_on_which_ports() -> None:
    floating = serving_ports(["universe-remote", "serve", "builtin.Catch-v0"])
    assert floating is not None and {5900, 5901, 15900, 15999} <= floating and 6000 not in floating
    assert serving_ports(["/v/bin/python", "-m", "universe_remote", "serve", "x", "--vnc-port", "5905"]) == {
        5905, 15905}
    assert serving_ports(["universe-remote", "replay", "d", "--vnc-port=7000", "--rewarder-port=7001"]) == {
        7000, 7001}
    free = ["--vnc-port", "0", "--rewarder-port", "0"]
    assert serving_ports(["universe-remote", "serve", "x", *free]) == set()
    assert serving_ports(["make", "run"]) == floating
    assert serving_ports(["universe-remote", "play", "x"]) is None
    assert serving_ports(["vim", "serve"]) is None


def test_a_mistyped_env_id_is_refused_when_the_env_is_made(catch: LocalRemotes) -> None:
    with pytest.raises(UnknownEnvironment, match="did you mean builtin.Catch-v0"):
        RemoteEnv(catch.address, password=catch.password, env_id="builtin.Cach-v0")
    with pytest.raises(UnknownEnvironment, match="did you mean builtin.Catch-v0"):
        RemoteVectorEnv(catch.address, password=catch.password, env_id="builtin.Catch-v1")
    env = RemoteEnv(catch.address, password=catch.password, env_id="builtin.Catch-v0")
    env.close()


def test_an_env_id_the_remote_serves_passes_though_this_install_lacks_it() -> None:
    check_env_id("private.Game-v0", ["private.Game-v0"])
    check_env_id("atari.Pong-v0", [])  # known here, whether or not ale-py is installed
    with pytest.raises(UnknownEnvironment):
        check_env_id("private.Game-v1", ["private.Game-v0"])


def test_a_serve_caught_inside_execve_is_still_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Popen returns once the child's exec has begun; its arguments come a moment later
    (CI saw an empty command line on a loaded machine). A kernel thread (no executable)
    is not waited for."""
    own_net = os.readlink("/proc/self/ns/net")
    (tmp_path / "self" / "ns").mkdir(parents=True)
    (tmp_path / "self" / "ns" / "net").symlink_to(own_net)
    for pid, exe in (("41", sys.executable), ("2", None)):
        (tmp_path / pid / "ns").mkdir(parents=True)
        (tmp_path / pid / "ns" / "net").symlink_to(own_net)
        (tmp_path / pid / "cmdline").write_bytes(b"")
        if exe:
            (tmp_path / pid / "exe").symlink_to(exe)
    argv = ["python", "-m", "universe_remote", "serve", "x", "--vnc-port", "5907"]
    waits: list[float] = []

    def exec_completes(seconds: float) -> None:
        waits.append(seconds)
        (tmp_path / "41" / "cmdline").write_bytes("\0".join(argv).encode() + b"\0")

    monkeypatch.setattr(listening.time, "sleep", exec_completes)
    assert starting_here([5907], proc=tmp_path) == [f"41: {' '.join(argv)}"]
    assert len(waits) == 1
