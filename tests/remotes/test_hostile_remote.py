"""The hostile remote of tests/remotes/hostile_remote.py: each kind starts, steps in
lockstep, and its step reply names the hostile file; the agent side (FrameReader through
SharedFrames.take) refuses it, saying why, without hanging or crashing.

End to end through ``RemoteEnv(mode="lockstep")``: the step that meets the hostile file
returns within the step timeout with ``info["shm.error"]`` saying what was wrong (once),
every observation is the true frame (a normal remote's under the same seed and actions;
Catch is deterministic in lockstep), later steps go on over VNC, a segment truncated
under the agent does not kill it (in a child process: exit 0, no SIGBUS), and after a
reconnect shared memory is tried again: used with a normal remote restarted on the same
ports, refused again (and said again) by the same hostile remote restarted."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest

from remotes import RemoteEnv, start_local
from remotes.local import LocalRemotes
from remotes.shared_frames import SharedFrames
from rewarder import shm
from rewarder.client import RewarderClient
from rewarder.protocol import OBS_SHM, OBS_VNC

from .hostile_remote import KINDS, start_hostile

pytestmark = pytest.mark.skipif(not shm.available(), reason="no writable /dev/shm (Linux only)")

#: What lstat says the named file is, and what the agent's refusal says.
EXPECTED = {
    "fifo": (stat.S_ISFIFO, "is a FIFO, not a regular file"),
    "symlink": (stat.S_ISLNK, "is a symbolic link"),
    "symlink-fifo": (stat.S_ISLNK, "is a symbolic link"),
    "directory": (stat.S_ISDIR, "is a directory, not a regular file"),
    "truncated": (stat.S_ISREG, "is truncated"),
    "bad-dims": (stat.S_ISREG, "frame, the reply named"),
    "other-user": (stat.S_ISREG, "belongs to uid 65534"),
}


@pytest.fixture(params=KINDS)
def hostile(request: pytest.FixtureRequest) -> Iterator[tuple[str, LocalRemotes]]:
    kind = request.param
    if kind == "other-user" and os.geteuid() != 0:
        pytest.skip("only a remote running as root can give its segment to uid 65534")
    with start_hostile(kind) as remote:
        yield kind, remote


@pytest.mark.timeout(60)
async def test_the_hostile_remotes_reply_names_the_hostile_file(
    hostile: tuple[str, LocalRemotes],
) -> None:
    kind, remote = hostile
    is_kind, refusal = EXPECTED[kind]
    address = remote.addresses[0].rewarder
    assert address is not None
    frames = SharedFrames("hostile", enabled=True)
    async with RewarderClient(address, reconnect=False) as client:
        episode = await client.reset(seed=1, mode="lockstep")
        first = await client.step([], 1, obs=OBS_SHM)
        assert first.shm is not None and first.episode_id == episode
        name, height, width = first.shm
        assert name.startswith(shm.PREFIX)
        assert is_kind(os.lstat(shm.SHM_DIR / name).st_mode)
        dest = np.empty((height, width, 3), np.uint8)
        if kind == "truncated":  # whole for the first frame: opened then, truncated after
            assert frames.take(first, dest) and frames.last == (first.frame, episode)
            later = await client.step([], 1, obs=OBS_SHM)
            assert later.shm == first.shm
            assert os.stat(shm.SHM_DIR / name).st_size < shm.PIXELS_AT + height * width * 3
            assert not frames.take(later, dest)
        else:
            assert not frames.take(first, dest)
        error = frames.pop_error()
        assert error is not None and refusal in error and "over VNC" in error, error
        assert frames.obs == OBS_VNC
        frames.forget()
        if kind == "symlink":  # the file it points to is a good segment: only the link is refused
            with shm.FrameReader(f"{name}-target", height, width) as reader:
                assert reader.read_into(dest) == (first.frame, episode)
    assert remote.processes[0].poll() is None  # the remote itself is fine


# The agent meets a hostile segment through RemoteEnv -------------------------------------

#: A step's reply deadline here; the step that meets a hostile file must return well
#: within it (a FIFO opened the plain way would block for good, so any bound proves it).
STEP_TIMEOUT: Final = 5.0
#: Seconds any wait for a condition (a loss reported, a reconnection) may take.
PATIENCE: Final = 30.0
SEED: Final = 3
FRAMESKIP: Final = 4
#: Catch is deterministic under a seed in lockstep: the same seed and these actions give
#: the same frames on any remote (the paddle moves, the ball falls: the frames differ).
ACTIONS: Final = (
    [("KeyEvent", "Left", True)], [], [],
    [("KeyEvent", "Left", False), ("KeyEvent", "Right", True)], [], [], [], [],
)
#: Both remotes step in lockstep from the start (a frame count not left over from real time).
LOCKSTEP_ARGS: Final = ("--mode", "lockstep")
#: A normal remote, started by LocalRemotes.restart on the hostile remote's ports.
NORMAL_SERVE: Final = (
    sys.executable, "-m", "universe_remote", "serve", "builtin.Catch-v0", "--host", "127.0.0.1",
    *LOCKSTEP_ARGS,
)
#: The step whose reply first names a hostile file: the first (a reset's first frame comes
#: through shared memory too: for ``truncated``, the reset's frame is written whole, the
#: agent opens the segment then, and it is truncated by the first step's).
HOSTILE_STEP: Final = {"truncated": 0}
#: Run in a child process (a SIGBUS there fails the test, not the test run).
CHILD: Final = """
import json, sys
from tests.remotes.test_hostile_remote import Reference, meet_the_hostile_segment
print(json.dumps(meet_the_hostile_segment(sys.argv[1], Reference.load(sys.argv[2]))), flush=True)
"""
_REPO: Final = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Step:
    obs: np.ndarray
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    seconds: float
    #: SharedFrames.last after the step: (frame, episode) read from shared memory, or None.
    shm: tuple[int, int] | None


@dataclass(frozen=True)
class Reference:
    """What a normal remote shows for SEED and ACTIONS: the reset's frame, then each step's."""

    obs: np.ndarray
    rewards: np.ndarray

    def save(self, path: Path) -> None:
        np.savez(path, obs=self.obs, rewards=self.rewards)

    @classmethod
    def load(cls, path: str | Path) -> Reference:
        with np.load(path) as data:
            return cls(data["obs"], data["rewards"])


def new_env(remote: LocalRemotes) -> RemoteEnv:
    return RemoteEnv(remote.addresses[0], remote.password, mode="lockstep", frameskip=FRAMESKIP,
                     stall_timeout=STEP_TIMEOUT, start_timeout=PATIENCE)


def last_shm(env: RemoteEnv) -> tuple[int, int] | None:
    async def read() -> tuple[int, int] | None:
        return env.session.shared.last

    return env.loop.run(read())


def play(env: RemoteEnv) -> tuple[np.ndarray, dict[str, Any], list[Step]]:
    """Reset with SEED (reconnecting a remote that is away), then step ACTIONS."""
    obs, info = env.reset(seed=SEED)
    first = obs.copy()
    steps = []
    for action in ACTIONS:
        started = time.monotonic()
        obs, reward, terminated, truncated, step_info = env.step(action)
        seconds = time.monotonic() - started
        steps.append(Step(obs.copy(), float(reward), terminated, truncated, step_info, seconds,
                          last_shm(env)))
    return first, info, steps


def check_frames(reference: Reference, first: np.ndarray, info: dict[str, Any],
                 steps: list[Step]) -> None:
    """Every step connected, exactly FRAMESKIP frames on, with the normal remote's pixels
    and rewards."""
    same = np.array_equal(first, reference.obs[0])
    assert same, "the reset's frame is not the true frame"
    for i, step in enumerate(steps, 1):
        assert step.info["remote.connected"] is True, (i, step.info)
        assert not step.terminated and not step.truncated, (i, step.info)
        assert step.info["frame"] == info["frame"] + i * FRAMESKIP, (i, step.info)
        assert step.info["episode_id"] == info["episode_id"], (i, step.info)
        same = np.array_equal(step.obs, reference.obs[i])
        assert same, f"step {i}: not the true frame ({step.info.get('shm.error')})"
        assert step.reward == reference.rewards[i - 1]


def wait_until_lost(env: RemoteEnv) -> dict[str, Any]:
    """Step a remote that was restarted under the env until a step reports it lost."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        _, _, terminated, truncated, info = env.step([])
        assert not terminated, info
        if truncated:
            assert info["remote.connected"] is False and info["remote.error"], info
            return info
    raise AssertionError(f"the restart was not reported within {PATIENCE:g} s")


