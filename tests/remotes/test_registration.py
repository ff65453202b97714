"""``remotes.registration``: the ids, cheaply; wrong ids and wrong counts answered before
anything starts; a remote serving another env switched before the spaces are set.

(``tests/remotes/test_make.py`` covers making and stepping each kind of env.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Final

import gymnasium
import pytest

import remotes
from remotes import start_local
from remotes.registration import gym_id
from runtimes import registry
from runtimes.errors import LIST_COMMAND, UnknownEnvironment
from tests.optional import needs_extra

ROOT = Path(__file__).parents[2]


def test_every_catalogued_id_is_registered_nondeterministic() -> None:
    gymnasium.register_envs(remotes)
    for env_id in registry.catalogue():
        spec = gymnasium.spec(gym_id(env_id))
        assert spec.nondeterministic, env_id  # real time is the default mode
        assert spec.vector_entry_point is not None
        assert spec.kwargs == {"env_id": env_id}


def test_import_remotes_loads_no_runtime_family() -> None:
    """Registering ~240 ids must not import ale-py, miniwob, or a family that looks for
    Chromium or Xvnc: an agent machine may have none of them."""
    code = (
        "import sys, gymnasium, remotes; "
        "print('universe-remote/atari.Pong-v0' in gymnasium.registry, sorted(m for m in sys.modules "
        "if m.startswith(('ale_py', 'miniwob', 'runtimes.atari', 'runtimes.browser', 'runtimes.x11'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    ).stdout
    assert out.split() == ["True", "[]"]


def test_an_unknown_env_id_is_answered_before_anything_starts() -> None:
    with pytest.raises(UnknownEnvironment, match="did you mean builtin.Catch-v0") as caught:
        gymnasium.make("universe-remote/builtin.Catch-v0", env_id="builtin.Cacth-v0")
    assert LIST_COMMAND in str(caught.value)
    assert "atari.Pong-v0" not in str(caught.value)


def test_a_mistyped_gymnasium_id_gets_gymnasium_s_closest_match() -> None:
    """gymnasium looks ids up itself: its error, with its difflib suggestion."""
    gymnasium.register_envs(remotes)
    with pytest.raises(gymnasium.error.NameNotFound, match="Did you mean: `atari.Pong`"):
        gymnasium.make("universe-remote/atari.Pongg-v0")


def test_remote_counts_must_match() -> None:
    with pytest.raises(ValueError, match="names 2 remotes.*make_vec"):
        gymnasium.make("universe-remote/builtin.Catch-v0",
                       remotes="vnc://127.0.0.1:1+2,127.0.0.1:3+4")
    with pytest.raises(ValueError, match="names 1 remotes.*drives 2"):
        gymnasium.make_vec("universe-remote/builtin.Catch-v0", num_envs=2,
                           remotes="vnc://127.0.0.1:1+2")
    with pytest.raises(TypeError, match="number of local remotes"):
        gymnasium.make("universe-remote/builtin.Catch-v0", remotes=True)


def test_a_remote_serving_another_env_is_switched_before_the_spaces_are_set() -> None:
    with start_local("builtin.Catch-v0") as local:
        env = gymnasium.make("universe-remote/builtin.ClickTarget-v0", remotes=local.address)
        try:
            assert env.observation_space.shape == (240, 320, 3)  # ClickTarget's, not Catch's
            assert isinstance(env.action_space, gymnasium.spaces.Discrete)
            obs, _ = env.reset(seed=0)
            assert obs.shape == (240, 320, 3)
            obs, *_ = env.step(0)
            assert env.observation_space.contains(obs)
        finally:
            env.close()


def test_make_vec_refuses_remotes_serving_another_env() -> None:
    """A vector env stacks frames of one size, so it does not switch envs: it says so."""
    with start_local("builtin.Catch-v0", 2) as local:
        with pytest.raises(ValueError, match="serves builtin.Catch-v0, not builtin.ClickTarget-v0"):
            gymnasium.make_vec(
                "universe-remote/builtin.ClickTarget-v0", num_envs=2, remotes=local.address
            )
        assert [p.poll() for p in local.processes] == [None, None]  # not ours to stop


#: Seeds (target positions) tried: an 8x8 grid of clicks could hit ClickTarget's 24 px disc
#: from only some of them.
CLICK_SEEDS: Final = range(8)


def test_click_target_s_clicks_can_hit_every_target() -> None:
    runtime = registry.make("builtin.ClickTarget-v0")
    env = gymnasium.make("universe-remote/builtin.ClickTarget-v0", mode="lockstep")
    try:
        points = env.get_wrapper_attr("points")
        assert env.action_space == gymnasium.spaces.Discrete(len(points))
        for seed in CLICK_SEEDS:
            runtime.reset(seed)
            hits = [i for i, (x, y) in enumerate(points) if runtime.on_target(x, y)]
            assert hits, f"seed {seed}: no click point lands on the target at {runtime.target_centre}"
            env.reset(seed=seed)
            _, reward, *_ = env.step(hits[0])
            assert reward == 1.0
    finally:
        env.close()


def test_miniwob_clicks_cover_the_task_area_only() -> None:
    from remotes.registration import MINIWOB_CELL, click_points

    area = (0, 0, 160, 210)  # runtimes.browser.TASK_AREA, on a 640x480 screen
    points = click_points(area, MINIWOB_CELL)
    xs, ys = sorted({x for x, _ in points}), sorted({y for _, y in points})
    assert all(0 <= x < 160 for x in xs) and all(0 <= y < 210 for y in ys)
    assert len(xs) == 16 and len(ys) == 21
    assert max(b - a for a, b in zip(xs[:-1], xs[1:], strict=True)) == MINIWOB_CELL


#: Python that drives a remote with ale-py from a process that cannot import ale-py (the
#: agent machine of the README), then starts one locally: ``sys.argv[1]`` is the address.
_WITHOUT_ALE: Final = """
import sys
sys.modules["ale_py"] = None  # import ale_py raises ImportError; find_spec finds nothing
import gymnasium, remotes
gymnasium.register_envs(remotes)
env = gymnasium.make("universe-remote/atari.Pong-v0", remotes=sys.argv[1])
obs, _ = env.reset(seed=1)
print("drove", obs.shape, env.action_space)
env.close()
try:
    gymnasium.make("universe-remote/atari.Pong-v0")
except Exception as exc:
    print("local:", type(exc).__name__, exc)
"""


@needs_extra("atari")  # the remote it drives has ale-py
def test_a_machine_without_ale_py_drives_a_remote_that_has_it() -> None:
    """The README: the ids exist without ale-py, so such a machine drives Atari remotes
    elsewhere; starting one here says what to install first."""
    with start_local("atari.Pong-v0") as local:
        out = subprocess.run(
            [sys.executable, "-c", _WITHOUT_ALE, local.address], capture_output=True, text=True,
            cwd=ROOT, timeout=120, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("drove (210, 160, 3) Discrete(6)"), out.stdout
    assert lines[1].startswith("local: UnknownEnvironment atari.Pong-v0 cannot be served on this "
                               "machine: install it first: pip install 'universe-remote[atari]'"), out.stdout
