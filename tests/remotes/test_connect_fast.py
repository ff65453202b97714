"""Connecting to nothing on loopback fails at once, and a mistyped ``env_id=`` is caught
when the env is made (issue 29, item 6); remotes that are still starting are waited for
as before (remotes/listening.py says when an env may give up at once)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from remotes import RemoteEnv, RemoteVectorEnv, listening, start_local
from remotes.listening import (
    FLOAT_RANGE,
    REWARDER_BASE,
    VNC_BASE,
    serving_ports,
    settled_ports,
    starting_here,
)
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


def _free_pair(but: int) -> tuple[int, int]:
    """A floating pair (5900+i, 15900+i) nothing listens on, other than pair ``but``."""
    for i in range(FLOAT_RANGE):
        pair = (VNC_BASE + i, REWARDER_BASE + i)
        if i != but and all(_bindable(p) for p in pair):
            return pair
    raise AssertionError("no free floating pair on this machine")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_a_mistyped_floating_port_beside_a_serving_remote_fails_at_once() -> None:
    """A serve naming no ports may take any pair 5900+i/15900+i only until it listens:
    then it has taken its pair, so another refused pair in range fails at once (it
    waited the whole start_timeout beside ``make run``)."""
    serve = subprocess.Popen(
        [sys.executable, "-m", "universe_remote", "serve", "builtin.Catch-v0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        # Before it listens it may take any pair: a connect there is waited for.
        assert starting_here([VNC_BASE + i for i in range(FLOAT_RANGE)]), "the serve is not seen"
        assert serve.stdout is not None
        taken = None
        for line in serve.stdout:  # the banner's agent address says which pair it took
            if found := re.search(r"agent address\s+vnc://127\.0\.0\.1:(\d+)\+(\d+)", line):
                taken = int(found[1]), int(found[2])
                break
        assert taken is not None, "serve printed no agent address"
        assert starting_here([taken[0]]) and starting_here([taken[1]])
        vnc, rewarder = _free_pair(but=taken[0] - VNC_BASE)
        assert not starting_here([vnc, rewarder])
        started = time.monotonic()
        with pytest.raises(RemoteUnavailable, match="nothing listens on 127.0.0.1 ports"):
            RemoteEnv(f"vnc://127.0.0.1:{vnc}+{rewarder}", start_timeout=START_TIMEOUT)
        assert time.monotonic() - started < FAIL_FAST_WITHIN
    finally:
        serve.terminate()
        serve.wait(START_TIMEOUT)


def test_a_floating_serve_keeps_the_pairs_it_took() -> None:
    """Which pairs a floating serve that listens can still serve: its own (and its
    games'), or any while it listens on none of the floating ports."""
    serve = ["universe-remote", "serve", "x"]
    assert settled_ports(serve, [5903, 15903]) == {5903, 15903}
    assert settled_ports(serve, [15907]) == {5907, 15907}  # the rewarder bound first
    assert settled_ports([*serve, "--games", "2"], [5900]) == {5900, 5901, 15900, 15901}
    assert settled_ports(serve, [8900, 16000]) is None  # viewer, dm_env_rpc: not a pair
    assert settled_ports(["make", "run"], []) is None


def test_a_floating_serve_is_waited_for_on_any_pair_until_it_listens(tmp_path: Path) -> None:
    """/proc as the kernel shows it: a portless serve with no listening socket may still
    take any floating pair; once one of its fds is a socket listening on 5903 (in
    /proc/net/tcp), it serves 5903/15903 and no other pair."""
    own_net = os.readlink("/proc/self/ns/net")
    (tmp_path / "self" / "ns").mkdir(parents=True)
    (tmp_path / "self" / "ns" / "net").symlink_to(own_net)
    (tmp_path / "net").mkdir()
    header = "  sl  local_address rem_address st tx_queue rx_queue tr tm->when retrnsmt uid timeout inode\n"
    listen = "   0: 0100007F:170F 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0  0 4242 1\n"
    (tmp_path / "net" / "tcp").write_text(header)
    (tmp_path / "net" / "tcp6").write_text(header)
    pid = tmp_path / "41"
    for folder in ("ns", "fd", "task/41"):
        (pid / folder).mkdir(parents=True)
    (pid / "ns" / "net").symlink_to(own_net)
    (pid / "exe").symlink_to(sys.executable)
    (pid / "task" / "41" / "children").write_text("")
    argv = ["python", "-m", "universe_remote", "serve", "builtin.Catch-v0"]
    (pid / "cmdline").write_bytes("\0".join(argv).encode() + b"\0")
    assert starting_here([5903], proc=tmp_path) and starting_here([5950], proc=tmp_path)
    (pid / "fd" / "3").symlink_to("socket:[4242]")
    assert starting_here([5950], proc=tmp_path)  # the socket is not listening yet
    (tmp_path / "net" / "tcp").write_text(header + listen)  # 0x170F = 5903
    assert starting_here([5903], proc=tmp_path) and starting_here([15903], proc=tmp_path)
    assert not starting_here([5950, 15950], proc=tmp_path)
    # `make run`, whose child is that serve: settled by its child's socket too.
    make = tmp_path / "40"
    for folder in ("ns", "fd", "task/40"):
        (make / folder).mkdir(parents=True)
    (make / "ns" / "net").symlink_to(own_net)
    (make / "exe").symlink_to(sys.executable)
    (make / "cmdline").write_bytes(b"make\0run\0")
    (make / "task" / "40" / "children").write_text("41")
    assert sorted(line.split(":")[0] for line in starting_here([5903], proc=tmp_path)) == ["40", "41"]
    assert not starting_here([5950, 15950], proc=tmp_path)
    (make / "task" / "40" / "children").write_text("")  # still installing: any pair
    assert [line.split(":")[0] for line in starting_here([5950], proc=tmp_path)] == ["40"]
