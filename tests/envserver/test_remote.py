"""The remote process: game loop, episodes, input, over real rewarder sockets."""

from __future__ import annotations

import asyncio

from envserver.state import Event, State
from runtimes.builtin import Catch, ClickTarget
from tests.conftest import StartRemote
from tests.wire import WireClient


async def test_episode_ids_rewards_and_auto_reset(start_remote: StartRemote) -> None:
    """A seeded reset starts episode E; its rewards carry E; done moves everyone to E+1."""
    remote = await start_remote("builtin.Catch-v0", fps=1000)
    agent = await WireClient.open(remote.rewarder.port)
    reply = await agent.reset(seed=7)
    episode = reply["headers"]["episode_id"]
    rewards = []
    async with asyncio.timeout(60):
        while True:  # with no input, Catch misses until the episode ends
            message = await agent.recv()
            if message["method"] == "v0.env.reward":
                assert message["headers"]["episode_id"] == episode
                rewards.append(message["body"])
                if message["body"]["done"]:
                    break
    assert all(r["reward"] in (-1, 1) for r in rewards)
    assert sum(r["reward"] == -1 for r in rewards) >= 1
    assert rewards[-1]["done"] and not any(r["done"] for r in rewards[:-1])
    next_id = str(int(episode) + 1)
    resetting = await agent.recv()
    assert (resetting["method"], resetting["body"]["env_state"], resetting["headers"]["episode_id"]) == (
        "v0.env.describe", "resetting", next_id,
    )
    running = await agent.recv()
    assert (running["body"]["env_state"], running["headers"]["episode_id"]) == ("running", next_id)
    await agent.close()


