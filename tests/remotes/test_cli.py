"""The universe-remote command, run as a real subprocess."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys

from tests.wire import WireClient

CLI = [sys.executable, "-m", "universe_remote"]


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
