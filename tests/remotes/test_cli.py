"""The universe-remote command, run as a real subprocess."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Final

from tests.wire import WireClient

CLI = [sys.executable, "-m", "universe_remote"]
#: Seconds ``watch`` may take to give up on a port nothing listens on (its connect retries
#: for 30 s; the refusal is certain in well under a second, a loaded machine aside).
WATCH_GIVES_UP: Final = 20.0


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)


def test_list_prints_the_builtin_env_ids() -> None:
    result = run("list")
    assert result.returncode == 0
    ids = [line.split()[0] for line in result.stdout.splitlines()]
    assert {"builtin.Catch-v0", "builtin.ClickTarget-v0"} <= set(ids)


def test_serve_refuses_a_public_host_without_password() -> None:
    result = run("serve", "builtin.Catch-v0", "--host", "0.0.0.0")
    assert result.returncode == 2
    assert "--password" in result.stderr and "UNIVERSE_REMOTE_PASSWORD" in result.stderr


def test_serve_unknown_env_names_the_closest_ones() -> None:
    result = run("serve", "builtin.Cacth-v0", "--rewarder-port", "0")
    assert result.returncode == 2
    assert "builtin.Cacth-v0" in result.stderr and "builtin.Catch-v0" in result.stderr
    assert "universe-remote list" in result.stderr and "atari.Pong-v0" not in result.stderr


def test_help_names_every_option() -> None:
    result = run("serve", "--help")
    for option in ("--host", "--rewarder-port", "--vnc-port", "--password", "--fps"):
        assert option in result.stdout


async def test_serve_then_sigterm_closes_clients_cleanly() -> None:
    proc = await asyncio.create_subprocess_exec(
        *CLI, "serve", "builtin.Catch-v0", "--rewarder-port", "0", "--vnc-port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            while not (match := re.search(rb"ws://127\.0\.0\.1:(\d+)", await proc.stdout.readline())):
                pass
        client = await WireClient.open(int(match.group(1)))
        assert (await client.recv())["method"] == "v0.env.describe"
        proc.send_signal(signal.SIGTERM)
        close = await client.recv_until("v0.connection.close")
        assert "shutting down" in close["body"]["message"]
        async with asyncio.timeout(30):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_version_is_one_line_however_narrow_the_terminal() -> None:
    """argparse's version action wrapped the line to the terminal, mid-phrase."""
    result = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": "40"})
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 1 and "openenv http 1.0.0 + ws)" in result.stdout


def test_play_stopped_with_ctrl_c_prints_its_summary() -> None:
    """SIGINT once play has stepped (its first progress line): the summary of what was
    played still comes, and the command exits 130."""
    player = subprocess.Popen([*CLI, "play", "builtin.Catch-v0", "--agent", "noop"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert player.stdout is not None
        for line in player.stdout:
            if line.startswith("step "):
                break
        else:
            raise AssertionError(f"play printed no progress: {player.stderr.read()}")  # type: ignore[union-attr]
        player.send_signal(signal.SIGINT)
        rest, errors = player.communicate(timeout=60)
    finally:
        if player.poll() is None:
            player.kill()
            player.wait()
    assert player.returncode == 130, errors
    assert re.search(r"^stopped \(Ctrl-C\): \d+ steps x 1 remote\(s\) in [\d.]+ s", rest, re.M), rest


def test_watch_where_nothing_listens_says_so_at_once() -> None:
    """As RemoteEnv does (remotes.listening): a loopback port that refuses, with no remote
    starting here, is an error in about a second, not after 30 s of retries."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # free once closed: nothing listens there
    started = time.monotonic()
    result = subprocess.run([*CLI, "watch", f"127.0.0.1::{port}"], capture_output=True, text=True,
                            timeout=WATCH_GIVES_UP)
    assert time.monotonic() - started < WATCH_GIVES_UP
    assert result.returncode == 1
    assert f"cannot watch 127.0.0.1::{port}: nothing listens on 127.0.0.1 port {port}" in result.stderr
    assert "start it first (make run, or universe-remote serve ENV_ID)" in result.stderr
