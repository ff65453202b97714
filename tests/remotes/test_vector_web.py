"""A vector of browser remotes with the web settings (``observations=("screen", "page")``,
``actions="web"``, ``step_mode="settle"``): each remote's page structure in a batched
``Dict`` observation and its elements in ``info["page"]``, an action string per remote
computed from its own page, autoreset (``NEXT_STEP`` and ``SAME_STEP``) going on with the
next episode's page, in lockstep and in real time (settling, and at the frame clock).

Two real MiniWoB remotes for the module (``remotes.start_local``: Chromium on Xvnc),
driven by one vector env per way of stepping in turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from remotes import RemoteVectorEnv, start_local  # (importing remotes registers the ids)
from tests.optional import need_program

pytestmark = pytest.mark.timeout(600)

ENV_ID: Final = "miniwob.ClickTest-v0"
N: Final = 2
#: Episodes each remote must win in a row (the second after an autoreset).
WINS: Final = 2
#: Steps a run may take: a click per episode, and in real time a few empty steps while
#: a reward comes in, with room for a loaded machine.
MAX_STEPS: Final = 200
#: Seconds the remotes may take to start on a loaded machine.
START_TIMEOUT: Final = 120.0
WAYS: Final[dict[str, dict[str, Any]]] = {
    "lockstep": {"mode": "lockstep", "autoreset_mode": AutoresetMode.NEXT_STEP},
    "settle": {"mode": "realtime", "step_mode": "settle", "autoreset_mode": AutoresetMode.SAME_STEP},
    "frame": {"mode": "realtime", "autoreset_mode": AutoresetMode.NEXT_STEP},
}


@pytest.fixture(scope="module")
def group() -> Iterator[Any]:
    pytest.importorskip("miniwob")
    need_program("Xvnc", "chromium")  # (a skip, which CI counts as a failure)
    local = start_local(ENV_ID, N, start_timeout=START_TIMEOUT)
    try:
        yield local
    finally:
        local.close()


def button_click(infos: dict[str, Any], i: int) -> str:
    """The action string that clicks remote ``i``'s button, read from its own page."""
    assert infos["_page"][i]
    elements = infos["page"]["elements"][i]
    button = next(e for e in elements if e["role"] == "button" and e["name"] == "Click Me!")
    return f"click('{button['bid']}')"


@pytest.mark.parametrize("way", list(WAYS))
def test_a_vector_of_browser_remotes_solves_click_test_with_action_strings(
    group: Any, way: str
) -> None:
    envs = RemoteVectorEnv(group, observations=("screen", "page"), actions="web", **WAYS[way])
    try:
        single = envs.single_observation_space
        assert isinstance(single, spaces.Dict) and set(single) == {"screen", "instruction", "tree", "url"}
        assert isinstance(envs.single_action_space, spaces.Text)
        obs, infos = envs.reset(seed=3)
        assert envs.observation_space.contains(obs)
        assert obs["screen"].shape == (N, 210, 160, 3) and len(obs["tree"]) == N
        assert all(t.startswith("RootWebArea") and "Click Me!" in t for t in obs["tree"])
        assert obs["instruction"] == ("Click the button.",) * N
        episodes = list(infos["episode_id"])
        actions = [button_click(infos, i) for i in range(N)]
        wins = np.zeros(N, int)
        for _ in range(MAX_STEPS):
            if wins.min() >= WINS:
                break
            obs, rewards, terminated, truncated, infos = envs.step(tuple(actions))
            assert not truncated.any(), infos
            assert envs.observation_space.contains(obs)
            assert all(e is None for e in infos["last_action_error"]), infos["last_action_error"]
            actions = [""] * N
            for i in range(N):
                if terminated[i]:
                    assert rewards[i] > 0
                    wins[i] += 1
                    if way == "settle":  # SAME_STEP: the final page, the next one's start
                        assert "Click Me!" in infos["final_obs"][i]["tree"]
                if infos["episode_id"][i] != episodes[i] and not (way != "settle" and terminated[i]):
                    # (NEXT_STEP: the step after the end gives the new episode's page)
                    episodes[i] = infos["episode_id"][i]
                    assert obs["tree"][i].startswith("RootWebArea")
                    actions[i] = button_click(infos, i)
        assert wins.min() >= WINS, wins
    finally:
        envs.close()


def test_action_strings_need_actions_web_and_one_per_remote(group: Any) -> None:
    envs = RemoteVectorEnv(group, mode="lockstep")
    try:
        envs.reset(seed=1)
        with pytest.raises(ValueError, match="need actions='web'"):
            envs.step(("click('a1')", []))
        assert isinstance(envs.single_observation_space, spaces.Box)
    finally:
        envs.close()
    envs = RemoteVectorEnv(group, mode="lockstep", actions="web")
    try:
        envs.reset(seed=1)
        with pytest.raises(ValueError, match="one per remote"):
            envs.step("click('a1')")
        _, _, _, _, infos = envs.step(("click('a999')", []))  # a string and VNC events
        assert "a999" in infos["last_action_error"][0] and infos["last_action_error"][1] is None
    finally:
        envs.close()
    # The pointer wrapper reads the screen's size from a Dict observation too.
    from remotes.vector_wrappers import VectorPointerBox

    pointed = VectorPointerBox(RemoteVectorEnv(group, mode="lockstep", observations=("screen", "page")))
    try:
        assert pointed.action_space.shape == (N, 3)
        pointed.reset(seed=1)
        obs, *_ = pointed.step(np.array([[80, 100, 0]] * N, np.float32))
        assert obs["screen"].shape == (N, 210, 160, 3)
    finally:
        pointed.close()
    # make_vec keeps the strings (no discrete wrapper over them).
    made = gymnasium.make_vec(f"universe-remote/{ENV_ID}", num_envs=N, mode="lockstep",
                              remotes=[str(a) for a in group.addresses], actions="web")
    try:
        assert isinstance(made.single_action_space, spaces.Text)
        made.reset(seed=1)
        _, _, _, _, infos = made.step(("", "click('a999')"))
        assert infos["last_action_error"][0] is None and "a999" in infos["last_action_error"][1]
    finally:
        made.close()