async def test_held_key_moves_the_paddle_and_aliases_work(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0")
    agent = await WireClient.open(remote.rewarder.port)
    await agent.reset(seed=1)
    runtime = remote.runtime
    assert isinstance(runtime, Catch)
    start_x = runtime.paddle_x
    await agent.send("v0.agent.action", {"action": [["KeyEvent", "ArrowRight", True]]})
    async with asyncio.timeout(10):
        while runtime.paddle_x < start_x + 10:
            await remote.wait_frame()
    assert remote.held_keys == {"Right"}
    # an X keysym number works too: 0xff53 is Right, released
    await agent.send("v0.agent.action", {"action": [["KeyEvent", 0xFF53, False]]})
    async with asyncio.timeout(10):
        while remote.held_keys:
            await remote.wait_frame()
    stopped_x = runtime.paddle_x
    frame = await remote.wait_frame()
    await remote.wait_frame(frame + 5)
    assert runtime.paddle_x == stopped_x
    await agent.close()


async def test_keys_held_by_a_client_that_left_are_released(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0")
    agent = await WireClient.open(remote.rewarder.port)
    await agent.send("v0.agent.action", {"action": [["KeyEvent", "Left", True]]})
    async with asyncio.timeout(10):
        while "Left" not in remote.held_keys:
            await remote.wait_frame()
    await agent.close()
    async with asyncio.timeout(10):
        while remote.held_keys:
            await remote.wait_frame()


async def test_click_on_the_target_earns_a_reward(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.ClickTarget-v0")
    agent = await WireClient.open(remote.rewarder.port)
    reply = await agent.reset(seed=3)
    runtime = remote.runtime
    assert isinstance(runtime, ClickTarget)
    x, y = runtime.target_centre
    await agent.send(
        "v0.agent.action",
        {"action": [["PointerEvent", x, y, 0], ["PointerEvent", x, y, 1], ["PointerEvent", x, y, 0]]},
    )
    reward = await agent.recv_until("v0.env.reward")
    assert reward["headers"]["episode_id"] == reply["headers"]["episode_id"]
    assert reward["body"]["reward"] == 1
    await agent.close()


async def test_reset_may_change_fps(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0")
    agent = await WireClient.open(remote.rewarder.port)
    reply = await agent.reset(fps=120)
    running = await agent.recv_until("v0.env.describe", episode_id=reply["headers"]["episode_id"])
    assert running["body"]["fps"] == 120
    assert remote.fps == 120
    await agent.close()


class _Talker(Catch):
    """Catch that also says things: text on the first frame, an observation every frame."""

    def step(self, events):  # type: ignore[no-untyped-def]
        result = super().step(events)
        result.text = "catch the ball" if self.frame == 1 else None
        result.observation = {"paddle_x": self.paddle_x}
        return result


async def test_text_and_observations_reach_clients_with_the_episode(start_remote: StartRemote) -> None:
    remote = await start_remote(_Talker())
    agent = await WireClient.open(remote.rewarder.port)
    reply = await agent.reset(seed=2)
    episode = reply["headers"]["episode_id"]
    text = await agent.recv_until("v0.env.text", episode_id=episode)
    assert text["body"] == {"text": "catch the ball"}
    observation = await agent.recv_until("v0.env.observation", episode_id=episode)
    paddle_x = observation["body"]["observation"]["paddle_x"]
    assert isinstance(paddle_x, int) and 0 <= paddle_x < remote.runtime.width
    await agent.close()


class _Flaky(Catch):
    """Catch whose step fails once, and whose first reset after that fails too."""

    def __init__(self) -> None:
        self.failures = {"step": 1, "reset": 0}
        super().__init__()

    def step(self, events):  # type: ignore[no-untyped-def]
        if self.frame == 5 and self.failures["step"]:
            self.failures["step"] -= 1
            self.failures["reset"] = 1
            raise RuntimeError("the runtime broke")
        return super().step(events)

    def reset(self, seed=None):  # type: ignore[no-untyped-def]
        if self.failures.get("reset"):
            self.failures["reset"] -= 1
            raise RuntimeError("and could not restart at once")
        super().reset(seed)


async def test_a_failing_runtime_is_restarted_and_the_remote_goes_on(start_remote: StartRemote) -> None:
    remote = await start_remote(_Flaky())
    agent = await WireClient.open(remote.rewarder.port)
    first = await agent.recv()
    episode = int(first["headers"]["episode_id"])
    resetting = await agent.recv_until("v0.env.describe", timeout=15, episode_id=str(episode + 1))
    assert resetting["body"]["env_state"] == "resetting"
    while (describe := await agent.recv_until("v0.env.describe", timeout=15))["body"][
        "env_state"
    ] != "running":
        pass
    assert int(describe["headers"]["episode_id"]) > episode
    assert remote.runtime.failures == {"step": 0, "reset": 0}
    frame = await remote.wait_frame()
    await remote.wait_frame(frame + 3)  # the game loop ticks again
    await agent.close()


async def test_describe_and_the_command_say_which_versions_they_speak(start_remote: StartRemote) -> None:
    import subprocess
    import sys

    from envserver.version import PROTOCOLS, server_version

    remote = await start_remote()
    describe = remote.describe()
    assert describe["server_version"] == server_version() != "0+unknown"
    assert describe["protocols"] == PROTOCOLS
    printed = subprocess.run(
        [sys.executable, "-m", "universe_remote", "--version"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout
    assert printed.startswith(f"universe-remote {server_version()} ") and "dm_env_rpc v1" in printed


async def test_properties_over_the_rewarder(start_remote: StartRemote) -> None:
    import pytest

    from rewarder.client import RewarderClient
    from rewarder.errors import RemoteError

    remote = await start_remote()
    url = f"127.0.0.1:{remote.rewarder.port}"
    async with RewarderClient(url, calibration_pings=0) as agent, RewarderClient(
        url, observer=True, calibration_pings=0
    ) as observer:
        listed = (await observer.properties("list"))["properties"]
        specs = {p["key"]: p for p in listed}
        assert {"env_id", "fps", "mode", "width", "height", "episode_id", "version"} <= set(specs)
        assert specs["fps"]["writable"] and not specs["env_id"]["writable"]
        assert all(p["description"] and p["readable"] for p in listed)
        assert await observer.properties("read", "env_id") == {"key": "env_id", "value": "builtin.Catch-v0"}
        assert (await agent.properties("write", "fps", 30))["value"] == 30.0
        assert remote.fps == 30.0 and remote.describe()["fps"] == 30.0
        for args, words in (
            (("read", "colour"), "no property 'colour'"),
            (("write", "env_id", "atari.Pong-v0"), "read-only"),
            (("write", "fps", "fast"), "takes a float"),
            (("write", "fps", 1e9), "fps must be in"),
        ):
            with pytest.raises(RemoteError, match=words):
                await agent.properties(*args)
        with pytest.raises(RemoteError, match="observers may only"):
            await observer.properties("write", "fps", 60)
        assert remote.fps == 30.0  # nothing a refused write asked for happened


async def test_every_real_time_frame_is_a_tick_of_the_state_machine(
    start_remote: StartRemote,
) -> None:
    """The table's ``running --tick--> running`` is what the game loop fires for each
    frame, so a tick in any other state is the machine's to refuse (before: never fired)."""
    remote = await start_remote("builtin.Catch-v0")
    fired: list[Event] = []
    real_fire = remote.machine.fire

    def fire(event: Event) -> State:
        fired.append(event)
        return real_fire(event)

    remote.machine.fire = fire  # type: ignore[method-assign]
    first = await remote.wait_frame()
    last = await remote.wait_frame(first + 3)
    assert fired.count(Event.TICK) >= last - first >= 4
