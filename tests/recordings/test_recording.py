"""``serve --record``: episodes on disk as they happen, whoever plays; replay; Minari export."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest

from envserver.recorder import Recorder
from envserver.remote import Remote
from recordings import open_recording
from recordings.format import (
    CHUNK_FRAMES,
    CHUNK_HEADER,
    CHUNKS_FILE,
    CLOSED,
    DONE,
    FAILED,
    PARTIAL,
    RESET,
    STOPPED,
    frame_hash,
    read_chunks,
)
from remotes import RemoteEnv, start_local
from rewarder.client import RewarderClient
from rewarder.errors import RemoteError
from runtimes.replay import replay_runtime
from tests.full_disk import fill, tiny_tmpfs
from tests.recordings.helpers import TIMEOUT, rerun, serve
from universe_remote.cli import main
from vncdriver.client import VNCClient

Recording = Callable[..., Awaitable[tuple[Remote, Recorder]]]


@pytest.fixture
async def recording(tmp_path: Path) -> AsyncIterator[Recording]:
    """``await recording(env_id, **kwargs)``: a started remote recording to tmp_path/rec;
    closed (the recorder too) after the test unless the test closed it."""
    started: list[tuple[Remote, Recorder]] = []

    async def start(env: object = "builtin.Catch-v0", **kwargs: object) -> tuple[Remote, Recorder]:
        remote = Remote(env, **kwargs)  # type: ignore[arg-type]
        recorder = Recorder(tmp_path / "rec")
        recorder.attach(remote)
        await remote.start("127.0.0.1", 0, 0)
        started.append((remote, recorder))
        return remote, recorder

    yield start
    for remote, recorder in started:
        await remote.close()
        recorder.close()


async def stop(remote: Remote, recorder: Recorder) -> None:
    await remote.close()
    recorder.close()


SCRIPT = [[("KeyEvent", "Left", True)], [], [("KeyEvent", "Left", False), ("KeyEvent", "Right", True)],
          [("KeyEvent", "Right", False)]]


async def play_lockstep(client: RewarderClient, seed: int, frames: int = 4) -> float:
    """One lockstep episode of Catch with a fixed script; the return the agent got."""
    await client.reset(seed=seed, mode="lockstep")
    total, i = 0.0, 0
    while True:
        reply = await client.step(SCRIPT[i % len(SCRIPT)], frames=frames + i % 3)
        total += reply.reward
        i += 1
        if reply.done:
            return total


def test_an_agent_plays_three_episodes_and_each_is_on_disk(tmp_path: Path) -> None:
    returns = []
    with start_local("builtin.Catch-v0", extra_args=["--record", str(tmp_path)]) as local:
        env = RemoteEnv(local.address, mode="lockstep", frameskip=4)
        try:
            for seed in (1, 2, 3):
                env.reset(seed=seed)
                total, done, i = 0.0, False, 0
                while not done:
                    _, reward, done, truncated, _ = env.step(SCRIPT[i % len(SCRIPT)])
                    assert not truncated
                    total += float(reward)
                    i += 1
                returns.append(total)
        finally:
            env.close()
    played = [e for e in open_recording(tmp_path) if e.mode == "lockstep"]
    assert [e.status for e in played] == [DONE] * 3 and all(e.complete for e in played)
    assert [e.seed for e in played] == [1, 2, 3]
    assert [e.total_reward for e in played] == returns and any(returns)
    assert [e.end["total_reward"] for e in played] == returns  # type: ignore[index]
    sources = {ev.source for e in played for s in e.steps for ev in s.events}
    assert sources == {"agent"}
    # Every frame is accounted for (a step the remote ran in slices shows as several).
    assert all(sum(s.frames for s in e.steps) == e.steps[-1].frame - e.steps[0].frame for e in played)


async def test_a_lockstep_recording_reproduces_on_a_fresh_remote(
    recording: Recording, tmp_path: Path
) -> None:
    remote, recorder = await recording(mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        got = await play_lockstep(client, seed=11)
    await stop(remote, recorder)
    episode = next(e for e in open_recording(tmp_path / "rec") if e.seed == 11)
    assert episode.total_reward == got and episode.status == DONE
    recorded = [s.hash for s in episode.steps]
    assert rerun(episode) == recorded  # the runtime by itself

    # A fresh remote, driven over the wire with the recorded seed and actions.
    fresh = Remote("builtin.Catch-v0", mode="lockstep")
    await fresh.start("127.0.0.1", 0, 0)
    try:
        async with (
            RewarderClient(f"127.0.0.1:{fresh.rewarder.port}") as client,
            VNCClient(f"127.0.0.1::{fresh.vnc_port}", frame_tags=True) as vnc,
        ):
            await client.reset(seed=episode.seed)
            frames = episode.frames()
            await vnc.wait_frame(fresh.frame, timeout=TIMEOUT)
            assert np.array_equal(vnc.framebuffer, next(frames))
            for step, frame in zip(episode.steps[1:], frames, strict=False):
                reply = await client.step([e.action() for e in step.events], frames=step.frames)
                await vnc.wait_frame(reply.frame, timeout=TIMEOUT)
                assert np.array_equal(vnc.framebuffer, frame), f"step {step.index}"
                assert (reply.reward, reply.done) == (step.reward, step.done)
    finally:
        await fresh.close()


async def test_a_browser_viewer_is_told_from_a_vnc_client(recording: Recording, tmp_path: Path) -> None:
    """The browser viewer is an in-process VNC client (envserver.attached): its keys are
    recorded as viewer:N."""
    remote, recorder = await recording(mode="lockstep")
    assert remote.vnc is not None
    sent: list[bytes] = []
    client = remote.vnc.attach(sent.append, lambda: None, view_only=False, peer="browser test")
    client.feed(b"RFB 003.008\n")
    client.feed(b"\x01")  # security None (the viewer checked the browser already)
    client.feed(b"\x01")  # ClientInit, shared
    assert client.ready
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as agent:
        await agent.reset(seed=3, mode="lockstep")
        client.feed(struct.pack("!BBxxI", 4, 1, 0xFF53))  # KeyEvent Right down
        await agent.step([("KeyEvent", "Left", True)], frames=2)
    await stop(remote, recorder)
    episode = next(e for e in open_recording(tmp_path / "rec") if e.seed == 3)
    (step,) = [s for s in episode.steps if s.events]
    assert step.index == 1
    assert [(e.source, e.action()) for e in step.events] == [
        (f"viewer:{client.client_id}", ["KeyEvent", "Right", True]),
        ("agent", ["KeyEvent", "Left", True]),
    ]


async def test_the_recording_property_switches_it_off_and_on(recording: Recording, tmp_path: Path) -> None:
    remote, recorder = await recording(mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        keys = [p["key"] for p in (await client.properties("list"))["properties"]]
        assert "recording" in keys
        await client.reset(seed=5)
        await client.step([], frames=3)
        assert (await client.properties("write", "recording", 0))["value"] == 0
        await client.step([], frames=3)
        await client.reset(seed=6)  # not recorded
        await client.step([], frames=3)
        await client.properties("write", "recording", 1)  # from the frame on screen now
        await client.step([], frames=3)
        with pytest.raises(Exception, match="1 records, 0 stops"):
            await client.properties("write", "recording", 2)
    await stop(remote, recorder)
    episodes = list(open_recording(tmp_path / "rec"))
    assert [(e.status, e.seed, e.meta["from_reset"]) for e in episodes] == [
        (RESET, episodes[0].seed, True), (STOPPED, 5, True), (CLOSED, None, False),
    ]
    assert [sum(s.frames for s in e.steps) for e in episodes[1:]] == [3, 3]
    assert episodes[2].meta["episode_seed"] == 6


async def test_a_full_disk_turns_recording_off_says_why_and_it_resumes_when_there_is_room(
    tmp_path: Path,
) -> None:
    """The disk fills mid-episode: the game goes on, ``recording`` reads 0 and
    ``recording_error`` says why; written 1 while the disk is full it is refused with the
    reason, written 1 once there is room it records again. Every episode before stays
    readable, the cut one up to its last whole chunk (status ``failed``)."""
    with tiny_tmpfs(tmp_path / "disk", "1m") as disk:
        remote = Remote("builtin.Catch-v0", mode="lockstep")
        recorder = Recorder(disk / "rec")
        recorder.attach(remote)
        await remote.start("127.0.0.1", 0, 0)
        try:
            async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:

                async def read(key: str) -> object:
                    return (await client.properties("read", key))["value"]

                first = await play_lockstep(client, seed=21)
                await client.reset(seed=22)
                await client.step([], frames=1)
                assert await asyncio.to_thread(recorder.writer.drain, TIMEOUT)  # a chunk of 22 on disk
                filler = fill(disk)
                frame = remote.frame
                for _ in range(4 * CHUNK_FRAMES):  # chunks the writer cannot write
                    reply = await client.step([("KeyEvent", "Right", True)], frames=1)
                    assert reply.frame == frame + 1 and not reply.done  # the game goes on
                    frame = reply.frame
                assert await asyncio.to_thread(recorder.writer.drain, TIMEOUT)
                assert await read("recording") == 0
                why = await read("recording_error")
                assert isinstance(why, str) and "No space left on device" in why and "episode-" in why
                await client.step([], frames=1)

                with pytest.raises(RemoteError, match="cannot record: .*No space left on device"):
                    await client.properties("write", "recording", 1)
                assert await read("recording") == 0 and "No space left" in str(await read("recording_error"))

                filler.unlink()
                assert (await client.properties("write", "recording", 1))["value"] == 1
                assert await read("recording_error") == ""
                await client.step([], frames=2)
                third = await play_lockstep(client, seed=23)
        finally:
            await stop(remote, recorder)
        episodes = list(open_recording(disk / "rec"))
        played = {e.seed: e for e in episodes if e.meta["from_reset"]}
        assert (played[21].status, played[21].total_reward) == (DONE, first)
        assert (played[23].status, played[23].total_reward) == (DONE, third)
        assert rerun(played[21]) == [s.hash for s in played[21].steps]
        cut = played[22]
        assert cut.status == FAILED and "No space left on device" in cut.end["error"]  # type: ignore[index]
        assert 2 <= len(cut) < 4 * CHUNK_FRAMES and cut.end["steps"] == len(cut)  # type: ignore[index]
        assert len(list(cut.frames())) == len(cut) and rerun(cut) == [s.hash for s in cut.steps]
        data = (cut.path / CHUNKS_FILE).read_bytes()  # whole chunks only: a torn one is cut away
        assert sum(CHUNK_HEADER.size + len(c.flags) + len(c.frames) + len(c.steps)
                   for c in read_chunks(data)) == len(data)
        resumed = [e for e in episodes if not e.meta["from_reset"]]
        assert [(e.status, e.meta["episode_seed"]) for e in resumed] == [(RESET, 22)]


async def test_kill_9_mid_episode_leaves_the_earlier_episodes_whole(tmp_path: Path) -> None:
    returns = []
    async with serve("builtin.Catch-v0", "--record", str(tmp_path)) as served:
        async with RewarderClient(served.rewarder) as client:
            for seed in (21, 22):
                returns.append(await play_lockstep(client, seed))
            await client.reset(seed=23)
            for _ in range(150):  # more than a chunk: some of it is flushed
                await client.step([("KeyEvent", "Right", True)], frames=1)

            def flushed() -> int:  # chunks of episode 23 on disk (the writer may be behind)
                for episode in open_recording(tmp_path):
                    if episode.seed == 23 and (episode.path / CHUNKS_FILE).exists():
                        return len(list(read_chunks((episode.path / CHUNKS_FILE).read_bytes())))
                return 0

            async with asyncio.timeout(TIMEOUT):  # the writer flushes a chunk every 60 steps
                while flushed() < 2:
                    await asyncio.sleep(0.05)
            served.process.kill()
            await served.process.wait()
    episodes = list(open_recording(tmp_path))
    done = [e for e in episodes if e.seed in (21, 22)]
    assert [e.status for e in done] == [DONE, DONE] and [e.total_reward for e in done] == returns
    cut = episodes[-1]
    assert (cut.seed, cut.status, cut.complete) == (23, PARTIAL, False)
    assert 120 <= len(cut) <= 151 and len(list(cut.frames())) == len(cut)
    assert rerun(cut) == [s.hash for s in cut.steps]


async def test_replay_serves_the_recorded_frames_pixel_exactly(recording: Recording, tmp_path: Path) -> None:
    remote, recorder = await recording(mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await play_lockstep(client, seed=8, frames=2)
    await stop(remote, recorder)
    episode = next(e for e in open_recording(tmp_path / "rec") if e.seed == 8)
    replay = Remote(replay_runtime(tmp_path / "rec", episode.number)(), mode="lockstep")
    await replay.start("127.0.0.1", 0, 0)
    try:
        async with (
            RewarderClient(f"127.0.0.1:{replay.rewarder.port}") as client,
            VNCClient(f"127.0.0.1::{replay.vnc_port}", frame_tags=True) as vnc,
        ):
            assert client.describe is not None
            assert client.describe.body["replay"]["episodes"] == [episode.number]
            await client.reset()
            frames = episode.frames()
            await vnc.wait_frame(replay.frame, timeout=TIMEOUT)
            assert np.array_equal(vnc.framebuffer, next(frames))
            total = 0.0
            for step, frame in zip(episode.steps[1:], frames, strict=True):
                reply = await client.step([], frames=step.frames)
                await vnc.wait_frame(reply.frame, timeout=TIMEOUT)
                assert np.array_equal(vnc.framebuffer, frame), f"step {step.index}"
                total += reply.reward
            assert reply.done and total == episode.total_reward
    finally:
        await replay.close()


async def test_the_replay_command_serves_a_recording_in_real_time(
    recording: Recording, tmp_path: Path
) -> None:
    remote, recorder = await recording(mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        await play_lockstep(client, seed=9, frames=1)
    await stop(remote, recorder)
    episode = next(e for e in open_recording(tmp_path / "rec") if e.seed == 9)
    recorded = {s.hash for s in episode.steps}
    async with serve(str(tmp_path / "rec"), "--episode", str(episode.number), command="replay") as served:
        async with (
            RewarderClient(served.rewarder, observer=True) as client,
            VNCClient(f"127.0.0.1::{served.vnc_port}", frame_tags=True) as vnc,
        ):
            describe = await client.wait_for_state("running", timeout=TIMEOUT)
            assert describe.env_id == "builtin.Catch-v0"
            seen = set()
            async with asyncio.timeout(TIMEOUT):
                while len(seen) < 20:  # real time: the frames come by themselves
                    await vnc.wait_update(timeout=TIMEOUT)
                    seen.add(frame_hash(vnc.framebuffer))
            assert seen <= recorded


async def test_export_to_minari_loads_with_the_recorded_returns(
    recording: Recording, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    minari = pytest.importorskip("minari")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    remote, recorder = await recording(mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        returns = [await play_lockstep(client, seed) for seed in (31, 32)]
    await stop(remote, recorder)
    episodes = [e for e in open_recording(tmp_path / "rec") if e.seed in (31, 32)]
    args = ["export", str(tmp_path / "rec"), "--minari", "catch/test-v0"]
    for e in episodes:
        args += ["--episode", str(e.number)]
    assert main(args) == 0
    assert "exported 2 episodes" in capsys.readouterr().out
    dataset = minari.load_dataset("catch/test-v0")
    loaded = list(dataset.iterate_episodes())
    assert [float(ep.rewards.sum()) for ep in loaded] == returns
    for ep, recorded in zip(loaded, episodes, strict=True):
        assert ep.observations.shape == (len(recorded), 210, 160, 3)
        assert np.array_equal(ep.observations, recorded.frame_array())
        assert ep.terminations[-1] and not ep.truncations[-1]
        # Actions: Left, Right held (or pressed) and the pointer; the script's first step holds Left.
        assert ep.actions.shape == (len(recorded) - 1, 5) and list(ep.actions[0]) == [1, 0, 0, 0, 0]
    assert main(["export", str(tmp_path / "nothing"), "--minari", "x/y-v0"]) == 2
    assert "is not a directory" in capsys.readouterr().err
