"""Works where researchers run it: the envs stepped from a Jupyter kernel's running loop,
from several threads, in gymnasium's AsyncVectorEnv workers (fork, forkserver, spawn),
across a Ctrl-C, by a slow learner, and past a remote that is SIGSTOPped — each with
real local remotes.

Written against the agent side whose lockstep steps borrowed the loop thread's asyncio
loop (``LoopThread.run(..., inline=True)``): that design fails most of these (a step
inside a running loop, a second stepping thread, a forked worker, a Ctrl-C mid-step, a
vector step held by one stopped remote); the new agent side (lockstep in the caller's
thread, ``docs/design.md`` "The agent side") must pass them all.

Scenarios that are a user's own script (a notebook's loop, AsyncVectorEnv, Ctrl-C) run
as subprocesses of ``tests/remotes/where_users_run_scripts.py``: a fresh interpreter, no
pytest threads around a fork, and a hang bounded by the subprocess's timeout. Every wait
here is bounded (events, joins and process waits with timeouts, pytest-timeout on top).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest

from remotes import RemoteEnv, RemoteVectorEnv, start_local
from rewarder.server import TEST_KEEPALIVE_INTERVAL_ENV
from tests.optional import need_extra, needs_env
from tests.remotes.where_users_run_scripts import NOTEBOOK_KINDS, NOTEBOOK_STEPS, SOURCES, VECTOR_STEPS

#: The repository root: the scripts run as ``python -m tests.remotes....`` from here.
ROOT: Final = Path(__file__).resolve().parents[2]
#: ``serve`` arguments of a lockstep remote.
LOCKSTEP: Final = ["--mode", "lockstep"]
#: Seconds a scripted scenario may take in all (starting remotes included) before it
#: counts as hung.
SCRIPT_TIMEOUT: Final = 120.0


def run_script(*args: str, timeout: float = SCRIPT_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run a scenario of where_users_run_scripts; a hang is a failure after ``timeout``.

    RuntimeWarnings are always shown (a coroutine never awaited is one)."""
    command = [sys.executable, "-W", "always::RuntimeWarning", "-m",
               "tests.remotes.where_users_run_scripts", *args]
    try:
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        pytest.fail(f"{' '.join(args)} hung: no exit within {timeout:g} s\nstdout:\n{out[-3000:]}\n"
                    f"stderr:\n{err[-5000:]}")