def vnc_view(env: RemoteEnv) -> tuple[np.ndarray, int | None]:
    """What the env's own VNC client shows (pixels, frame number)."""
    async def read() -> tuple[np.ndarray, int | None]:
        vnc = env.session.vnc
        assert vnc is not None
        return vnc.framebuffer.copy(), None if vnc.tag is None else vnc.tag.frame

    return env.loop.run(read())


def meet_the_hostile_segment(kind: str, reference: Reference) -> dict[str, Any]:
    """RemoteEnv against a remote whose segment is ``kind``: the step that meets it
    returns in time with ``info["shm.error"]`` saying why, every frame (that one too) is
    the true frame, over VNC from then on; after the remote restarts as a normal one on
    the same ports and the env reconnects, frames come through shared memory again.
    Returns what the report needs (seconds, the error)."""
    hostile_step = HOSTILE_STEP.get(kind, 0)
    refusal = EXPECTED[kind][1]
    with start_hostile(kind, extra_args=LOCKSTEP_ARGS) as remote:
        env = new_env(remote)
        try:
            first, info, steps = play(env)
            check_frames(reference, first, info, steps)
            reported = [i for i, step in enumerate(steps) if "shm.error" in step.info]
            assert reported == [hostile_step], reported  # once, on the step that met it
            met = steps[hostile_step]
            error = met.info["shm.error"]
            assert refusal in error and "over VNC" in error, error
            assert met.seconds < STEP_TIMEOUT, f"the hostile step took {met.seconds:.2f} s"
            for step in steps[:hostile_step]:  # whole then: read from shared memory
                assert step.shm == (step.info["frame"], step.info["episode_id"])
            assert all(step.shm is None for step in steps[hostile_step:])  # over VNC since
            pixels, frame = vnc_view(env)
            shown = np.array_equal(pixels, steps[-1].obs)
            assert frame == steps[-1].info["frame"] and shown, "VNC shows another frame"
            assert remote.processes[0].poll() is None

            remote.command = list(NORMAL_SERVE)
            remote.restart(0, timeout=PATIENCE)
            lost = wait_until_lost(env)
            first, info, steps = play(env)  # the reset takes the restarted remote back
            check_frames(reference, first, info, steps)
            assert not any("shm.error" in step.info for step in steps)
            assert all(step.shm == (step.info["frame"], step.info["episode_id"]) for step in steps)
        finally:
            env.close()
    return {"error": error, "seconds": met.seconds, "lost": lost["remote.error"]}


