"""OpenEnv and MCP sessions on pooled remotes are leases (issue 44): a pool started with
``--openenv --mcp`` (one real-time Catch remote, so every claim gets the same remote),
OpenEnv's own client through :func:`remotes.pool.claim_session`, and the stdio relay
``universe-remote mcp pool://...`` as an MCP host launches it (docs/cluster.md).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from remotes.pool import PoolClient, claim_session, parse_pool
from tests.remotes.pool_process import all_warm, running_pool, wait_for

#: Seconds a lease lives unrenewed in this pool: short, so lapses are quick to see.
DEADLINE = 2.0
CATCH = "builtin.Catch-v0"
#: Seconds an answer may take on a loaded machine (a bound, not a synchronisation).
TIMEOUT = 30.0

pytest.importorskip("openenv")  # OpenEnv's own client (the openenv extra)


def the_remote(client: PoolClient) -> str:
    """The pool's one remote's address, as a claim answers it (released at once)."""
    reply = client.claim(CATCH)
    client.release([reply["lease"]])
    return str(reply["address"])


@pytest.fixture(scope="module")
def pool() -> Iterator[str]:
    with running_pool([CATCH, "--size", "1", "--port", "0", "--deadline", str(DEADLINE), "--nice", "0",
                      "--openenv", "--mcp"]) as address:
        yield address


def test_an_openenv_session_claims_and_releases_and_hears_of_a_lost_lease(pool: str) -> None:
    from openenv.core.generic_client import GenericEnvClient

    client = PoolClient(parse_pool(pool))
    address = the_remote(client)
    wait_for(lambda: all_warm(client), TIMEOUT, "warm again")
    with claim_session(pool, CATCH) as lease:
        assert lease.openenv_url and lease.address == address
        with GenericEnvClient(base_url=lease.openenv_url, headers=lease.headers).sync() as env:
            result = env.reset(seed=0)
            assert result.observation["screen"].startswith("data:image/png")
            env.step({"keys": ["Left"]})
            (held,) = client.status()["leases"]
            assert held["lease"] == lease.lease
    wait_for(lambda: all_warm(client), TIMEOUT, "the released remote warm again")
    assert client.status()["claims"]["lost"] == 0  # released, not lapsed

    # A holder that stops renewing: the pool ends the lease, takes the remote back (ending
    # the session by its client id, seat and all) and the client is told why at its next call.
    lease = claim_session(pool, CATCH)
    try:
        with GenericEnvClient(base_url=lease.openenv_url, headers=lease.headers).sync() as env:
            env.reset(seed=1)
            lease._renewer.cancel()  # the holder goes silent
            wait_for(lambda: all_warm(client), DEADLINE + TIMEOUT, "the lease ended, the remote reset")
            assert "renew" in (lease.check() or "")  # the pool's reason: not renewed in time
            with pytest.raises(RuntimeError, match="a pool took this remote back"):
                env.step({"keys": []})
    finally:
        lease.close()
    assert the_remote(client) == address  # taken back by a reset, not a restart


def test_a_newer_session_with_a_client_id_replaces_the_older(pool: str) -> None:
    """On the remote's OpenEnv and MCP ports, as on its rewarder: the same client id again
    (an agent that reconnected) wins, and the older session is told why."""
    import asyncio

    import aiohttp

    async def both(lease: Any) -> None:
        async with aiohttp.ClientSession(headers=lease.headers) as http:
            url = lease.openenv_url + "/ws"
            async with http.ws_connect(url) as older:
                await older.send_json({"type": "reset", "data": {"seed": 0, "screen": "none"}})
                assert (await older.receive_json(timeout=TIMEOUT))["type"] == "observation"
                async with http.ws_connect(url) as newer:
                    said = await older.receive_json(timeout=TIMEOUT)
                    assert said["type"] == "error", said
                    assert "replaced by a newer connection" in said["data"]["message"], said
                    await newer.send_json({"type": "reset", "data": {"seed": 1, "screen": "none"}})
                    assert (await newer.receive_json(timeout=TIMEOUT))["type"] == "observation"  # it drives
            hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}}
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            ids = []
            for _ in range(2):
                async with http.post(lease.mcp_url, json=hello) as answer:
                    ids.append(answer.headers["Mcp-Session-Id"])
            async with http.post(lease.mcp_url, json=ping, headers={"Mcp-Session-Id": ids[0]}) as gone:
                assert gone.status == 404 and "replaced by a newer connection" in await gone.text()
            async with http.post(lease.mcp_url, json=ping, headers={"Mcp-Session-Id": ids[1]}) as alive:
                assert alive.status == 200

    with claim_session(pool, CATCH, needs=("openenv", "mcp")) as lease:
        asyncio.run(both(lease))


class Relay:
    """``universe-remote mcp pool://...`` as a host launches it: JSON-RPC lines on stdio."""

    def __init__(self, pool: str) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "universe_remote", "mcp", pool, "--env-id", CATCH],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.number = 0
        self.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "test", "version": "0"}})

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.number += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.number, "method": method,
                                          "params": params}).encode() + b"\n")
        self.proc.stdin.flush()
        try:
            answer: dict[str, Any] = json.loads(self.lines.get(timeout=TIMEOUT))
        except queue.Empty:
            gone = self.proc.poll() is not None and self.proc.stderr is not None
            err = self.proc.stderr.read().decode() if gone and self.proc.stderr else ""
            raise AssertionError(f"no answer to {method} within {TIMEOUT} s {err}") from None
        assert answer["id"] == self.number
        return answer

    def tool(self, name: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """(whether it failed, the answer's JSON text, or {"text": ...})."""
        result = self.call("tools/call", {"name": name, "arguments": arguments})["result"]
        text = next(c["text"] for c in result["content"] if c["type"] == "text")
        try:
            said = json.loads(text)
        except json.JSONDecodeError:
            said = {"text": text}
        return bool(result.get("isError")), said

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_an_mcp_session_killed_mid_session_gives_its_remote_back(pool: str) -> None:
    client = PoolClient(parse_pool(pool))
    wait_for(lambda: all_warm(client), TIMEOUT, "warm")
    address = the_remote(client)
    wait_for(lambda: all_warm(client), TIMEOUT, "warm again")
    first = Relay(pool)
    try:
        failed, said = first.tool("computer", {"action": "key", "text": "Left", "screenshot": False})
        assert not failed, said
        failed, first_state = first.tool("state", {})
        assert not failed and first_state["you_drive"] is True, first_state
        (held,) = client.status()["leases"]
        assert held["address"] == address
        first.proc.kill()  # the host's tool process dies: no release, no DELETE
        first.proc.wait(TIMEOUT)
        killed = time.monotonic()
        # Within the pool's deadline (and its reset), not the MCP port's 30 s lease.
        wait_for(lambda: all_warm(client), DEADLINE + 15, "the remote back in the pool")
        assert time.monotonic() - killed < DEADLINE + 15
    finally:
        first.close()
    assert client.status()["claims"]["lost"] >= 1  # lapsed, not released
    second = Relay(pool)
    try:
        failed, state = second.tool("state", {})
        assert not failed, state
        assert state["driver"] is None, state  # the dead session's seat is free
        assert state["episode_id"] != first_state["episode_id"], state  # a new episode: the reset
        failed, said = second.tool("computer", {"action": "key", "text": "Right", "screenshot": False})
        assert not failed, said  # it drives at once
        (now,) = client.status()["leases"]
        assert now["address"] == address  # the same remote, reset, not restarted
        # The lease ends while the relay lives (here: released behind its back): the next
        # call is a tool error naming the lease and why, then the relay is on a new lease.
        client.release([now["lease"]])
        wait_for(lambda: all_warm(client), TIMEOUT, "taken back")
        failed, said = second.tool("computer", {"action": "key", "text": "Left", "screenshot": False})
        assert failed and f"pool lease {now['lease']} ended" in said["text"], said
        assert "the call was not made" in said["text"] and "claimed another remote" in said["text"], said
        failed, said = second.tool("computer", {"action": "key", "text": "Left", "screenshot": False})
        assert not failed, said
        (moved,) = client.status()["leases"]
        assert moved["lease"] != now["lease"]
    finally:
        second.close()
    wait_for(lambda: all_warm(client), TIMEOUT, "released at stdin's end")

