"""RemoteParallelEnv: PettingZoo's ParallelEnv over multi-player remotes (real ``serve``
processes on 127.0.0.1): the API test, seeded determinism of joint actions, each agent's
own reward, and several remotes as independent games."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="the multiagent extra: pip install -e '.[multiagent]'")

from pettingzoo.test import parallel_api_test  # noqa: E402

from remotes import LocalRemotes, start_local  # noqa: E402
from remotes.parallel import RemoteParallelEnv  # noqa: E402


@pytest.fixture(scope="module")
def duel() -> Iterator[LocalRemotes]:
    with start_local("builtin.Duel-v0") as local:
        yield local


@pytest.fixture(scope="module")
def duels() -> Iterator[LocalRemotes]:
    with start_local("builtin.Duel-v0", n=2) as local:
        yield local


def test_parallel_api_test_passes(duel: LocalRemotes) -> None:
    env = RemoteParallelEnv(duel.address, frameskip=8)
    try:
        assert env.possible_agents == ["player_0", "player_1"]
        assert env.action_space("player_1").n == 3  # still, Up, Down
        assert env.observation_space("player_0").shape == (120, 160, 3)
        parallel_api_test(env, num_cycles=300)
    finally:
        env.close()


def play(env: RemoteParallelEnv, seed: int, steps: int) -> list[tuple[str, float, float]]:
    """A joint script: player 0 goes up and down, player 1 the other way at its own pace."""
    observations, _ = env.reset(seed=seed)
    trace = [(hashlib.sha1(observations["player_0"]).hexdigest(), 0.0, 0.0)]
    for i in range(steps):
        actions = {"player_0": 1 if i % 12 < 6 else 2, "player_1": 2 if i % 8 < 4 else 1}
        observations, rewards, terminations, truncations, infos = env.step(actions)
        assert np.array_equal(observations["player_0"], observations["player_1"])
        assert infos["player_0"]["remote.player"] == 0 and infos["player_1"]["remote.player"] == 1
        trace.append((hashlib.sha1(observations["player_0"]).hexdigest(),
                      rewards["player_0"], rewards["player_1"]))
        if not env.agents:
            assert all(terminations.values())
            break
    return trace


def test_same_seed_and_joint_actions_give_the_same_frames(duel: LocalRemotes) -> None:
    env = RemoteParallelEnv(duel.address, frameskip=4)
    try:
        first, second, other = play(env, 21, 400), play(env, 21, 400), play(env, 22, 400)
    finally:
        env.close()
    assert first == second
    assert first != other
    points = [(a, b) for _, a, b in first if a or b]
    assert points and all(a == -b for a, b in points)  # each agent's own reward


def test_frames_through_shared_memory_are_the_vnc_frames(duel: LocalRemotes) -> None:
    """A local multi-player remote hands its frames over in shared memory; the same seed
    and joint actions give the same frames as over VNC."""
    env = RemoteParallelEnv(duel.address, frameskip=4)

    async def shared(on: bool | None = None) -> bool:
        frames = env._core.sessions[0].shared
        if on is not None:
            frames.enabled = frames.requested = on
        return frames.last is not None

    try:
        through_shm = play(env, 31, 200)
        assert env._loop.run(shared())
        env._loop.run(shared(False))
        through_vnc = play(env, 31, 200)
        assert not env._loop.run(shared())
    finally:
        env.close()
    assert through_shm == through_vnc


def test_truncation_after_max_cycles(duel: LocalRemotes) -> None:
    env = RemoteParallelEnv(duel.address, max_cycles=3)
    try:
        env.reset(seed=1)
        for _ in range(2):
            env.step({"player_0": 0, "player_1": 0})
        _, _, terminations, truncations, _ = env.step({"player_0": 0, "player_1": 0})
        assert truncations == {"player_0": True, "player_1": True} and not any(terminations.values())
        assert env.agents == []
        with pytest.raises(ValueError, match="not playing now"):
            env.step({"player_0": 0})
    finally:
        env.close()


def test_several_remotes_are_independent_games(duels: LocalRemotes) -> None:
    env = RemoteParallelEnv(duels.address, frameskip=8)
    try:
        assert env.possible_agents == [
            "remote_0_player_0", "remote_0_player_1", "remote_1_player_0", "remote_1_player_1",
        ]
        observations, _ = env.reset(seed=5)
        differ = not np.array_equal(observations["remote_0_player_0"], observations["remote_1_player_0"])
        assert differ  # seeds 5 and 6: two games, not one shown twice
        parallel_api_test(env, num_cycles=200)
    finally:
        env.close()


def test_a_single_player_remote_has_one_agent() -> None:
    with start_local("builtin.Catch-v0") as local:
        env = RemoteParallelEnv(local.address)
        try:
            assert env.possible_agents == ["player_0"]
            env.reset(seed=1)
            _, rewards, *_ = env.step({"player_0": 1})
            assert set(rewards) == {"player_0"}
        finally:
            env.close()


def test_a_dropped_remote_ends_its_game_and_comes_back_at_reset() -> None:
    """Like RemoteEnv and RemoteVectorEnv (the same stepping core): a remote killed
    mid-game truncates its agents with the reason, the other game plays on, and once it
    is back, reset() reconnects it and both games play."""
    with start_local("builtin.Duel-v0", n=2) as local:
        env = RemoteParallelEnv(local.address, frameskip=4, stall_timeout=5.0)
        try:
            env.reset(seed=1)
            hold = {agent: 0 for agent in env.agents}
            env.step(hold)
            local.kill(0)
            _, _, terminations, truncations, infos = env.step(hold)
            for agent in ("remote_0_player_0", "remote_0_player_1"):
                assert truncations[agent] and not terminations[agent]
                assert "remote.error" in infos[agent], infos[agent]
            assert env.agents == ["remote_1_player_0", "remote_1_player_1"]  # the other game goes on
            _, rewards, *_ = env.step({a: 0 for a in env.agents})
            assert set(rewards) == {"remote_1_player_0", "remote_1_player_1"}
            local.restart(0)
            observations, _ = env.reset(seed=2)  # waits for remote 0 to be back
            assert len(env.agents) == 4 and len(observations) == 4
            _, _, _, truncations, infos = env.step({a: 0 for a in env.agents})
            assert not any(truncations.values()), infos
            assert all(info["remote.connected"] for info in infos.values())
        except BaseException:
            # A known flake (3 in ~24 full runs, not reproduced in 38 runs under load,
            # issue 34): the remotes' own logs, for the next one to say why.
            for path in local.logs:
                print(f"--- {path}:\n{path.read_text(errors='replace')[-4000:]}")
            raise
        finally:
            env.close()
