"""Batch frames out of a sealed memfd the agent maps (rewarder/shm.py ``create_sealed``,
``open_held``; rewarder/shm_slots.py ``SlotSegment(sealed=True)``, ``SlotReader(held=...)``):
on a real ``serve`` process of two lockstep games (the remote makes the segments, the
agent reaches them through ``/proc``), and by hand for what a remote must never get
mapped: a memfd that can shrink, an fd that is not the segment, another user's file, a
pid and fd that are not ones, a remote in another PID namespace whose pid names a
process here. Each of those is read the old way, by copy."""

from __future__ import annotations

import fcntl
import logging
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from remotes import RemoteVectorEnv
from remotes.local import LocalRemotes
from rewarder import shm_slots
from rewarder.batch_messages import REPLY_BATCH_STEP, read_held, step_entry, steps_json
from rewarder.blocking import BlockingRewarder
from rewarder.shm import HEADER, MAGIC, PIXELS_AT, PREFIX, SHM_DIR
from rewarder.shm_slots import SlotReader, SlotSegment, stride_of
from tests.envserver.test_frame_segments import NAMESPACE_INIT, children
from tests.remotes.test_batched_lane import Counted
from tests.rewarder.conftest import holding

WAIT = 10.0
#: A small screen for the segments made by hand (slots padded to the next 64 bytes).
HEIGHT, WIDTH = 3, 5


@pytest.fixture
def held(two_games: LocalRemotes) -> Iterator[list[BlockingRewarder]]:
    """The shared process's two games, held by this module's agent."""
    with holding(two_games, "agent-memfd") as channels:
        yield channels


def _step(held: list[BlockingRewarder], memfd: bool) -> dict[str, Any]:
    """One batch step of both games (``memfd``: asking for a sealed memfd); its reply's body."""
    entries = []
    for game in (0, 1):
        entry = step_entry(game, held[game].episode_id, 2)
        entry["action"] = []
        entries.append(entry)
    agent = held[0]
    sent = agent.send_batch_steps(steps_json(entries), memfd)
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        got = agent.take_raw(sent, REPLY_BATCH_STEP, wait=True)
        if got is not None:
            return got[0]["body"]
    raise AssertionError("no reply in time")


def _named(body: dict[str, Any]) -> tuple[list[int], list[int]]:
    """The frame numbers and episode ids a reply's steps name."""
    return [s["frame"] for s in body["steps"]], [int(s["episode_id"]) for s in body["steps"]]


def test_the_agent_maps_the_sealed_memfd_it_asked_for_and_reads_what_a_read_reads(
    held: list[BlockingRewarder], two_games: LocalRemotes
) -> None:
    body = _step(held, memfd=False)
    name, height, width, stride = body["shm"]
    at = read_held(body["shm_fd"])
    assert at is not None and at[0] == two_games.processes[0].pid  # where the remote holds it
    first = SlotReader(*body["shm"], held=at)  # a file: reached through /proc, never mapped
    assert first.reachable and not first.mapped and (SHM_DIR / name).is_file()
    batch = np.zeros((2, height, width, 3), np.uint8)
    assert first.read_plain(batch, (0, 1), *_named(body))
    first.close()

    body = _step(held, memfd=True)  # asked: a sealed memfd, which no file names
    name = body["shm"][0]
    assert not (SHM_DIR / name).exists()
    at = read_held(body["shm_fd"])
    assert at is not None
    reader = SlotReader(*body["shm"], held=at)
    assert reader.mapped and reader.reachable
    mapped = np.zeros((3, height, width, 3), np.uint8)
    numbers, episodes = _named(body)
    assert reader.read_plain(mapped, (2, 0), numbers, episodes)  # (slot 0 into row 2)
    assert reader.read_rows(mapped, [1, 0]) == list(zip(numbers, episodes, strict=True))
    fd = os.open(f"/proc/{at[0]}/fd/{at[1]}", os.O_RDONLY)  # the same bytes, by a read
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW and seals & fcntl.F_SEAL_SEAL
        raw = os.pread(fd, 2 * stride, 0)
    finally:
        os.close(fd)
    pixels = height * width * 3
    for slot, row in ((0, 2), (0, 1), (1, 0)):
        read = np.frombuffer(raw, np.uint8, pixels, slot * stride + PIXELS_AT).reshape(height, width, 3)
        assert (mapped[row] == read).all() and read.any()
    later = _step(held, memfd=True)  # the same segment while the agent asks for it
    assert later["shm"] == body["shm"] and reader.read_plain(mapped, (0, 1), *_named(later))
    reader.close()

    body = _step(held, memfd=False)  # not asked: the file again
    assert (SHM_DIR / body["shm"][0]).is_file()


def _frames(fd: int, stride: int) -> None:
    """Two frames written into the file ``fd`` by hand: slot i full of i + 1, frame 5 + i."""
    for slot in (0, 1):
        os.pwrite(fd, HEADER.pack(MAGIC, 5 + slot, 1, HEIGHT, WIDTH), slot * stride)
        os.pwrite(fd, bytes([slot + 1]) * (HEIGHT * WIDTH * 3), slot * stride + PIXELS_AT)


@pytest.mark.parametrize("seals", [fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL, None],
                         ids=["sealed-but-not-against-shrinking", "not-sealable"])
