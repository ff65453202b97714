"""OpenEnv sessions on one remote: one agent drives, a second session is refused
(``CAPACITY_REACHED``, naming who drives) or watches; one agent across the three front ends
(rewarder, dm_env_rpc, OpenEnv); the password (``Authorization: Bearer``, and the
rewarder's Basic) with the failed-password throttle; TLS (``wss://``, ``https://``);
recording; real time. Real remotes (``universe-remote serve`` on 127.0.0.1) and OpenEnv's
own client (``GenericEnvClient``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
import requests
from openenv.core.generic_client import GenericEnvClient

from recordings import open_recording
from rewarder.client import RewarderClient, basic_auth
from rewarder.errors import ConnectionClosed
from tests.envserver.test_openenv import TIMEOUT, Served, keys_of, screen_hash
from tests.tls import Certs, certs_fixture  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(180)

PASSWORD: Final = "oe-pw"
#: Wrong passwords before the remote's throttle blocks an address (rewarder.throttle).
MAX_FAILURES: Final = 5


@pytest.fixture(scope="module")
def catch() -> Iterator[Served]:
    served = Served("builtin.Catch-v0", "--mode", "lockstep")
    yield served
    served.close()


async def test_a_second_session_is_refused_or_watches(catch: Served) -> None:
    async with GenericEnvClient(base_url=catch.url) as agent, \
            GenericEnvClient(base_url=catch.url) as other:
        await agent.reset(seed=4, frameskip=2)
        for refused in (other.reset(seed=1), other.step({"keys": ["Left"]})):
            with pytest.raises(RuntimeError, match=r"an OpenEnv session \(session \d+ from 127\.0\.0\.1\) "
                               r"drives this remote.*reset with observe=true.*CAPACITY_REACHED"):
                await refused
        watching = await other.reset(observe=True, screen="raw")
        assert (await other.state())["role"] == "observer"
        # The watcher's step waits for the first frame past the one it saw last, which the
        # agent's step draws (whichever of the two requests comes in first).
        seen = asyncio.ensure_future(other.step({}))
        stepped = await agent.step({"keys": ["Left"]})
        observed = await asyncio.wait_for(seen, TIMEOUT)
        assert observed.observation["frame"] == stepped.observation["frame"]
        assert stepped.observation["frame"] == watching.observation["frame"] + 2
        assert screen_hash(observed.observation) == screen_hash(stepped.observation)
        with pytest.raises(RuntimeError, match="this session watches"):
            await other.step({"keys": ["Left"]})
        after = await agent.step({"keys": ["Right"]})
        assert after.observation["frame"] == stepped.observation["frame"] + 2
    # The agent left: the seat is free for the next one, and its keys were let go.
    async with GenericEnvClient(base_url=catch.url) as third:
        assert (await third.reset(seed=4)).done is False
        assert (await third.state())["role"] == "agent"


def test_http_reset_and_step_are_refused_while_a_session_drives(catch: Served) -> None:
    with GenericEnvClient(base_url=catch.url).sync() as agent:
        agent.reset(seed=2)
        refused = requests.post(catch.url + "/step", json={"action": {"keys": ["Left"]}}, timeout=TIMEOUT)
        assert refused.status_code == 409 and refused.json()["code"] == "CAPACITY_REACHED"
        assert "drives this remote" in refused.json()["detail"]
        state = requests.get(catch.url + "/state", timeout=TIMEOUT).json()
        assert state["held_by"].startswith("an OpenEnv session")
    assert requests.post(catch.url + "/reset", json={"seed": 2}, timeout=TIMEOUT).status_code == 200


def test_one_agent_across_the_rewarder_and_openenv(catch: Served) -> None:
    with GenericEnvClient(base_url=catch.url).sync() as agent:
        agent.reset(seed=1)
        rewarder = RewarderClient(catch.rewarder, start_timeout=0.5)
        with pytest.raises(ConnectionClosed, match="busy: an OpenEnv session"):
            asyncio.run(rewarder.start())
    async def rewarder_agent_holds() -> None:
        async with RewarderClient(catch.rewarder) as client:
            await client.wait_for_state("running", timeout=TIMEOUT)
            async with GenericEnvClient(base_url=catch.url) as env:
                with pytest.raises(RuntimeError, match="an agent on the rewarder port drives this remote"):
                    await env.reset()
                assert (await env.reset(observe=True)).done is False  # watching is fine
    asyncio.run(rewarder_agent_holds())


def test_one_agent_across_dm_env_rpc_and_openenv() -> None:
    pytest.importorskip("dm_env_rpc")
    import grpc
    from dm_env_rpc.v1 import connection as dm_connection, dm_env_rpc_pb2, error

    served = Served("builtin.Catch-v0", "--mode", "lockstep", "--dm-env-rpc-port", "0")
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{served.dm_port}")
        grpc.channel_ready_future(channel).result(TIMEOUT)
        with dm_connection.Connection(channel) as dm:
            world = dm.send(dm_env_rpc_pb2.CreateWorldRequest()).world_name
            with GenericEnvClient(base_url=served.url).sync() as env:
                env.reset(seed=0)
                with pytest.raises(error.DmEnvRpcError, match="an OpenEnv session .* drives this remote"):
                    dm.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=world))
            dm.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=world))  # it left: free
            with GenericEnvClient(base_url=served.url).sync() as env:
                with pytest.raises(RuntimeError, match="a dm_env_rpc agent .* drives this remote"):
                    env.reset()
            dm.send(dm_env_rpc_pb2.LeaveWorldRequest())
            dm.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))
    finally:
        served.close()


def test_the_password_travels_as_a_bearer_header_and_wrong_ones_are_throttled() -> None:
    served = Served("builtin.Catch-v0", "--mode", "lockstep", "--password", PASSWORD)
    try:
        assert requests.get(served.url + "/health", timeout=TIMEOUT).json() == {"status": "healthy"}
        for headers, words in ((None, "needs a password: send the header 'Authorization: Bearer"),
                               ({"Authorization": "Bearer wrong"}, "wrong password")):
            with GenericEnvClient(base_url=served.url, headers=headers).sync() as env:
                with pytest.raises(RuntimeError, match=f"{words}.*UNAUTHORIZED"):
                    env.reset()
            http = requests.get(served.url + "/schema", headers=headers, timeout=TIMEOUT)
            assert http.status_code == 401 and words in http.json()["detail"]
        bearer = {"Authorization": f"Bearer {PASSWORD}"}
        with GenericEnvClient(base_url=served.url, headers=bearer).sync() as env:
            assert env.reset(seed=1).done is False
        basic = {"Authorization": basic_auth(PASSWORD)}  # the rewarder's header works too
        assert requests.get(served.url + "/metadata", headers=basic, timeout=TIMEOUT).status_code == 200
        # Wrong ones count toward the remote's throttle, shared with every port (a right one
        # starts the count afresh): MAX_FAILURES in a row block the address, right ones too.
        for _ in range(MAX_FAILURES):
            requests.get(served.url + "/state", headers={"Authorization": "Bearer x"}, timeout=TIMEOUT)
        blocked = requests.get(served.url + "/state", headers=bearer, timeout=TIMEOUT)
        assert blocked.status_code == 429 and "blocked for" in blocked.json()["detail"]
        with GenericEnvClient(base_url=served.url, headers=bearer).sync() as env:
            with pytest.raises(RuntimeError, match="too many wrong passwords.*TOO_MANY_ATTEMPTS"):
                env.reset()
    finally:
        served.close()


def test_web_pages_are_refused(catch: Served) -> None:
    page = {"Origin": "https://example.org"}
    refused = requests.post(catch.url + "/reset", json={}, headers=page, timeout=TIMEOUT)
    assert refused.status_code == 401 and "--allow-origin https://example.org" in refused.json()["detail"]


def test_tls(certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    served = Served("builtin.Catch-v0", "--mode", "lockstep", "--tls-cert", str(certs.cert),
                    "--tls-key", str(certs.key))
    try:
        assert served.url.startswith("https://")
        monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))  # websockets' default context trusts it
        with GenericEnvClient(base_url=served.url).sync() as env:
            assert env.step({"keys": ["Left"]}).observation["frame"] > 0
        assert requests.get(served.url + "/health", verify=str(certs.ca), timeout=TIMEOUT).ok
        plain = requests.get(served.url.replace("https", "http") + "/health", timeout=TIMEOUT)
        assert plain.status_code == 400 and "this port speaks https:// (TLS)" in plain.text
    finally:
        served.close()


def test_steps_are_recorded(tmp_path: Path) -> None:
    served = Served("builtin.Catch-v0", "--mode", "lockstep", "--record", str(tmp_path))
    try:
        with GenericEnvClient(base_url=served.url).sync() as env:
            env.reset(seed=8, frameskip=3)
            for i in range(6):
                env.step({"keys": keys_of(i % 2)})
    finally:
        served.close()
    episode = open_recording(tmp_path).episodes[-1]
    assert episode.seed == 8 and episode.mode == "lockstep"
    assert sum(s.frames for s in episode.steps) == 6 * 3  # (a step's first slices may be shorter)
    events = [e for s in episode.steps for e in s.events]
    assert events[0].source == "agent" and events[0].args == ("Right", True)


def test_real_time_steps_wait_for_frames_and_add_up_rewards() -> None:
    served = Served("builtin.Catch-v0", "--fps", "120")
    try:
        with GenericEnvClient(base_url=served.url).sync() as env:
            result = env.reset(seed=0, frameskip=6, screen="none")
            frame, rewarded = result.observation["frame"], 0
            for i in range(60):
                result = env.step({"keys": keys_of(i % 2)})
                assert result.observation["frame"] >= frame + 6  # at least frameskip frames on
                frame = result.observation["frame"]
                rewarded += result.reward != 0 or result.done
            # 60 * 6 frames of Catch: balls fell (a +1 and a -1 may add up to 0: count them)
            assert rewarded
            assert env.state()["mode"] == "realtime"
    finally:
        served.close()


def test_many_sessions_are_served_and_the_rest_told_so() -> None:
    served = Served("builtin.Catch-v0")
    try:
        from envserver.openenv.server import MAX_SESSIONS

        async def crowd() -> None:
            envs = [GenericEnvClient(base_url=served.url) for _ in range(MAX_SESSIONS + 1)]
            try:
                for env in envs[:MAX_SESSIONS]:
                    await env.connect()
                    await env.state()  # in before the next connects
                crowded = f"{MAX_SESSIONS} OpenEnv sessions are open.*CAPACITY_REACHED"
                with pytest.raises(RuntimeError, match=crowded):
                    await envs[-1].reset(observe=True)
            finally:
                await asyncio.gather(*(env.close() for env in envs), return_exceptions=True)
        asyncio.run(crowd())
    finally:
        served.close()
