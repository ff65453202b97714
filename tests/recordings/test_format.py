"""The recording format and its writer and reader, without a remote."""

from __future__ import annotations

import errno
import logging
import threading
from pathlib import Path

import numpy as np
import pytest

from recordings import FormatError, open_recording, writer as writer_module
from recordings.format import (
    CHUNK_FRAMES,
    CHUNKS_FILE,
    DONE,
    END_FILE,
    PARTIAL,
    ChunkEncoder,
    decode_frames,
    decode_steps,
    dumps,
    frame_hash,
    read_chunks,
)
from recordings.writer import EpisodeWriter, RecordingWriter
from tests.full_disk import fill, tiny_tmpfs

SHAPE = (24, 32, 3)


def frames(n: int, seed: int = 0) -> list[np.ndarray]:
    """A moving block on noise: most pixels stay, some change each frame."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, SHAPE, dtype=np.uint8)
    out = []
    for i in range(n):
        frame = base.copy()
        frame[4:10, i % 20 : i % 20 + 8] = (i * 37) % 256
        out.append(frame)
    return out


def test_a_chunk_round_trips_with_a_dropped_frame() -> None:
    encoder = ChunkEncoder(SHAPE)
    shown = frames(5)
    for i, frame in enumerate(shown):
        encoder.add(10 + i, None if i == 3 else frame, dumps({"i": 10 + i}))
    data = encoder.finish()
    (chunk,) = read_chunks(data)
    assert (chunk.first, chunk.count) == (10, 5)
    assert [s["i"] for s in decode_steps(chunk)] == [10, 11, 12, 13, 14]
    decoded = list(decode_frames(chunk, SHAPE, None))
    expected = [shown[0], shown[1], shown[2], shown[2], shown[4]]  # 13's pixels dropped
    assert all(np.array_equal(a, b) for a, b in zip(decoded, expected, strict=True))
    with pytest.raises(ValueError, match="step 99 after step"):
        encoder.add(0, shown[0], b"{}")
        encoder.add(99, shown[0], b"{}")


def test_damaged_files_are_named() -> None:
    with pytest.raises(FormatError, match="no chunk at byte 0"):
        list(read_chunks(b"JUNK" + bytes(40)))


def write_episode(root: Path, n: int, **writer_kwargs: int) -> RecordingWriter:
    writer = RecordingWriter(root, **writer_kwargs)
    shown = frames(n)
    writer.begin({"env_id": "test.Env-v0", "seed": 7, "mode": "lockstep", "fps": 60.0,
                  "width": SHAPE[1], "height": SHAPE[0]}, {"i": 0, "frame": 0, "frames": 0}, shown[0])
    for i in range(1, n):
        writer.step({"i": i, "frame": i, "reward": 1.0, **({"done": True} if i == n - 1 else {}),
                     "events": [["agent", "KeyEvent", "Left", i % 2 == 1]]}, shown[i])
    return writer


def test_written_episodes_read_back(tmp_path: Path) -> None:
    n = CHUNK_FRAMES * 2 + 5
    writer = write_episode(tmp_path, n)
    writer.end(DONE)
    writer.close()
    (episode,) = open_recording(tmp_path)
    assert episode.complete and episode.status == DONE and episode.done
    assert (episode.seed, episode.env_id, episode.mode, len(episode)) == (7, "test.Env-v0", "lockstep", n)
    assert episode.total_reward == n - 1 == episode.end["total_reward"]  # type: ignore[index]
    assert episode.steps[1].events[0].source == "agent"
    assert episode.steps[1].events[0].action() == ["KeyEvent", "Left", True]
    shown = frames(n)
    for (step, frame), expected in zip(episode, shown, strict=True):
        assert np.array_equal(frame, expected) and step.hash == frame_hash(expected)
    # A second writer numbers on.
    again = write_episode(tmp_path, 3)
    again.end(DONE)
    again.close()
    assert [e.path.name for e in open_recording(tmp_path)] == ["episode-000001", "episode-000002"]


def test_a_writer_behind_drops_pixels_not_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()  # the disk stalls until the caller has queued everything
    add = EpisodeWriter.add

    def stalled(self: EpisodeWriter, step: dict, frame: np.ndarray | None) -> None:  # type: ignore[type-arg]
        assert gate.wait(10)
        add(self, step, frame)

    monkeypatch.setattr(EpisodeWriter, "add", stalled)
    writer = write_episode(tmp_path, 50, max_queued_bytes=int(np.prod(SHAPE)) * 3)
    writer.end(DONE)
    gate.set()
    writer.close()
    (episode,) = open_recording(tmp_path)
    assert len(episode) == 50 and episode.total_reward == 49  # every step and reward kept
    assert writer.dropped == 47 == episode.end["dropped"] and episode.dropped == list(range(3, 50))  # type: ignore[index]
    shown, read = frames(3), list(episode.frames())
    assert np.array_equal(read[2], shown[2]) and all(np.array_equal(f, shown[2]) for f in read[3:])


def test_a_cut_off_episode_reads_to_its_last_whole_chunk(tmp_path: Path) -> None:
    writer = write_episode(tmp_path, CHUNK_FRAMES * 2 + 5)
    assert writer.drain(timeout=10)
    writer.close()  # no end(): as if killed after the last flush
    (episode,) = open_recording(tmp_path)
    data = (episode.path / CHUNKS_FILE).read_bytes()
    (episode.path / CHUNKS_FILE).write_bytes(data[:-7])  # the last chunk half written
    (episode,) = open_recording(tmp_path)
    assert episode.status == PARTIAL and not episode.complete and not (episode.path / END_FILE).exists()
    assert len(episode) == CHUNK_FRAMES * 2 == len(list(episode.frames()))


def test_not_a_recording(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="is not a directory"):
        open_recording(tmp_path / "nothing")
    (tmp_path / "episode-000001").mkdir()
    with pytest.raises(FormatError, match="has no meta.json"):
        open_recording(tmp_path)


def test_select_takes_one_kind_of_episode_and_says_what_is_wrong(tmp_path: Path) -> None:
    for n in (4, 1, 5):  # the second has no step past its first frame
        writer = write_episode(tmp_path, n)
        writer.end(DONE)
        writer.close()
    recording = open_recording(tmp_path)
    assert [e.number for e in recording.select(min_steps=2, use="export")] == [1, 3]
    assert [e.number for e in recording.select([2], min_steps=1, use="replay")] == [2]
    with pytest.raises(FormatError, match="no episode with enough recorded steps to export"):
        recording.select([2], min_steps=2, use="export")
    with pytest.raises(FormatError, match="has no episode 9; it has: 1, 2, 3"):
        recording.select([9], min_steps=1, use="replay")
    meta = recording.episode(3).path / "meta.json"
    meta.write_text(meta.read_text().replace("test.Env-v0", "test.Other-v0"))
    with pytest.raises(FormatError, match=r"episodes \[3\] .* another env or screen than episode 1"
                                          r" \(test.Env-v0\); export one kind at a time"):
        open_recording(tmp_path).select(min_steps=2, use="export")


def test_an_old_chunk_flushed_onto_a_full_disk_stops_the_writer_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer flushes a chunk that waited CHUNK_SECONDS by itself, between items: a
    full disk there stops it as anywhere else (error set, logged, drain() still returns),
    where it used to kill the thread without a word and leave drain() waiting."""
    monkeypatch.setattr(writer_module, "CHUNK_SECONDS", 0.05)
    stopped = threading.Event()

    class Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("recording stopped"):
                stopped.set()

    heard = Heard()
    logging.getLogger("recordings.writer").addHandler(heard)
    rng = np.random.default_rng(1)
    try:
        with tiny_tmpfs(tmp_path / "disk", "256k") as disk:
            writer = RecordingWriter(disk / "rec")
            try:
                writer.begin({"width": SHAPE[1], "height": SHAPE[0]}, {"i": 0, "frame": 0},
                             frames(1)[0])
                assert writer.drain(10)
                fill(disk)
                for i in range(1, 4):  # noise: more than the page the chunk file has left
                    writer.step({"i": i, "frame": i}, rng.integers(0, 256, SHAPE, dtype=np.uint8))
                assert stopped.wait(10), "the writer stopped without a word"
                assert writer.drain(10)
                assert isinstance(writer.error, OSError) and writer.error.errno == errno.ENOSPC
                assert writer.error_episode == disk / "rec" / "episode-000001"
            finally:
                writer.close()
    finally:
        logging.getLogger("recordings.writer").removeHandler(heard)
