"""``info["instruction"]``: the current episode's latest ``v0.env.text`` on every reset and
step — not only on the reset step, as ``info["text"]`` has it — replaced by the next
episode's (None for an episode that sends none), in lockstep and in real time, through
autoresets, per env in a vector.

No builtin runtime sends text, so the remotes here replay a recording (``universe-remote
replay``) written with texts: episode A says one thing at its start and another at step
:data:`LATER_STEP`, B says one thing, C nothing. Each frame names its episode and step in
its pixels, so a test reads off the observation which instruction must come with it. One
test drives a real MiniWoB task in Chromium (skipped without the browser extra)."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Final

import gymnasium
import numpy as np
import pytest

from recordings.format import DONE
from recordings.writer import RecordingWriter
from remotes import RemoteEnv, RemoteVectorEnv
from tests.optional import need_program

#: The recording's screen (rows, columns) and rate.
HEIGHT: Final = 48
WIDTH: Final = 64
FPS: Final = 60.0
#: Recorded steps per episode (0.4 s in real time at FPS).
STEPS: Final = 24
#: The step at which episode A's second text comes.
LATER_STEP: Final = 8
#: Each episode's red level, and the texts it sends at which step.
EPISODES: Final = {
    40: {0: "Click the red disc.", LATER_STEP: "Now click the blue one."},
    120: {0: "Type hello."},
    200: {},
}
#: Green level per step (the step is green // STEP_GREEN).
STEP_GREEN: Final = 4
#: Seconds to wait for a remote's banner.
START_TIMEOUT: Final = 30.0
#: Real-time steps the vector test takes at most (each env sees ~3 episodes in ~150).
MAX_REALTIME_STEPS: Final = 600
#: Autoresets each env of the real-time test goes through.
AUTORESETS: Final = 4


def shown(obs: np.ndarray) -> tuple[int, int]:
    """(episode red level, step) a replayed frame shows."""
    return int(obs[0, 0, 0]), int(obs[0, 0, 1]) // STEP_GREEN


def expected(red: int, step: int) -> str | None:
    """The instruction once the episode's texts up to ``step`` have come."""
    texts = [text for at, text in sorted(EPISODES[red].items()) if at <= step]
    return texts[-1] if texts else None


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("instructions")
    writer = RecordingWriter(root)
    meta = {"env_id": "builtin.Catch-v0", "seed": None, "mode": "lockstep", "fps": FPS,
            "width": WIDTH, "height": HEIGHT, "keys": [], "buttons": 0}
    for red, texts in EPISODES.items():
        for step in range(STEPS):
            frame = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
            frame[..., 0], frame[..., 1] = red, step * STEP_GREEN
            item = {"i": step, "frame": step, "frames": 1 if step else 0, "reward": 0.0,
                    **({"text": texts[step]} if step in texts else {}),
                    **({"done": True} if step == STEPS - 1 else {})}
            if step == 0:
                writer.begin(meta, item, frame)
            else:
                writer.step(item, frame)
        writer.end(DONE)
    assert writer.drain(START_TIMEOUT)
    writer.close()
    return root


@contextmanager
def replaying(recording: Path, n: int, logs: Path) -> Iterator[list[str]]:
    """``n`` remotes replaying ``recording`` on free ports: their addresses."""
    with ExitStack() as stack:
        addresses = []
        for i in range(n):
            log = stack.enter_context(open(logs / f"replay-{i}.log", "wb"))
            process = subprocess.Popen(
                [sys.executable, "-m", "universe_remote", "replay", str(recording),
                 "--vnc-port", "0", "--rewarder-port", "0"],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
            )
            stack.callback(_stop, process)
            addresses.append(_address(process))
        yield addresses


