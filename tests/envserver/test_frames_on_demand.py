"""Real-time frames nobody reads are played, not drawn (issue 44): a remote with no VNC
request out and nobody hearing each result advances its game in real time and draws
only when a frame is asked for. In-process remotes on real sockets, a real VNC viewer
and a Universe-style observer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from envserver.remote import Remote
from rewarder.protocol import MAX_SEED
from runtimes.builtin import Catch
from tests.wire import WireClient
from vncdriver.client import VNCClient

#: Frames per second: fast enough to end an episode in seconds, slow enough for a
#: loaded machine to keep up.
FPS: Final = 240.0
#: Frames played with nobody reading.
UNREAD: Final = 60
#: The first episode's seed comes from this (``Remote._seeds``), on every remote here.
SEEDS: Final = 7
#: Seconds any wait may take on a loaded machine.
WAIT: Final = 30.0


def seeded_remote() -> Remote:
    remote = Remote("builtin.Catch-v0", fps=FPS)
    remote.core._seeds = np.random.default_rng(SEEDS)
    return remote


def count_draws(runtime: Any) -> Callable[[], int]:
    """Count the runtime's draws (a wrapper around its own ``_draw``)."""
    calls = [0]
    draw = runtime._draw

    def counted() -> None:
        calls[0] += 1
        draw()

    runtime._draw = counted
    return lambda: calls[0]


async def viewer_of(remote: Remote) -> VNCClient:
    viewer = VNCClient(f"127.0.0.1::{remote.vnc_port}", encoding="raw", frame_tags=True)
    await viewer.start()
    return viewer


async def test_frames_nobody_reads_are_not_drawn_and_a_late_viewer_gets_the_current_one() -> None:
    """UNREAD frames with nobody reading cost no draw (before: one each); a viewer that
    connects then gets, at once, the frame the game is at, pixel for pixel as a Catch
    played to that frame from the same seed draws it."""
    remote = seeded_remote()
    draws = count_draws(remote.runtime)
    await remote.start("127.0.0.1", 0, 0)
    try:
        async with asyncio.timeout(WAIT):
            start = await remote.wait_frame()
            drawn = draws()
            while remote.frame < start + UNREAD:
                await remote.wait_frame()
        assert draws() - drawn <= 1, f"{draws() - drawn} draws of {remote.frame - start} frames nobody read"
        asked_at = remote.frame
        viewer = await viewer_of(remote)
        try:
            async with asyncio.timeout(WAIT):
                while viewer.tag is None:
                    await viewer.wait_update(viewer.updates)
            tag = viewer.tag
            assert tag.frame >= asked_at and tag.episode_id == 1
            replay = Catch()
            replay.reset(int(np.random.default_rng(SEEDS).integers(MAX_SEED)))
            replay.advance([], tag.frame)
            assert np.array_equal(viewer.framebuffer, replay.framebuffer)
        finally:
            await viewer.close()
    finally:
        await remote.close()


async def first_episode(remote: Remote) -> list[tuple[int, float, bool]]:
    """(frame, reward, done) of each reward an observer hears in the first episode."""
    observer = await WireClient.open(remote.rewarder.port, observer=True)
    heard: list[tuple[int, float, bool]] = []
    try:
        async with asyncio.timeout(WAIT):
            while not heard or not heard[-1][2]:
                message = await observer.recv_until("v0.env.reward")
                if str(message["headers"]["episode_id"]) == "1":
                    body = message["body"]
                    heard.append((body["info"]["frame"], body["reward"], body["done"]))
    finally:
        await observer.close()
    return heard


async def test_a_game_nobody_watches_earns_the_same_rewards_and_ends_as_one_watched() -> None:
    """Two remotes of one seed, no input: one streamed to a viewer (every frame drawn),
    one unwatched (frames played, not drawn): the same rewards at the same frames and
    the same end."""
    watched, unwatched = seeded_remote(), seeded_remote()
    watched_draws, unwatched_draws = count_draws(watched.runtime), count_draws(unwatched.runtime)
    await watched.start("127.0.0.1", 0, 0)
    viewer = await viewer_of(watched)
    await unwatched.start("127.0.0.1", 0, 0)
    try:
        both = await asyncio.gather(first_episode(watched), first_episode(unwatched))
        assert both[0] and both[0] == both[1]
        assert unwatched_draws() < watched_draws() / 4  # (it did skip its draws)
    finally:
        await viewer.close()
        await unwatched.close()
        await watched.close()
