"""Web agents through gymnasium (remotes.web): a browser remote's page structure as a
``Dict`` observation (``observations=("screen", "page")``), BrowserGym action strings
(``actions="web"``) run or refused with ``last_action_error``, VNC events beside them,
steps that end when the page settles (``step_mode="settle"``), and the scripted oracle
solving tasks from the structure alone, in real time and in lockstep.

Real remotes: ``gymnasium.make`` starts ``universe-remote serve`` with MiniWoB in
Chromium on Xvnc (skipped without the browser extra); each way of stepping keeps one
remote for the module, switched from task to task by ``reset(options={"env_id": ...})``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.passive_env_checker import data_shares_objects

import remotes  # noqa: F401 (registers the ids)
from remotes.web import MAX_ACTION_CHARS
from tests.optional import need_program
from tests.remotes.web_ways import Env, envs_by_way, start

pytestmark = pytest.mark.timeout(600)

#: How an env steps: real time at the frame clock, real time settling, lockstep.
WAYS: Final[dict[str, dict[str, Any]]] = {
    "frame": {"mode": "realtime"},
    "settle": {"mode": "realtime", "step_mode": "settle"},
    "lockstep": {"mode": "lockstep"},
}
#: Real-time steps at the frame clock a test waits at most for a reward to come in.
MAX_WAIT_STEPS: Final = 120

@pytest.fixture(scope="module")
def web_env() -> Iterator[Callable[[str], Env]]:
    """``web_env(way)``: the module's env of that way (made at first use)."""
    with envs_by_way("miniwob.ClickButton-v0", WAYS) as get:
        yield get



def element(info: dict[str, Any], **criteria: Any) -> dict[str, Any]:
    found = [e for e in info["page"]["elements"] if all(e.get(k) == v for k, v in criteria.items())]
    assert found, (criteria, info["page"]["elements"])
    return found[0]


def finish(env: Env, way: str, reward: float, terminated: bool) -> float:
    """At the frame clock a reward may come a few steps after the action that earned it:
    step with no action until it does."""
    steps = 0
    while not terminated and way == "frame" and steps < MAX_WAIT_STEPS:
        _, reward, terminated, truncated, _ = env.step("")
        assert not truncated
        steps += 1
    assert terminated
    return float(reward)


@pytest.mark.parametrize("way", list(WAYS))
def test_page_observations_come_as_a_dict_with_the_frame_they_describe(
    web_env: Callable[[str], Env], way: str
) -> None:
    env = web_env(way)
    assert isinstance(env.observation_space, gymnasium.spaces.Dict)
    assert set(env.observation_space) == {"screen", "instruction", "tree", "url"}
    obs, info = start(env, "click-button", 2)
    assert env.observation_space.contains(obs)
    assert obs["screen"].shape == (210, 160, 3) and obs["screen"].any()
    assert obs["instruction"] == info["instruction"] and obs["instruction"].startswith("Click on the")
    assert obs["url"].endswith("/click-button.html")
    assert obs["tree"].startswith("RootWebArea") and "button" in obs["tree"]
    assert info["page"]["axtree"] == obs["tree"]
    if way == "lockstep":  # the page describes the frame returned
        assert info["page.frame"] == info["frame"]
    else:  # real time: a frame may pass before the reset's update reaches a loaded agent
        assert info["page.frame"] <= info["frame"]
    assert info["last_action"] == "" and info["last_action_error"] is None
    buttons = [e for e in info["page"]["elements"] if e["role"] == "button"]
    assert buttons and all(re.fullmatch(r"a\d+", e["bid"]) for e in buttons)
    # The same seed, the same page and bids; the info's page is the agent's own to keep.
    info["page"]["elements"].clear()
    again, info_again = start(env, "click-button", 2)
    assert again["tree"] == obs["tree"] and again["instruction"] == obs["instruction"]
    assert [e["bid"] for e in info_again["page"]["elements"] if e["role"] == "button"] == [
        e["bid"] for e in buttons
    ]