def script_result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The scenario's RESULT line, once it exited 0."""
    assert proc.returncode == 0, (
        f"exit code {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0].removeprefix("RESULT "))  # type: ignore[no-any-return]


def vector_info(info: dict[str, Any], key: str, i: int) -> Any:
    """Env ``i``'s ``info[key]`` from a vector env's batched infos, or None."""
    if key not in info or not info[f"_{key}"][i]:
        return None
    return info[key][i]


# 1. Inside a running asyncio loop (every Jupyter kernel) ----------------------------------


@pytest.mark.timeout(SCRIPT_TIMEOUT + 30)
@pytest.mark.parametrize("kind", list(NOTEBOOK_KINDS))
def test_sync_steps_inside_a_running_asyncio_loop(kind: str) -> None:
    if "Parallel" in kind:
        need_extra("multiagent")
    """``asyncio.run(main())`` where ``main`` makes and steps the env with plain sync
    calls, as a notebook cell does: every step returns a frame and a reward, the screen
    changes, the frames advance, and no coroutine is left never awaited."""
    proc = run_script("notebook", kind)
    found = script_result(proc)
    assert "never awaited" not in proc.stderr, proc.stderr[-5000:]
    assert found["steps"] == NOTEBOOK_STEPS
    assert found["distinct_obs"] >= 5, found  # the ball falls / flies: the screen changes
    assert all(isinstance(r, float | dict | list) for r in found["rewards"])
    if "frames" in found:
        frames = np.array(found["frames"])
        if kind.endswith("lockstep"):
            assert (np.diff(frames, axis=0) == 2).all(), frames.tolist()  # exactly frameskip
        else:  # real time: the newest frame, never an older one
            assert (np.diff(frames, axis=0) >= 0).all() and (frames[-1] > frames[0]).all(), frames.tolist()
    if kind == "RemoteVectorEnv-batched-lockstep":  # its steady steps' frames written in place
        assert found["in_place"] > NOTEBOOK_STEPS // 2, found
    if "env_frames" in found:  # send/recv: each remote exactly frameskip on per result, in its steady way
        assert all(len(seq) > 2 and (np.diff(seq) == 2).all() for seq in found["env_frames"].values()), found
        assert found["steady"] > NOTEBOOK_STEPS // 2, found


# 2. Two threads, each stepping its own lockstep env ---------------------------------------

#: Seconds each thread steps.
THREAD_SECONDS: Final = 10.0
#: Steps each thread must at least make in that time (one alone makes thousands).
THREAD_MIN_STEPS: Final = 200


@pytest.mark.timeout(120)
def test_two_threads_each_step_their_own_lockstep_env() -> None:
    with start_local("builtin.Catch-v0", 2, extra_args=LOCKSTEP) as local:
        start = threading.Barrier(2, timeout=60)
        steps = [0, 0]
        errors: list[str] = []

        def agent(i: int) -> None:
            env = None
            try:
                env = RemoteEnv(local.addresses[i], local.password, mode="lockstep", frameskip=2)
                env.reset(seed=i)
                start.wait()
                deadline = time.monotonic() + THREAD_SECONDS
                while time.monotonic() < deadline:
                    _, _, terminated, truncated, info = env.step([("KeyEvent", "Left", steps[i] % 2 == 0)])
                    if "remote.error" in info:
                        errors.append(f"thread {i}: {info['remote.error']}")
                        return
                    steps[i] += 1
                    if terminated or truncated:
                        env.reset()
            except BaseException:  # noqa: B036 - every failure of the thread is the finding
                errors.append(f"thread {i} after {steps[i]} steps:\n{traceback.format_exc()}")
                start.abort()
            finally:
                if env is not None:
                    env.close()

        threads = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(THREAD_SECONDS + 60)
        assert not any(t.is_alive() for t in threads), f"a stepping thread hung (steps {steps}, {errors})"
    assert errors == [], "\n".join(errors)
    assert min(steps) > THREAD_MIN_STEPS, steps


# 3. gymnasium's AsyncVectorEnv, after the parent made and stepped an env ------------------


@pytest.mark.timeout(SCRIPT_TIMEOUT + 30)
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("context", ["fork", "forkserver", "spawn"])
def test_async_vector_env_after_the_parent_stepped_its_own(context: str, source: str) -> None:
    """A script steps its own lockstep env, then an ``AsyncVectorEnv`` of 2 lockstep envs
    made by ``gymnasium.make`` in the workers (each starts its local remote, or connects to
    one the script started), reset + 20 steps + close, and its own env still steps after."""
    found = script_result(run_script("async-vector", context, source))
    frames = np.array(found["frames"])
    assert frames.shape == (VECTOR_STEPS, 2)
    assert (np.diff(frames, axis=0) == 2).all(), frames.tolist()  # lockstep, frameskip 2
    assert found["distinct_obs"] >= 5, found
    assert np.diff(found["own_frames"]).tolist() == [2] * 9, found["own_frames"]


# 4. Ctrl-C mid-step ------------------------------------------------------------------------

#: Seconds the script has after the interrupt to step B 50 times and A 10 (and reset A).
AFTER_INTERRUPT: Final = 60.0


@pytest.mark.timeout(SCRIPT_TIMEOUT + AFTER_INTERRUPT + 30)
@needs_env("atari.Pong-v0")
def test_ctrl_c_mid_step_leaves_every_env_usable(tmp_path: Path) -> None:
    """Ctrl-C while lockstep env A is inside a step: the script catches the
    KeyboardInterrupt, steps env B 50 times, then steps A (which goes on, its
    interrupted step returned by the next), resets it and steps it."""
    command = [sys.executable, "-W", "always::RuntimeWarning", "-m",
               "tests.remotes.where_users_run_scripts", "ctrl-c"]
    stderr = tmp_path / "stderr"
    # Its own session: the SIGINT goes to the script alone, never to pytest.
    with open(stderr, "w") as err_file:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=err_file,
                                text=True, start_new_session=True)
    lines: list[str] = []
    stepping = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.strip() == "stepping":
                stepping.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not stepping.wait(SCRIPT_TIMEOUT):
            pytest.fail(f"the script never started stepping A: {lines}\n{stderr.read_text()[-5000:]}")
        os.kill(proc.pid, signal.SIGINT)  # A is inside a step of a whole Pong episode
        try:
            proc.wait(AFTER_INTERRUPT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the script hung after Ctrl-C; its output: {lines}\n{stderr.read_text()[-5000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    reader.join(10)
    err = stderr.read_text()
    assert proc.returncode == 0, f"exit code {proc.returncode}; output {lines}\nstderr:\n{err[-5000:]}"
    results = [line for line in lines if line.startswith("RESULT ")]
    assert len(results) == 1, lines
    found = json.loads(results[0].removeprefix("RESULT "))
    assert found["in_step"], f"the interrupt did not land inside a step of A: {lines}"
    assert found["b_steps"] == 50
    b_frames = np.array(found["b_frames"])
    assert (np.diff(b_frames)[np.diff(b_frames) > 0] == 2).all(), b_frames.tolist()
    # A's next step never raises and goes on: the interrupted step's reply comes in with
    # it (a send is never cut in half: the interrupt waits for the frame to be out, so the
    # connection survives); after a reset A steps again.
    assert found["a_error"] is None, found["a_error"]
    assert found["a_steps_after"] == 5 and not found["a_truncated"], found
    assert found["a_steps_after_reset"] == 5, found


# 5. A slow learner's lockstep Pong episode ----------------------------------------------------

#: Seconds the slow learner plays.
SLOW_SECONDS: Final = 10.0
#: Seconds between the remote's keepalive pings here (the product's: 1 s): as many
#: ping-pong rounds in SLOW_SECONDS as a minute at the default (the pong's deadline and
#: the agent's keeper stay the product's).
QUICK_KEEPALIVE: Final = 0.1
#: Seconds the learner thinks between steps.
THINK: Final = 0.05


@pytest.mark.timeout(SLOW_SECONDS + 90)
def test_a_slow_learner_keeps_its_lockstep_pong_episode(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lockstep Pong episode (frames through shared memory: a local remote) stepped
    by a learner that thinks 50 ms before each step, through a minute's worth of
    keepalive rounds, frameskip 1 so the episode lasts: never truncated, never an error,
    one episode throughout."""
    pytest.importorskip("ale_py")
    monkeypatch.setenv(TEST_KEEPALIVE_INTERVAL_ENV, str(QUICK_KEEPALIVE))
    with start_local("atari.Pong-v0", 1, extra_args=LOCKSTEP) as local:
        env = RemoteEnv(local, mode="lockstep", frameskip=1)
        try:
            _, info = env.reset(seed=0)
            episode, frame = info["episode_id"], info.get("frame", 0)
            steps, started = 0, time.monotonic()
            while time.monotonic() - started < SLOW_SECONDS:
                # The learner's work between steps. This sleep is the behaviour under test
                # (a slow learner), not a wait for anything.
                time.sleep(THINK)
                _, _, terminated, truncated, info = env.step([])
                steps += 1
                assert "remote.error" not in info, (steps, info)
                assert not truncated and not terminated, (steps, info)
                assert info["episode_id"] == episode, (steps, info)
                assert info["frame"] == frame + 1, (steps, frame, info)
                frame = info["frame"]
        finally:
            env.close()
    assert steps >= SLOW_SECONDS / THINK / 2, steps  # it did step all along


def test_the_quick_keepalive_is_test_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The slow learner's remote pings every QUICK_KEEPALIVE s; without the variable a
    remote keeps the product's interval."""
    from rewarder.server import KEEPALIVE_INTERVAL, RewarderServer

    assert RewarderServer(None).limits.keepalive_interval == KEEPALIVE_INTERVAL  # type: ignore[arg-type]
    monkeypatch.setenv(TEST_KEEPALIVE_INTERVAL_ENV, str(QUICK_KEEPALIVE))
    assert RewarderServer(None).limits.keepalive_interval == QUICK_KEEPALIVE  # type: ignore[arg-type]


# 6. One of 4 lockstep remotes SIGSTOPped --------------------------------------------------------

#: The stopped remote's own deadline.
STOP_STALL_TIMEOUT: Final = 3.0
#: Slack past that deadline for the report on a loaded 2-core machine.
REPORT_SLACK: Final = 3.0
#: A step may take this long while one remote is stopped (it must not wait out the
#: stopped remote's deadline).
MAX_STEP_SECONDS: Final = 2.0
#: Steps in which each running remote's frame must advance between the SIGSTOP and the
#: stopped remote's report (alone they make hundreds a second).
MIN_ADVANCES: Final = 50
#: Seconds the stopped remote has to come back after SIGCONT.
COME_BACK: Final = 30.0


def step_all(env: RemoteVectorEnv) -> tuple[float, np.ndarray, np.ndarray, dict[str, Any]]:
    started = time.monotonic()
    _, _, terminated, truncated, info = env.step([[]] * env.num_envs)
    return time.monotonic() - started, terminated, truncated, info


def frames_of(info: dict[str, Any], indices: Sequence[int]) -> dict[int, int | None]:
    return {i: vector_info(info, "frame", i) for i in indices}


@pytest.mark.timeout(150)
def test_a_stopped_remote_does_not_hold_the_other_three() -> None:
    stopped = 1
    others = [0, 2, 3]
    # A process of its own for each (lockstep's default shares a process per core).
    with start_local("builtin.Catch-v0", 4, extra_args=LOCKSTEP, games_per_process=1) as local:
        env = RemoteVectorEnv(local, mode="lockstep", frameskip=2, stall_timeout=STOP_STALL_TIMEOUT)
        pid = local.processes[stopped].pid
        try:
            env.reset(seed=0)
            for _ in range(20):
                _, _, _, info = step_all(env)
            last = frames_of(info, others)
            os.kill(pid, signal.SIGSTOP)
            stopped_at = time.monotonic()
            advances = dict.fromkeys(others, 0)
            durations: list[float] = []
            reported = None
            while time.monotonic() - stopped_at < STOP_STALL_TIMEOUT + REPORT_SLACK + MAX_STEP_SECONDS:
                took, terminated, truncated, info = step_all(env)
                durations.append(took)
                for i in others:
                    assert not truncated[i] and vector_info(info, "remote.error", i) is None, (i, info)
                now = frames_of(info, others)
                for i in others:
                    if now[i] is not None and now[i] != last[i]:
                        advances[i] += 1
                last = now
                if truncated[stopped]:
                    reported = time.monotonic() - stopped_at
                    error = vector_info(info, "remote.error", stopped)
                    break
            assert reported is not None, (
                f"the stopped remote was never reported; {len(durations)} steps, longest "
                f"{max(durations):.2f} s"
            )
            assert error, info
            # By its own deadline: not before it, not long after.
            assert STOP_STALL_TIMEOUT - 0.5 <= reported <= STOP_STALL_TIMEOUT + REPORT_SLACK, reported
            # The others stepped on meanwhile, at a good rate.
            assert max(durations) < MAX_STEP_SECONDS, (
                f"a step took {max(durations):.2f} s waiting for the stopped remote "
                f"({len(durations)} steps in {reported:.2f} s)"
            )
            assert min(advances.values()) >= MIN_ADVANCES, (advances, len(durations), reported)

            os.kill(pid, signal.SIGCONT)
            back_at = time.monotonic() + COME_BACK
            while time.monotonic() < back_at:
                _, _, truncated, info = step_all(env)
                for i in others:
                    assert vector_info(info, "remote.error", i) is None, (i, info)
                if vector_info(info, "remote.reconnected", stopped):
                    break
            else:
                pytest.fail(f"the remote never came back within {COME_BACK:g} s of SIGCONT")
            first = vector_info(info, "frame", stopped)
            for _ in range(10):
                _, _, truncated, info = step_all(env)
                assert not truncated[stopped], info
            assert vector_info(info, "frame", stopped) > first, info  # it steps again
        finally:
            os.kill(pid, signal.SIGCONT)
            env.close()