def test_a_memfd_that_can_shrink_is_read_by_copy_never_mapped(seals: int | None) -> None:
    stride = stride_of(HEIGHT, WIDTH)
    name = f"{PREFIX}test-{secrets.token_hex(4)}"
    fd = os.memfd_create(name, os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if seals is not None else 0))
    try:
        os.ftruncate(fd, 2 * stride)
        _frames(fd, stride)
        if seals is not None:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        reader = SlotReader(name, HEIGHT, WIDTH, stride, held=(os.getpid(), fd))
        assert reader.reachable and not reader.mapped
        batch = np.zeros((2, HEIGHT, WIDTH, 3), np.uint8)
        assert reader.read_rows(batch, [0, 1]) == [(5, 1), (6, 1)]
        assert (batch[0] == 1).all() and (batch[1] == 2).all()
        os.ftruncate(fd, stride + PIXELS_AT)  # what would SIGBUS a mapping: a short read
        with pytest.raises(ValueError, match="truncated"):
            reader.read_rows(batch, [0, 1])
        reader.close()
    finally:
        os.close(fd)


def test_a_pid_and_fd_that_are_not_the_segment_are_refused_and_the_file_read_by_name(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(shm_slots, "_told", False)  # (said once a process: this test's first)
    caplog.set_level(logging.DEBUG)
    segment = SlotSegment(2, HEIGHT, WIDTH)
    sealed = SlotSegment(2, HEIGHT, WIDTH, sealed=True)
    other, read_end, write_end, null = -1, -1, -1, -1
    try:
        assert segment.path is not None and sealed.sealed and sealed.path is None
        fd = os.open(segment.path, os.O_RDWR)
        try:
            _frames(fd, segment.stride)
        finally:
            os.close(fd)
        with tempfile.NamedTemporaryFile() as plain:
            if os.geteuid() == 0:  # another user's file (root: one given away)
                os.chown(plain.name, 65534, 65534)
                other = os.open(plain.name, os.O_RDONLY)
            else:
                other = os.open("/etc/passwd", os.O_RDONLY)
            read_end, write_end = os.pipe()
            null = os.open(os.devnull, os.O_RDONLY)
            pid = os.getpid()
            wrong: list[Any] = [
                sealed.held,  # a sealed memfd, but another segment's
                [pid, other],  # not this user's
                [pid, read_end], [pid, null],  # not a regular file (never opened again)
                [pid, 999_999],  # no such fd
                ["1", 3], [-5, 3], [pid, -1], [1 << 40, 0], [pid],  # not a pid and an fd
            ]
            for at in wrong:
                reader = SlotReader(*segment.reply, held=at)
                assert not reader.mapped and not reader.reachable, at
                batch = np.zeros((2, HEIGHT, WIDTH, 3), np.uint8)
                assert reader.read_rows(batch, [1, 0]) == [(5, 1), (6, 1)], at  # by name
                assert (batch[1] == 1).all() and (batch[0] == 2).all()
                reader.close()
        said = [r for r in caplog.records if r.name == shm_slots.__name__]
        assert [r.levelno for r in said] == [logging.DEBUG]  # once, quietly
        assert "not reached through /proc" in said[0].getMessage()
        with pytest.raises(FileNotFoundError):  # a memfd: reached only where it is held
            SlotReader(*sealed.reply)
        reader = SlotReader(*sealed.reply, held=sealed.held)
        assert reader.mapped
        reader.close()
        # Reached through /proc or by name, a truncated file is the error it always was.
        readers = [SlotReader(*segment.reply, held=segment.held), SlotReader(*segment.reply)]
        assert readers[0].reachable and not readers[0].mapped
        os.truncate(segment.path, segment.stride + PIXELS_AT)
        for reader in readers:
            with pytest.raises(ValueError, match=f"{segment.name} is truncated"):
                reader.read_rows(np.zeros((2, HEIGHT, WIDTH, 3), np.uint8), [0, 1])
            reader.close()
    finally:
        for fd in (other, read_end, write_end, null):
            if fd >= 0:
                os.close(fd)
        segment.close()
        sealed.close()


def test_a_remote_in_another_pid_namespace_keeps_its_file_though_its_pid_lives_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``serve --games 2`` in a PID namespace of its own as this test's pid (``docker
    --ipc=host`` shares /dev/shm so): the ``shm_fd`` it names is this process's fd here,
    never its segment, so a vector reads the file by name and never asks for a memfd."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a PID namespace needs root and unshare(1)")
    command = ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c", NAMESPACE_INIT,
               str(os.getpid()), "builtin.Catch-v0", "--mode", "lockstep", "--games", "2",
               "--rewarder-port", "0", "--vnc-port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    serve = None
    try:
        assert process.stdout is not None
        out, banner, deadline = process.stdout.fileno(), "", time.monotonic() + 30
        while "Ctrl-C to stop" not in banner:
            assert time.monotonic() < deadline and process.poll() is None, banner
            if select.select([out], [], [], 1.0)[0]:
                banner += os.read(out, 4096).decode()
        (init,) = children(process.pid)  # unshare -> the namespace's init -> serve
        (serve,) = children(init)
        addresses = re.findall(r"vnc://127\.0\.0\.1:\d+\+\d+", banner)
        assert len(addresses) == 2, banner
        counted = Counted(monkeypatch)
        env = RemoteVectorEnv(addresses, mode="lockstep", frameskip=2)
        try:
            env.reset(seed=3)
            for _ in range(20):
                obs, _, _, _, infos = env.step([[]] * 2)
                assert "shm.error" not in infos and obs.any()
        finally:
            env.close()
        assert counted.sent >= 19 and counted.memfd == 0  # batched, from the file, never asking
        assert counted.mapped and not any(counted.mapped)
    finally:
        if serve is not None:
            os.kill(serve, signal.SIGTERM)  # (its init, then unshare, end with it)
        else:
            process.kill()
        process.wait(timeout=30)