@pytest.mark.parametrize("way", list(WAYS))
def test_steps_share_no_object_with_the_steps_before(web_env: Callable[[str], Env], way: str) -> None:
    """Agents keep what a step returns (rollout buffers): two steps with no new page still
    return infos and observations that share nothing mutable (gymnasium's own check)."""
    env = web_env(way)
    obs, info = start(env, "click-button", 3)
    previous = (obs, info)
    for _ in range(3):
        obs, _, terminated, truncated, info = env.step("")
        assert not (terminated or truncated)
        assert not data_shares_objects(previous[0], obs)
        assert not data_shares_objects(previous[1], info), [k for k in info if k in previous[1]
                                                            and data_shares_objects(previous[1][k], info[k])]
        previous = (obs, info)


@pytest.mark.parametrize("way", list(WAYS))
def test_action_strings_run_or_are_refused_with_a_clear_message(
    web_env: Callable[[str], Env], way: str, tmp_path: Path
) -> None:
    """Hostile and malformed strings come back as ``last_action_error`` (nothing of them
    runs: the marker file never appears), the episode goes on untouched, and the strings
    after them run: a field filled, a message sent, the task's reward earned."""
    env = web_env(way)
    obs, info = start(env, "enter-text", 4)
    episode = info["episode_id"]
    word = re.findall(r'"([^"]*)"', obs["instruction"])[0]
    box, submit = element(info, role="textbox")["bid"], element(info, role="button", name="Submit")["bid"]
    marker = tmp_path / "ran"
    refused = {
        f"__import__('os').system('touch {marker}')": "attribute access is not allowed",
        "click(a42)": "quote it: 'a42'",
        f"click('{box}').x": "attribute access on a call's result is not allowed",
        f"(lambda: click('{box}'))()": "a lambda is not allowed",
        f"click(f'{box}')": "an f-string is not allowed",
        "import os": "is a statement (import)",
        f"fill('{box}', 'x' * 3)": "an operator is not allowed",
        "goto('http://127.0.0.1/')": "unknown function 'goto'",
        "click('a99999')": "no element with bid 'a99999'",
        f"fill('{box}', '" + "x" * MAX_ACTION_CHARS + "')": "MAX_ACTION_CHARS",
        "click('\ud800')": "not valid Unicode text",
    }
    for action, says in refused.items():
        obs, reward, terminated, truncated, info = env.step(action)
        error = info["last_action_error"]
        assert isinstance(error, str) and says in error, (action[:60], error)
        assert not (terminated or truncated) and reward == 0 and info["episode_id"] == episode
        assert element(info, bid=box).get("value") == ""  # nothing typed
    assert not marker.exists()

    obs, _, terminated, _, info = env.step(f"fill('{box}', {word!r})")
    assert info["last_action_error"] is None and info["last_action"].startswith(f"fill('{box}'")
    assert element(info, bid=box)["value"] == word and not terminated  # the page after it ran
    _, _, _, _, info = env.step("send_msg_to_user('filled it')")
    assert info["last_action_error"] is None and info["web.messages"] == ["filled it"]
    _, reward, terminated, _, info = env.step(f"click('{submit}')")
    assert info["last_action_error"] is None
    assert finish(env, way, float(reward), terminated) > 0


@pytest.mark.parametrize("way", ["frame", "settle"])
def test_vnc_events_work_beside_action_strings(web_env: Callable[[str], Env], way: str) -> None:
    """With ``actions="web"`` a list of VNC events is still an action: a click where the
    page says the instruction's button is."""
    env = web_env(way)
    obs, info = start(env, "click-button", 5)
    name = re.findall(r'"([^"]*)"', obs["instruction"])[0]
    x, y, w, h = element(info, role="button", name=name)["bbox"]
    cx, cy = int(x + w / 2), int(y + h / 2)
    click = [("PointerEvent", cx, cy, 0), ("PointerEvent", cx, cy, 1), ("PointerEvent", cx, cy, 0)]
    _, reward, terminated, _, info = env.step(click)
    assert info["last_action"] == "" and info["last_action_error"] is None
    assert finish(env, way, float(reward), terminated) > 0


