"""Lockstep frames in shared memory (rewarder/shm.py, remotes/shared_frames.py): what the
remote writes is what the agent reads, a segment that is not the step's is never read as
its frame, a hostile file in its place (a FIFO, a symbolic link, another user's file, one
truncated under the reader) is refused without hanging or crashing the agent, and nothing
is left in /dev/shm. Real files in /dev/shm throughout."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from remotes.shared_frames import SharedFrames
from rewarder import shm
from rewarder.protocol import OBS_SHM, OBS_VNC, StepReply
from tests.full_disk import tiny_tmpfs

pytestmark = pytest.mark.skipif(not shm.available(), reason="no writable /dev/shm (Linux only)")


def reply(segment: shm.FrameSegment | None, frame: int, episode: int = 1) -> StepReply:
    named = tuple(segment.reply) if segment is not None else None
    return StepReply(1, episode, 0.0, False, {}, frame, 0.0, 0.0, named)  # type: ignore[arg-type]


def named(name: str, frame: int, height: int = 8, width: int = 8, episode: int = 1) -> StepReply:
    return StepReply(1, episode, 0.0, False, {}, frame, 0.0, 0.0, (name, height, width))


def random_frame(seed: int, height: int = 8, width: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), np.uint8)


@pytest.fixture
def free_name() -> Iterator[Path]:
    """A segment path of this process that nothing holds yet; removed (whatever it became)
    after the test."""
    path = shm.SHM_DIR / f"{shm.PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
    yield path
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink(missing_ok=True)


@pytest.fixture
def segment() -> Iterator[shm.FrameSegment]:
    """An 8x8 segment holding frame 3 of episode 1."""
    seg = shm.FrameSegment(8, 8)
    seg.write(random_frame(3), 3, 1)
    yield seg
    seg.close()


# The agent reads what the remote wrote ------------------------------------------------------


def test_the_agent_reads_the_frame_the_reply_names() -> None:
    segment = shm.FrameSegment(210, 160)
    frames = SharedFrames("test", enabled=True)
    batch = np.zeros((3, 210, 160, 3), np.uint8)
    try:
        assert segment.path.stat().st_mode & 0o777 == 0o600
        for number in (4, 8):
            frame = random_frame(number, 210, 160)
            segment.write(frame, number, 1)
            assert frames.obs == OBS_SHM and frames.take(reply(segment, number), batch[1])
            assert np.array_equal(batch[1], frame) and not batch[0].any() and not batch[2].any()
            assert frames.last == (number, 1) and frames.pop_error() is None
        segment.write(random_frame(9, 210, 160), 12, 1)
        assert np.array_equal(batch[1], random_frame(8, 210, 160))  # a copy: nothing mapped
    finally:
        frames.forget()
        segment.close()
    assert not segment.path.exists()


def test_reader_keeps_the_file_open_close_on_exec_and_closes_once(segment: shm.FrameSegment) -> None:
    reader = shm.FrameReader(segment.name, 8, 8)
    fd = reader._fd
    assert not os.get_inheritable(fd)
    segment.close()  # removed: the open reader still reads its last frame
    dest = np.empty((8, 8, 3), np.uint8)
    assert reader.read_into(dest) == (3, 1) and np.array_equal(dest, random_frame(3))
    reader.close()
    reader.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(ValueError, match="closed"):
        reader.read_into(dest)


def test_destinations_that_do_not_fit_are_refused(segment: shm.FrameSegment) -> None:
    with shm.FrameReader(segment.name, 8, 8) as reader:
        for dest, why in ((np.empty((8, 8, 4), np.uint8), r"\[8, 8, 4\]"),
                          (np.empty((8, 8, 3), np.int16), "int16"),
                          (np.empty((8, 16, 3), np.uint8)[:, ::2], "not C-contiguous")):
            with pytest.raises(ValueError, match=why):
                reader.read_into(dest)
        frozen = np.empty((8, 8, 3), np.uint8)
        frozen.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            reader.read_into(frozen)


# A file that is not the step's frame ---------------------------------------------------------


def test_a_segment_holding_another_frame_is_not_read_and_vnc_takes_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    segment = shm.FrameSegment(8, 8)
    frames = SharedFrames("test", enabled=True)
    dest = np.empty((8, 8, 3), np.uint8)
    try:
        segment.write(np.zeros((8, 8, 3), np.uint8), 3, 1)
        assert not frames.take(reply(segment, 4), dest)  # the reply names frame 4: not this one
        assert frames.last is None and frames.obs == OBS_VNC
        assert "holds frame 3 of episode 1" in caplog.text and "over VNC" in caplog.text
    finally:
        segment.close()
    gone = SharedFrames("test", enabled=True)
    assert not gone.take(reply(segment, 3), dest)  # removed: another machine looks like this
    assert gone.obs == OBS_VNC
    assert "is not on this machine" in (gone.pop_error() or "")
    nothing = SharedFrames("test", enabled=True)
    assert not nothing.take(reply(None, 3), dest)  # no shm in the reply: nothing wrong
    assert nothing.obs == OBS_SHM and nothing.pop_error() is None


def test_shared_frames_go_off_after_an_error_say_why_once_and_come_back_after_a_reconnect(
    segment: shm.FrameSegment,
) -> None:
    frames = SharedFrames("test", enabled=True)
    dest = np.empty((8, 8, 3), np.uint8)
    try:
        assert not frames.take(reply(segment, 3, episode=2), dest)
        assert frames.obs == OBS_VNC
        error = frames.pop_error()
        assert error is not None and "the reply names frame 3 of episode 2" in error
        assert "over VNC" in error and "until the next reconnect" in error
        assert frames.pop_error() is None  # once
        assert not frames.take(reply(segment, 3), dest)  # off: not even tried
        assert frames.pop_error() is None
        frames.forget()  # the session closed: a reconnect follows
        assert frames.obs == OBS_SHM
        assert frames.take(reply(segment, 3), dest) and np.array_equal(dest, random_frame(3))
        frames.enabled = False
        frames.forget()
        assert frames.obs == OBS_SHM
    finally:
        frames.forget()
    assert SharedFrames("test", enabled=False).obs == OBS_VNC
    off = SharedFrames("test", enabled=False)
    off.forget()  # never asked for: stays off
    assert off.obs == OBS_VNC


def test_an_error_not_yet_reported_survives_the_reconnect(free_name: Path) -> None:
    frames = SharedFrames("test", enabled=True)
    assert not frames.take(named(free_name.name, 1), np.empty((8, 8, 3), np.uint8))
    frames.forget()
    assert frames.obs == OBS_SHM and "is not on this machine" in (frames.pop_error() or "")


def test_bad_names_and_sizes_are_refused_before_any_file_is_opened() -> None:
    for name in ("../etc/passwd", "universe-remote-frame-1/../../x", "other-file",
                 f"{shm.PREFIX}1\0x", 7):
        with pytest.raises(ValueError, match="not a frame segment name.*over VNC"):
            shm.FrameReader(name, 8, 8)  # type: ignore[arg-type]
    for height, width in ((0, 8), (8, -1), (shm.MAX_SIDE + 1, 8)):
        with pytest.raises(ValueError, match="is not a screen"):
            shm.FrameReader(f"{shm.PREFIX}1-0", height, width)


def test_wrong_dimensions_or_magic_in_the_header_are_refused(free_name: Path) -> None:
    size = shm.PIXELS_AT + 8 * 8 * 3
    header = bytearray(size)
    shm.HEADER.pack_into(header, 0, shm.MAGIC, 3, 1, 4, 16)  # 16x4: as many bytes as 8x8
    free_name.write_bytes(bytes(header))
    free_name.chmod(0o600)
    with shm.FrameReader(free_name.name, 8, 8) as reader:
        with pytest.raises(ValueError, match="holds a 16x4 frame, the reply named 8x8.*over VNC"):
            reader.read_into(np.empty((8, 8, 3), np.uint8))
    free_name.write_bytes(bytes(size))
    with shm.FrameReader(free_name.name, 8, 8) as reader:
        with pytest.raises(ValueError, match="does not start with.*not a frame segment"):
            reader.read_into(np.empty((8, 8, 3), np.uint8))
    segment = shm.FrameSegment(8, 8)  # a real one, named with the wrong size
    try:
        segment.write(random_frame(1), 1, 1)
        with shm.FrameReader(segment.name, 4, 8) as reader:
            with pytest.raises(ValueError, match="holds a 8x8 frame, the reply named 8x4"):
                reader.read_into(np.empty((4, 8, 3), np.uint8))
        with pytest.raises(ValueError, match="truncated: 256 bytes, a 16x8 frame needs 448"):
            shm.FrameReader(segment.name, 8, 16)
    finally:
        segment.close()


# Hostile files in the segment's place --------------------------------------------------------


def open_in_a_thread(name: str) -> BaseException | shm.FrameReader:
    """FrameReader(name, 8, 8) in a daemon thread that must be done within 5 s: what it
    raised or returned. (The old plain open() of a FIFO blocked forever, out of reach of
    any timeout; a thread that hangs fails the test here instead of hanging the run.)"""
    outcome: list[BaseException | shm.FrameReader] = []

    def run() -> None:
        try:
            outcome.append(shm.FrameReader(name, 8, 8))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), f"opening {name} hangs"
    return outcome[0]


@pytest.mark.timeout(20)
def test_a_fifo_in_the_segments_place_is_refused_without_hanging(free_name: Path) -> None:
    os.mkfifo(free_name, 0o600)
    outcome = open_in_a_thread(free_name.name)
    assert isinstance(outcome, ValueError)
    assert "is a FIFO, not a regular file; frames go over VNC instead" in str(outcome)
    frames = SharedFrames("test", enabled=True)
    assert not frames.take(named(free_name.name, 1), np.empty((8, 8, 3), np.uint8))
    assert "a FIFO" in (frames.pop_error() or "") and frames.obs == OBS_VNC


@pytest.mark.timeout(20)
def test_symbolic_links_are_refused_even_to_a_real_segment_or_a_fifo(
    segment: shm.FrameSegment, free_name: Path, tmp_path: Path
) -> None:
    free_name.symlink_to(segment.path)
    outcome = open_in_a_thread(free_name.name)
    assert isinstance(outcome, OSError) and "is a symbolic link" in str(outcome)
    assert "over VNC" in str(outcome)
    free_name.unlink()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    free_name.symlink_to(fifo)
    outcome = open_in_a_thread(free_name.name)
    assert isinstance(outcome, OSError) and "is a symbolic link" in str(outcome)


def test_a_directory_in_the_segments_place_is_refused(free_name: Path) -> None:
    free_name.mkdir(mode=0o700)
    with pytest.raises(ValueError, match="is a directory, not a regular file"):
        shm.FrameReader(free_name.name, 8, 8)


def test_a_segment_truncated_before_it_is_opened_is_refused(segment: shm.FrameSegment) -> None:
    os.truncate(segment.path, shm.PIXELS_AT + 10)
    with pytest.raises(ValueError, match=r"truncated: 74 bytes, a 8x8 frame needs 256.*over VNC"):
        shm.FrameReader(segment.name, 8, 8)


TRUNCATED_UNDER_THE_READER = textwrap.dedent("""
    import os
    import numpy as np
    from rewarder import shm

    segment = shm.FrameSegment(210, 160)
    segment.write(np.full((210, 160, 3), 7, np.uint8), 1, 1)
    reader = shm.FrameReader(segment.name, 210, 160)
    dest = np.empty((210, 160, 3), np.uint8)
    assert reader.read_into(dest) == (1, 1)
    for size in (shm.PIXELS_AT + 1000, 10, 0):
        os.truncate(segment.path, size)
        try:
            reader.read_into(dest)
        except ValueError as exc:
            assert "truncated" in str(exc), exc
        else:
            raise AssertionError(f"a segment truncated to {size} bytes was read")
    reader.close()
    segment.close()
    print("refused")
