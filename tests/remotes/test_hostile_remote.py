"""The hostile remote of tests/remotes/hostile_remote.py: each kind starts, steps in
lockstep, and its step reply names the hostile file; the agent side (FrameReader through
SharedFrames.take) refuses it, saying why, without hanging or crashing."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

import numpy as np
import pytest

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