def test_a_settling_step_returns_the_frame_once_the_page_is_still(web_env: Callable[[str], Env]) -> None:
    """click-collapsible opens its section with a 0.4 s animation: the settling step
    returns the frame after it (the screen then stays as it is: the next settling step,
    with no action, shows the same pixels and saw no change), with how long it took."""
    env = web_env("settle")
    before, info = start(env, "click-collapsible", 3)
    tab = element(info, role="tab", expanded=False)["bid"]
    after, _, terminated, _, info = env.step(f"click('{tab}')")
    assert not terminated and info["last_action_error"] is None
    settle = info["settle"]
    assert settle["react_s"] is not None and not settle["deadline_hit"]
    assert settle["settled_s"] > settle["react_s"] and settle["by"] in ("page-idle", "quiet")
    assert element(info, bid=tab)["expanded"] is True
    assert info["page.frame"] is not None and info["frame"] >= info["page.frame"]
    assert not np.array_equal(after["screen"], before["screen"])
    still, _, _, _, info = env.step("")
    assert info["settle"]["react_s"] is None  # nothing moved
    assert np.array_equal(still["screen"], after["screen"])


ORACLE_TASKS: Final = ("click-button", "enter-text", "click-checkboxes", "click-collapsible")
ORACLE_SEEDS: Final = 2


@pytest.mark.parametrize("way", ["settle", "lockstep"])
def test_the_oracle_solves_tasks_from_the_page_through_gymnasium(
    web_env: Callable[[str], Env], way: str
) -> None:
    """benchmarks.web_oracle reads ``obs["instruction"]`` and ``info["page"]`` and sends
    action strings, nothing else."""
    from benchmarks.browser_oracle import Tally, play

    env = web_env(way)
    for task in ORACLE_TASKS:
        tally = Tally()
        for seed in range(ORACLE_SEEDS):
            play(env, task, seed, tally)
        assert tally.won == tally.episodes == ORACLE_SEEDS and not tally.errors, (task, tally)


def test_web_settings_are_refused_where_they_cannot_work() -> None:
    with pytest.raises(ValueError, match="step_mode='settle' is for real time"):
        remotes.EnvOptions(mode="lockstep", step_mode="settle")
    with pytest.raises(ValueError, match="take 'screen' and optionally 'page'"):
        remotes.EnvOptions(observations=("page",))
    with pytest.raises(ValueError, match="actions must be one of vnc, web"):
        remotes.EnvOptions(actions="strings")
    with pytest.raises(ValueError, match="builtin.Catch-v0 has no page"):
        gymnasium.make("universe-remote/builtin.Catch-v0", actions="web")
    with pytest.raises(ValueError, match="builtin.Catch-v0 has no page"):
        gymnasium.make_vec("universe-remote/builtin.Catch-v0", num_envs=1, observations=("screen", "page"))
    with pytest.raises(ValueError, match="cannot tell when its screen settles"):
        gymnasium.make("universe-remote/builtin.Catch-v0", step_mode="settle")
    env = gymnasium.make("universe-remote/builtin.Catch-v0", discrete=False)
    try:
        env.reset(seed=1)
        with pytest.raises(ValueError, match="need actions='web'"):
            env.step("click('a1')")
    finally:
        env.close()


def test_a_desktop_remote_settles_too() -> None:
    """``step_mode="settle"`` on an X program (XEyes): a pointer move's step returns once
    the eyes stopped following it, and a step with no input afterwards sees nothing move."""
    need_program("Xvnc", "xeyes")
    env = gymnasium.make("universe-remote/x11.XEyes-v0", step_mode="settle", discrete=False)
    try:
        before, _ = env.reset(seed=1)
        after, _, _, _, info = env.step([("PointerEvent", 5, 5, 0)])
        assert info["settle"]["react_s"] is not None and not info["settle"]["deadline_hit"]
        assert info["last_action"] == "" and info["last_action_error"] is None
        assert not np.array_equal(after, before)  # the eyes looked up and left
        still, _, _, _, info = env.step([])
        assert info["settle"]["react_s"] is None and np.array_equal(still, after)
        # A desktop takes every key a person has, not only the common keys it lists.
        press = [("KeyEvent", key, down) for key in ("F5", "KP_0", "Super_L", "Print")
                 for down in (True, False)]
        assert env.action_space.contains(press) and "F5" not in env.action_space.keys  # type: ignore[attr-defined]
        _, _, _, _, info = env.step(press)
        assert info["last_action_error"] is None
    finally:
        env.close()