""")


def test_a_segment_truncated_under_the_reader_gives_a_value_error_never_sigbus() -> None:
    """A mapping of a truncated file kills the process with SIGBUS (exit -7) when it is
    read: run in a child, whose exit code 0 proves no signal came."""
    root = Path(__file__).resolve().parents[2]
    child = subprocess.run([sys.executable, "-c", TRUNCATED_UNDER_THE_READER], cwd=root,
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "refused"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user (uid 65534)")
def test_another_users_segment_is_refused(segment: shm.FrameSegment) -> None:
    fd = os.open(segment.path, os.O_RDONLY)
    try:
        os.fchown(fd, 65534, -1)
    finally:
        os.close(fd)
    with pytest.raises(PermissionError, match="belongs to uid 65534, not to this process's user"):
        shm.FrameReader(segment.name, 8, 8)
    frames = SharedFrames("test", enabled=True)
    assert not frames.take(reply(segment, 3), np.empty((8, 8, 3), np.uint8))
    assert "uid 65534" in (frames.pop_error() or "")


# Housekeeping ------------------------------------------------------------------------------


HELD_BY_A_CHILD = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"x")
    os.kill(os.getpid(), 9)  # killed holding its lock, as a remote killed mid-episode
""")


@pytest.mark.timeout(20)
def test_only_segments_nobody_holds_are_swept(free_name: Path, tmp_path: Path) -> None:
    """Liveness is the segment's lock, not the pid in its name: a segment of a killed
    process goes even when its name carries a living pid (ours: pid reuse, or another PID
    namespace), and a living segment stays whatever its name says. A FIFO or a symbolic
    link of a segment's name is left alone (and does not hang the sweep)."""
    fifo = free_name.with_name(free_name.name + "-fifo")
    os.mkfifo(fifo, 0o600)
    link = free_name.with_name(free_name.name + "-link")
    link.symlink_to(tmp_path / "nothing")
    killed = shm.SHM_DIR / f"{shm.PREFIX}{os.getpid()}-0123456789abcdef"  # names us: alive
    child = subprocess.run([sys.executable, "-c", HELD_BY_A_CHILD, str(killed)], check=False)
    assert child.returncode == -9 and killed.exists()
    living = subprocess.Popen([sys.executable, "-c", HELD_BY_A_CHILD.replace("os.kill(os.getpid(), 9)",
                               "print(flush=True); sys.stdin.read()"), str(free_name)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert living.stdout is not None and living.stdout.readline()  # it holds its lock now
        dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                                  capture_output=True, text=True, check=True)
        renamed = free_name.with_name(f"{shm.PREFIX}{int(dead_pid.stdout)}-fedcba9876543210")
        os.link(free_name, renamed)  # the living file again, under a dead pid's name
        ours = shm.FrameSegment(8, 8)  # sweeps first; then holds its own
        try:
            assert not killed.exists()
            removed = shm.sweep()
            assert free_name not in removed and renamed not in removed and ours.path not in removed
            assert free_name.exists() and renamed.exists() and ours.path.exists()
            assert fifo.exists() and link.is_symlink()
        finally:
            ours.close()
            renamed.unlink()
            fifo.unlink()
            link.unlink()
        assert not ours.path.exists()
    finally:
        assert living.stdin is not None
        living.stdin.close()
        living.wait()
    killed.unlink(missing_ok=True)


SEGMENT_ON_A_FULL_TMPFS = textwrap.dedent("""
    import errno, os, sys
    from pathlib import Path
    import numpy as np
    from rewarder import shm

    shm.SHM_DIR = Path(sys.argv[1])
    try:
        segment = shm.FrameSegment(210, 160)
        segment.write(np.full((210, 160, 3), 7, np.uint8), 1, 1)  # a sparse file: SIGBUS here
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
        print("ENOSPC", sorted(os.listdir(sys.argv[1])))
    else:
        print("written")
""")


def test_a_segment_on_a_full_tmpfs_is_an_oserror_at_creation_never_sigbus(tmp_path: Path) -> None:
    """A 64 KiB tmpfs has no room for a 210x160 frame (100 KiB): creating the segment says
    so (ENOSPC, nothing left behind), where a sparse file would kill the remote with
    SIGBUS (exit -7) at its first write. In a child, whose exit code shows any signal."""
    root = Path(__file__).resolve().parents[2]
    with tiny_tmpfs(tmp_path / "shm", "64k") as directory:
        child = subprocess.run([sys.executable, "-c", SEGMENT_ON_A_FULL_TMPFS, str(directory)],
                               cwd=root, capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr}"
    assert child.stdout.strip() == "ENOSPC []"


def test_a_segment_not_here_is_said_plainly_and_a_hostile_one_is_warned_of(
    free_name: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A remote with its own /dev/shm (a container on 127.0.0.1) names a segment this
    machine has not: expected, so said at INFO, not as 'unusable'; a FIFO in the
    segment's place is a surprise and stays a warning."""
    caplog.set_level("INFO", logger="remotes.shared_frames")
    frames = SharedFrames("test", enabled=True)
    assert not frames.take(named(free_name.name, 1), np.empty((8, 8, 3), np.uint8))
    [record] = caplog.records
    assert record.levelname == "INFO" and "unusable" not in record.getMessage()
    assert "a container" in record.getMessage() and "over VNC" in record.getMessage()
    assert "a container" in (frames.pop_error() or "")
    caplog.clear()
    frames.forget()
    os.mkfifo(free_name, 0o600)
    assert not frames.take(named(free_name.name, 1), np.empty((8, 8, 3), np.uint8))
    [record] = caplog.records
    assert record.levelname == "WARNING" and "unusable" in record.getMessage()
    assert "a FIFO" in record.getMessage()
