"""Runtime failures never wedge the remote; bad arguments are refused; long steps don't hold
the loop; a heartbeat keeps idle clients informed."""

from __future__ import annotations

import asyncio
import errno
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
import websockets

from envserver import lockstep_frames, remote as remote_module
from envserver.cli import EXIT_RUNTIME_FAILED
from envserver.orders import StepOrder
from envserver.remote import MAX_RUNTIME_FAILURES, Remote
from envserver.state import State
from rewarder import connections, protocol
from rewarder.client import RewarderClient
from rewarder.errors import RemoteError
from runtimes import registry
from runtimes.base import InputEvent, StepResult
from runtimes.builtin import Catch
from tests.conftest import StartRemote

WAIT = 10.0
#: Slowest observer ping allowed during a 10,000-frame lockstep Pong step (seconds).
MAX_PING_DURING_A_LONG_STEP = 0.1


class Flaky(Catch):
    """Catch that raises once in whichever of reset/step/advance is armed."""

    env_id = "test.Flaky-v0"

    def __init__(self) -> None:
        self.armed: set[str] = set()
        super().__init__()

    def _maybe_fail(self, where: str) -> None:
        if where in self.armed:
            self.armed.discard(where)
            raise RuntimeError(f"injected failure in {where}")

    def reset(self, seed: int | None = None) -> None:
        self._maybe_fail("reset")
        super().reset(seed)

    def step(self, events: Sequence[InputEvent]) -> StepResult:
        self._maybe_fail("step")
        return super().step(events)

    def advance(self, events: Sequence[InputEvent], frames: int) -> StepResult:
        self._maybe_fail("advance")
        return super().advance(events, frames)

    def _draw(self) -> None:
        self._maybe_fail("draw")
        super()._draw()


class Broken(Catch):
    """Catch whose constructor always raises: an env switch to it fails."""

    env_id = "test.Broken-v0"

    def __init__(self) -> None:
        raise RuntimeError("injected failure in the constructor")


async def running_again(client: RewarderClient, remote: Remote) -> None:
    """Wait until the remote is running again, as a client sees it."""
    async with asyncio.timeout(WAIT):
        while remote.state is not State.RUNNING:
            await remote.wait_frame() if remote.mode == "realtime" else asyncio.sleep(0.01)
    await client.wait_for_state("running", timeout=WAIT)


@pytest.fixture
def flaky() -> Flaky:
    return Flaky()


@pytest.mark.parametrize("mode", ["realtime", "lockstep"])
async def test_a_reset_that_raises_gets_an_error_then_the_remote_runs_again(
    start_remote: StartRemote, flaky: Flaky, mode: str
) -> None:
    remote = await start_remote(flaky, mode=mode)
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset(seed=1)
        flaky.armed.add("reset")
        with pytest.raises(RemoteError, match="failed in reset.*injected.*recovering"):
            await client.reset(seed=2)
        await running_again(client, remote)
        episode = await client.reset(seed=3)  # and the remote works as before
        assert episode == remote.episode_id and remote.state is State.RUNNING
        if mode == "lockstep":
            assert (await client.step([], frames=2)).frame == remote.frame


