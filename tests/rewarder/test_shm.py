"""Lockstep frames in shared memory (rewarder/shm.py, remotes/shared_frames.py): what the
remote writes is what the agent reads, a segment that is not the step's is never read as
its frame, and nothing is left in /dev/shm."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from remotes.shared_frames import SharedFrames
from rewarder import shm
from rewarder.protocol import OBS_SHM, OBS_VNC, StepReply

pytestmark = pytest.mark.skipif(not shm.available(), reason="no writable /dev/shm (Linux only)")


def reply(segment: shm.FrameSegment | None, frame: int, episode: int = 1) -> StepReply:
    named = tuple(segment.reply) if segment is not None else None
    return StepReply(1, episode, 0.0, False, {}, frame, 0.0, 0.0, named)  # type: ignore[arg-type]


def test_the_agent_reads_the_frame_the_reply_names() -> None:
    segment = shm.FrameSegment(210, 160)
    frames = SharedFrames("test", enabled=True)
    try:
        assert segment.path.stat().st_mode & 0o777 == 0o600
        for number in (4, 8):
            frame = np.random.default_rng(number).integers(0, 256, (210, 160, 3), np.uint8)
            segment.write(frame, number, 1)
            assert frames.obs == OBS_SHM and frames.take(reply(segment, number))
            assert frames.stepped is not None
            pixels, got, episode = frames.stepped
            assert (got, episode) == (number, 1) and np.array_equal(pixels, frame)
    finally:
        frames.forget()
        segment.close()
    assert not segment.path.exists()


def test_a_segment_holding_another_frame_is_not_read_and_vnc_takes_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    segment = shm.FrameSegment(8, 8)
    frames = SharedFrames("test", enabled=True)
    try:
        segment.write(np.zeros((8, 8, 3), np.uint8), 3, 1)
        assert not frames.take(reply(segment, 4))  # the reply names frame 4: not this one
        assert frames.stepped is None and frames.obs == OBS_VNC
        assert "holds frame 3 of episode 1" in caplog.text and "over VNC" in caplog.text
    finally:
        segment.close()
    gone = SharedFrames("test", enabled=True)
    assert not gone.take(reply(segment, 3))  # removed: another machine looks like this
    assert gone.obs == OBS_VNC
    assert not SharedFrames("test", enabled=True).take(reply(None, 3))  # no shm in the reply


def test_bad_names_are_refused_before_any_file_is_opened() -> None:
    for name in ("../etc/passwd", "universe-remote-frame-1/../../x", "other-file"):
        with pytest.raises(ValueError, match="not a frame segment"):
            shm.FrameView(name, 8, 8)


def test_segments_of_dead_remotes_are_swept() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = shm.SHM_DIR / f"{shm.PREFIX}{int(dead.stdout)}-0123456789abcdef"
    stale.write_bytes(b"x")
    ours = shm.SHM_DIR / f"{shm.PREFIX}{os.getpid()}-fedcba9876543210"
    ours.write_bytes(b"x")
    try:
        shm.FrameSegment(8, 8).close()
        assert not stale.exists() and ours.exists()  # the living keep theirs
    finally:
        ours.unlink()
        stale.unlink(missing_ok=True)