def _address(process: subprocess.Popen[bytes]) -> str:
    """The address in the remote's banner (its stdout is drained after, by a thread)."""
    lines: queue.Queue[bytes] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(b"")

    threading.Thread(target=read, daemon=True).start()
    while True:
        line = lines.get(timeout=START_TIMEOUT).decode()
        assert line, f"the replay remote exited ({process.wait()}) before it served"
        match = re.search(r"vnc://127\.0\.0\.1:\d+\+\d+", line)
        if match:
            return match.group(0)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(START_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_lockstep_steps_carry_the_episode_s_latest_text(recording: Path, tmp_path: Path) -> None:
    with replaying(recording, 1, tmp_path) as (address,):
        env = RemoteEnv(address, mode="lockstep")
        try:
            seen: set[int] = set()
            for _ in range(len(EPISODES) + 1):  # the remote's own first episode used one
                obs, info = env.reset()
                red, step = shown(obs)
                seen.add(red)
                assert info["instruction"] == expected(red, step) == (info["text"] or [None])[-1]
                terminated = False
                while not terminated:
                    obs, _, terminated, truncated, info = env.step([])
                    assert not truncated
                    red, step = shown(obs)
                    assert info["instruction"] == expected(red, step), (red, step)
                    if step == LATER_STEP and EPISODES[red].get(step):
                        assert info["text"] == [EPISODES[red][step]]  # the texts of this step
                    elif step > 1:
                        assert info["text"] == []
                assert step == STEPS - 1
            assert seen == set(EPISODES)
        finally:
            env.close()


def test_vector_instructions_follow_each_env_through_autoresets(recording: Path, tmp_path: Path) -> None:
    """Real time, two remotes, gymnasium's NEXT_STEP autoreset: every step's instruction
    is its own episode's, the autoreset step's the new episode's at once."""
    with replaying(recording, 2, tmp_path) as addresses:
        venv = RemoteVectorEnv(addresses)
        try:
            obs, info = venv.reset()
            assert info["instruction"].shape == (2,) and info["_instruction"].all()
            for i in range(2):
                assert info["instruction"][i] == expected(*shown(obs[i]))
            autoresets = np.zeros(2, int)
            later = [False, False]  # A's second text came in this episode
            ended = np.zeros(2, bool)
            for _ in range(MAX_REALTIME_STEPS):
                obs, _, terminated, truncated, info = venv.step([[], []])
                assert not truncated.any() and info["_instruction"].all()
                for i in range(2):
                    red, step = shown(obs[i])
                    instruction = info["instruction"][i]
                    if ended[i]:  # the autoreset step: the new episode's, not the old one's
                        autoresets[i] += 1
                        later[i] = False
                        if step < LATER_STEP - 1:
                            assert instruction == expected(red, 0), (i, red, step)
                    if red == 40:  # A's first text until its second came, then that
                        assert instruction in (expected(red, 0), expected(red, LATER_STEP))
                        assert not later[i] or instruction == expected(red, LATER_STEP)
                        later[i] = instruction == expected(red, LATER_STEP)
                        if terminated[i]:
                            assert later[i]
                    else:
                        assert instruction == expected(red, step), (i, red, step)
                ended = terminated | truncated
                if (autoresets >= AUTORESETS).all():
                    break
            else:
                pytest.fail(f"only {autoresets} autoresets in {MAX_REALTIME_STEPS} steps")
        finally:
            venv.close()


def test_a_miniwob_task_s_instruction_stays_all_episode() -> None:
    """The one browser test: gymnasium.make's MiniWoB env, whose instruction comes only
    with the reset's text, still has it at every step; and its click space begins with
    the no-op."""
    pytest.importorskip("miniwob")
    need_program("Xvnc", "chromium")
    env = gymnasium.make("universe-remote/miniwob.ClickTest-v0")
    try:
        points = env.get_wrapper_attr("points")
        assert env.action_space == gymnasium.spaces.Discrete(len(points) + 1)
        _, info = env.reset(seed=0)
        instruction = info["instruction"]
        assert isinstance(instruction, str) and instruction and info["text"][-1] == instruction
        texts = []
        for _ in range(10):
            _, _, terminated, truncated, info = env.step(0)
            assert not (terminated or truncated)  # the no-op clicked nothing
            assert info["instruction"] == instruction
            texts += info["text"]
        assert texts in ([], [instruction])  # the reset's text, at most once more
    finally:
        env.close()