@pytest.fixture(scope="module")
def reference() -> Reference:
    """SEED and ACTIONS on a normal local remote (frames through shared memory)."""
    with start_local("builtin.Catch-v0", extra_args=LOCKSTEP_ARGS) as local:
        env = new_env(local)
        try:
            first, _, steps = play(env)
        finally:
            env.close()
    assert all(step.shm == (step.info["frame"], step.info["episode_id"]) for step in steps)
    assert not any("shm.error" in step.info for step in steps)
    obs = np.stack([first, *(step.obs for step in steps)])
    assert len({frame.tobytes() for frame in obs}) == len(obs)  # every step changes the screen
    return Reference(obs, np.array([step.reward for step in steps]))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", [k for k in KINDS if k != "truncated"])
def test_a_hostile_segment_is_reported_in_info_and_frames_come_over_vnc(
    kind: str, reference: Reference
) -> None:
    if kind == "other-user" and os.geteuid() != 0:
        pytest.skip("only a remote running as root can give its segment to uid 65534")
    meet_the_hostile_segment(kind, reference)


@pytest.mark.timeout(120)
def test_a_segment_truncated_under_the_agent_is_reported_and_the_agent_lives(
    reference: Reference, tmp_path: Path
) -> None:
    """The truncated segment, in a child process: a reader that mapped it would die of
    SIGBUS; this one exits 0 having met it on the second step."""
    path = tmp_path / "reference.npz"
    reference.save(path)
    pythonpath = os.pathsep.join(p for p in (str(_REPO), os.environ.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [sys.executable, "-c", CHILD, "truncated", str(path)], cwd=_REPO, capture_output=True,
        text=True, timeout=100, env={**os.environ, "PYTHONPATH": pythonpath},
    )
    assert result.returncode != -signal.SIGBUS, result.stderr
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert EXPECTED["truncated"][1] in report["error"] and report["seconds"] < STEP_TIMEOUT


@pytest.mark.timeout(120)
def test_a_reconnect_tries_shared_memory_again(reference: Reference) -> None:
    """Shared memory stays off only until the next reconnect: the same hostile remote,
    restarted, is tried again (and refused again, said again once), frames still true."""
    with start_hostile("fifo", extra_args=LOCKSTEP_ARGS) as remote:
        env = new_env(remote)
        try:
            first, info, steps = play(env)
            check_frames(reference, first, info, steps)
            assert [i for i, s in enumerate(steps) if "shm.error" in s.info] == [0]
            remote.restart(0, timeout=PATIENCE)  # hostile again
            wait_until_lost(env)
            first, info, steps = play(env)
            check_frames(reference, first, info, steps)
            assert [i for i, s in enumerate(steps) if "shm.error" in s.info] == [0]
            assert "is a FIFO" in steps[0].info["shm.error"]
            assert all(step.shm is None for step in steps)
        finally:
            env.close()