async def test_a_lockstep_advance_that_raises_gets_an_error_then_runs_again(
    start_remote: StartRemote, flaky: Flaky
) -> None:
    remote = await start_remote(flaky, mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset(seed=1)
        flaky.armed.add("advance")
        with pytest.raises(RemoteError, match="failed in step.*injected failure in advance"):
            await client.step([("KeyEvent", "Left", True)], frames=4)
        await running_again(client, remote)
        await client.reset(seed=1)
        reply = await client.step([], frames=3)
        assert reply.frame == remote.frame and not reply.done


async def test_a_realtime_step_that_raises_recovers_by_itself(
    start_remote: StartRemote, flaky: Flaky
) -> None:
    remote = await start_remote(flaky)
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        first = await client.reset(seed=1)
        flaky.armed.update({"step", "advance"})  # whichever the loop calls
        async with asyncio.timeout(WAIT):
            while remote.episode_id == first:  # recovery starts a new episode
                await asyncio.sleep(0.01)
        await running_again(client, remote)
        frame = await remote.wait_frame()
        assert await remote.wait_frame(frame + 2) > frame  # ticking again
        assert await client.reset() == remote.episode_id


async def test_an_env_switch_that_raises_gets_an_error_then_runs_again(
    start_remote: StartRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_lookup = registry.lookup
    monkeypatch.setattr(
        remote_module.registry, "lookup",
        lambda env_id: Broken if env_id == Broken.env_id else real_lookup(env_id),
    )
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset(seed=1)
        # The error names the env that failed, not the one being left (issue 34).
        with pytest.raises(RemoteError, match=f": {re.escape(Broken.env_id)} failed in the switch "
                           "to it from builtin.Catch-v0.*constructor.*recovering"):
            await client.reset(env_id=Broken.env_id)
        await running_again(client, remote)
        await client.reset(seed=1)
        assert remote.runtime.env_id == "builtin.Catch-v0"
        assert (await client.step([], frames=1)).frame == remote.frame


async def test_a_runtime_that_never_recovers_fails_the_remote(start_remote: StartRemote) -> None:
    class Hopeless(Catch):
        gone = False

        def reset(self, seed: int | None = None) -> None:
            if self.gone:
                raise RuntimeError("injected: this runtime is gone")
            super().reset(seed)

    runtime = Hopeless()
    remote = await start_remote(runtime, mode="lockstep")
    runtime.gone = True
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        with pytest.raises(RemoteError, match="failed in reset"):
            await client.reset(seed=1)
        reason = await asyncio.wait_for(asyncio.shield(remote.failed), 30)
    assert f"{MAX_RUNTIME_FAILURES} times in a row" in reason
    assert remote.state is State.CLOSING


def test_serve_exits_non_zero_when_the_runtime_cannot_recover(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The real command: a supervisor sees a non-zero exit and a log line saying why."""
    script = textwrap.dedent(
        """
        import sys
        from runtimes import registry
        from runtimes.builtin import Catch

        class Hopeless(Catch):
            env_id = "test.Hopeless-v0"
            def step(self, events):
                raise RuntimeError("injected: the game crashed")
            def advance(self, events, frames):
                raise RuntimeError("injected: the game crashed")

        real = registry.lookup
        registry.lookup = lambda env_id: Hopeless if env_id == Hopeless.env_id else real(env_id)
        from universe_remote.cli import main
        sys.exit(main(["serve", "test.Hopeless-v0", "--vnc-port", "0", "--rewarder-port", "0"]))
        """
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == EXIT_RUNTIME_FAILED, done.stderr[-2000:]
    assert "MAX_RUNTIME_FAILURES" in done.stderr and "giving up" in done.stderr
    assert time.monotonic() - started < 45


@pytest.mark.parametrize("fps", [1e-9, 0, -5, protocol.MAX_FPS * 10])
async def test_fps_outside_the_limits_is_refused(start_remote: StartRemote, fps: float) -> None:
    remote = await start_remote("builtin.Catch-v0")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset()
        with pytest.raises(RemoteError, match=r"fps must be a number in \[1, 1000\].*MIN_FPS"):
            await client.reset(fps=fps)
        frame = await remote.wait_frame()
        assert await remote.wait_frame(frame + 2) > frame  # still ticking at its old rate
        assert remote.fps == 60.0


async def test_an_fps_change_wakes_a_slow_loop_at_once(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0", fps=protocol.MIN_FPS)
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset(fps=protocol.MIN_FPS)
        await client.reset(fps=60)
        start = remote.frame
        async with asyncio.timeout(0.5):  # at 1 fps the next frame would be ~1 s away
            await remote.wait_frame(start + 5)


@pytest.mark.parametrize("seed", [-1, protocol.MAX_SEED + 1])
async def test_seeds_outside_the_limits_are_refused(start_remote: StartRemote, seed: int) -> None:
    remote = await start_remote("builtin.Catch-v0")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        with pytest.raises(RemoteError, match="MAX_SEED"):
            await client.reset(seed=seed)


async def test_a_long_lockstep_step_never_holds_an_observers_ping(
    start_remote: StartRemote,
) -> None:
    pytest.importorskip("ale_py")
    remote = await start_remote("atari.Pong-v0", mode="lockstep")
    port = remote.rewarder.port
    async with RewarderClient(f"127.0.0.1:{port}") as agent, RewarderClient(
        f"127.0.0.1:{port}", observer=True, calibration_pings=0
    ) as observer:
        await agent.reset(seed=1)
        rtts: list[float] = []
        stepping = asyncio.Event()

        async def ping_every_5_ms() -> None:
            while True:
                rtts.append(await observer.ping())
                stepping.set()
                await asyncio.sleep(0.005)

        pinger = asyncio.create_task(ping_every_5_ms())
        await stepping.wait()
        frame, before = remote.frame, len(rtts)
        started = time.perf_counter()
        reply = await agent.step([], frames=protocol.MAX_STEP_FRAMES)
        took = time.perf_counter() - started
        during = len(rtts) - before
        pinger.cancel()
    assert reply.frame - frame > 1000, reply  # a long step (Pong ends after ~3,000 frames)
    # Pings really went on during it: one per bound's worth of step at least.
    assert during >= max(2.0, took / MAX_PING_DURING_A_LONG_STEP), (during, took)
    # A bound a busy 2-core machine keeps (22.6 ms seen) that still catches what slicing
    # fixed: an unsliced step held pings for the whole step (356 ms). The 20 ms goal is the
    # long_step benchmark's (benchmarks/long_step.py, PING_LIMIT).
    assert max(rtts) < MAX_PING_DURING_A_LONG_STEP, (
        f"slowest ping {max(rtts) * 1000:.1f} ms in a {took:.2f} s step"
    )


async def test_a_heartbeat_describe_reaches_idle_clients(
    start_remote: StartRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote_module, "HEARTBEAT_INTERVAL", 0.05)
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")  # nothing else moves
    async with RewarderClient(
        f"127.0.0.1:{remote.rewarder.port}", observer=True, calibration_pings=0
    ) as client:
        seen = await client.wait_for_state("running", timeout=WAIT)
        async with asyncio.timeout(WAIT):
            while client.describe is seen:
                await asyncio.sleep(0.01)
        body = client.describe.body  # type: ignore[union-attr]
    assert body["remote_state"] == "running" and body["late_ticks"] == remote.late_ticks


async def test_the_stepper_gets_its_lockstep_reward_once(start_remote: StartRemote) -> None:
    """In the reply only; an observer gets it as v0.env.reward."""
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    url = f"ws://127.0.0.1:{remote.rewarder.port}"
    observed: list[float] = []
    async with websockets.connect(
        url, additional_headers={protocol.OBSERVER_HEADER: "true"}
    ) as observer, RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as agent:
        await agent.reset(seed=1)
        total = 0.0
        for _ in range(200):
            reply = await agent.step([], frames=30)
            total += reply.reward
            if reply.done:
                break
        assert reply.done and total != 0
        await agent.ping()  # anything broadcast before the reply has arrived by now
        leftover = agent.pop()
        assert leftover.reward == 0 and leftover.count == 0  # nothing came twice
        async with asyncio.timeout(WAIT):
            while True:
                message = orjson.loads(await observer.recv())
                if message["method"] == protocol.ENV_REWARD:
                    observed.append(message["body"]["reward"])
                    if message["body"]["done"]:
                        break
    assert sum(observed) == total


def once(error: BaseException, then: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """A stand-in that raises ``error`` on its first call and then calls ``then``."""
    calls = []

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 1:
            raise error
        return then(*args, **kwargs) if then is not None else None

    return stand_in


def full_shm(remote: Remote, flaky: Flaky, monkeypatch: pytest.MonkeyPatch) -> None:
    """/dev/shm full when the step's segment is made (FrameSegment reserves its pages)."""
    full = OSError(errno.ENOSPC, "No space left on device (injected)")
    monkeypatch.setattr(lockstep_frames.shm, "FrameSegment", once(full, lockstep_frames.shm.FrameSegment))


def vnc_refuses_the_frame(remote: Remote, flaky: Flaky, monkeypatch: pytest.MonkeyPatch) -> None:
    assert remote.vnc is not None
    refusal = once(RuntimeError("injected: VNC"), remote.vnc.frame_ready)
    monkeypatch.setattr(remote.vnc, "frame_ready", refusal)


def draw_raises(remote: Remote, flaky: Flaky, monkeypatch: pytest.MonkeyPatch) -> None:
    flaky.armed.add("draw")


def reset_reply_send_raises(remote: Remote, flaky: Flaky, monkeypatch: pytest.MonkeyPatch) -> None:
    real = connections.ServerConnection.reply_reset
    monkeypatch.setattr(connections.ServerConnection, "reply_reset",
                        once(OSError(errno.EPIPE, "injected: the reply's send"), real))


#: Points between a step's or a reset's event and its completion, where the injected
#: failure raises, what the request is, and what the error names.
UNDER_WAY_FAILURES = {
    "shared-memory hand-off": (full_shm, "step-shm", r"handing its frame over.*No space left"),
    "VNC hand-off": (vnc_refuses_the_frame, "step", r"handing its frame over.*injected: VNC"),
    "the runtime's draw": (draw_raises, "step", r"failed in step.*injected failure in draw"),
    "the reset reply's send": (reset_reply_send_raises, "reset", r"failed in reset.*the reply's send"),
}


@pytest.mark.parametrize("point", sorted(UNDER_WAY_FAILURES))
async def test_a_failure_between_an_event_and_its_completion_never_wedges_the_remote(
    start_remote: StartRemote, flaky: Flaky, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    """Whatever raises under way — the runtime, a hand-off, a send — the requester gets
    v0.reply.error and the remote goes recovering, then running: the next reset and step
    work (before, a raising shared-memory hand-off left it stepping for good: every later
    step and reset refused until a restart)."""
    inject, request, says = UNDER_WAY_FAILURES[point]
    remote = await start_remote(flaky, mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset(seed=1)
        await client.step([], frames=2)
        inject(remote, flaky, monkeypatch)
        with pytest.raises(RemoteError) as refused:
            if request == "reset":
                await client.reset(seed=2)
            else:
                await client.step([], frames=3, obs="shm" if request == "step-shm" else "vnc")
        assert remote.state in (State.RECOVERING, State.RUNNING)  # not stepping/resetting
        assert re.search(says + r".*the remote is recovering", str(refused.value)), refused.value
        episode = await client.reset(seed=3, timeout=WAIT)  # waits out the recovery
        obs = "shm" if request == "step-shm" else "vnc"
        reply = await client.step([("KeyEvent", "Left", True)], frames=2, obs=obs)
        assert (reply.episode_id, reply.frame) == (episode, remote.frame)
        assert remote.state is State.RUNNING
        if obs == "shm":
            assert reply.shm is not None  # shared memory works again once there is room


async def test_a_step_that_fails_before_it_changed_anything_goes_back_to_running(
    start_remote: StartRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception before any frame is drawn: back to running, same episode (ABORT);
    the client may simply step again."""
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        episode = await client.reset(seed=1)
        before = remote.frame
        monkeypatch.setattr(remote.inputs, "push", once(MemoryError("injected"), remote.inputs.push))
        with pytest.raises(RemoteError) as refused:
            await client.step([], frames=2)
        assert (remote.state, remote.episode_id, remote.frame) == (State.RUNNING, episode, before)
        assert re.search("failed in step.*MemoryError.*nothing changed", str(refused.value))
        reply = await client.step([], frames=2)
        assert (reply.episode_id, reply.frame) == (episode, before + 2)


async def test_a_step_cancelled_under_way_leaves_the_remote_usable(
    start_remote: StartRemote,
) -> None:
    """A step whose caller is cancelled mid-way (a dm_env_rpc deadline) takes the error
    exit: the next client resets and steps (before: stepping for good)."""
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset(seed=1)
        frame = remote.frame
        long_step = StepOrder(frames=protocol.MAX_STEP_FRAMES)
        stepping = asyncio.create_task(remote.seats.step(long_step))
        async with asyncio.timeout(WAIT):
            await remote.wait_frame(frame)  # the first slice is drawn: the step is under way
        assert remote.state is State.STEPPING
        stepping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stepping
        assert remote.state is not State.STEPPING
        episode = await client.reset(seed=2, timeout=WAIT)
        reply = await client.step([], frames=2)
        assert reply.episode_id == episode and remote.state is State.RUNNING


async def test_close_closes_every_part_even_when_one_raises(
    start_remote: StartRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose close raises still lets the shared-memory segment be removed and the
    runtime (Chromium's, Xvnc's processes) be shut down; close then says what failed."""
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    port = remote.rewarder.port
    async with RewarderClient(f"127.0.0.1:{port}") as client:
        await client.reset(seed=1)
        reply = await client.step([], frames=1, obs="shm")
    assert reply.shm is not None
    segment = Path("/dev/shm") / str(reply.shm[0])
    assert segment.exists()
    runtime_closed = asyncio.Event()
    real_aclose = remote.runtime.aclose

    async def aclose() -> None:
        runtime_closed.set()
        await real_aclose()

    monkeypatch.setattr(remote.runtime, "aclose", aclose)
    assert remote.vnc is not None
    real_vnc_close = remote.vnc.close

    async def vnc_close() -> None:
        await real_vnc_close()
        raise RuntimeError("injected: the VNC server's close")

    monkeypatch.setattr(remote.vnc, "close", vnc_close)
    with pytest.raises(RuntimeError, match="the VNC server's close"):
        await remote.close()
    assert runtime_closed.is_set()
    assert not segment.exists()
    with pytest.raises(OSError):  # the rewarder's port is closed too
        await asyncio.open_connection("127.0.0.1", port)
