"""Writing a recording: :class:`EpisodeWriter` (one episode's files, synchronous) and
:class:`RecordingWriter` (a thread of its own that compresses and writes, fed by a
queue that never blocks the caller).

The game loop must never wait for a disk or a compressor: it hands each step (its JSON
and a copy of the frame) to :meth:`RecordingWriter.step`, which only queues. Past
:data:`MAX_QUEUED_BYTES` of frames waiting, a step's pixels are dropped (the step itself
is kept, so rewards and input stay whole), counted, and the episode's ``end.json`` says
how many (``dropped``). zstd and numpy release the GIL, so the writer runs beside the game
on another core.

When the disk fails it (ENOSPC, EIO, a directory removed under it) the writer stops:
:attr:`RecordingWriter.error` says why, the episode being written keeps its complete
chunks and gets ``end.json`` status ``failed`` (once there is room for it), and what is
queued meanwhile is dropped, until :meth:`RecordingWriter.resume`: the next
:meth:`~RecordingWriter.begin` starts a new episode.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Final

import numpy as np

from .format import (
    CHUNK_FRAMES,
    CHUNK_SECONDS,
    CHUNKS_FILE,
    END_FILE,
    EPISODE_PREFIX,
    FAILED,
    FORMAT_VERSION,
    META_FILE,
    ChunkEncoder,
    dumps,
    episode_dir_name,
    episode_number,
    frame_hash,
)

log = logging.getLogger(__name__)

#: Frame bytes queued for the writer before further frames are dropped: about 4 s of a
#: 1024x768 remote at 60 fps, or minutes of Atari. The writer keeps up by far
#: (benchmarks/recording.py); this only bounds memory when the disk stalls.
MAX_QUEUED_BYTES: Final = 512 * 1024 * 1024
#: Seconds close() waits for the writer to write what is queued.
CLOSE_TIMEOUT: Final = 30.0


def write_json_atomically(path: Path, value: Any) -> None:
    """Write ``path`` whole or not at all (a temporary file renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(dumps(value) + b"\n")
    os.replace(tmp, path)


class EpisodeWriter:
    """One episode's directory: ``meta.json`` now, chunks as steps come, ``end.json`` last."""

    def __init__(self, directory: Path, meta: dict[str, Any]) -> None:
        self.directory = directory
        self.meta = {"format_version": FORMAT_VERSION, **meta}
        self.shape = (int(meta["height"]), int(meta["width"]), 3)
        # Made under another name and renamed: a reader never sees it without its meta.
        making = directory.with_name(f".{directory.name}.new")
        making.mkdir(parents=True)
        try:
            write_json_atomically(making / META_FILE, self.meta)
            making.rename(directory)
        except BaseException:
            shutil.rmtree(making, ignore_errors=True)
            raise
        self._file = open(directory / CHUNKS_FILE, "ab")  # noqa: SIM115 (closed in finish)
        self._encoder = ChunkEncoder(self.shape)
        self._chunk_started = 0.0
        self.steps = 0
        self.dropped = 0
        self.reward = 0.0
        #: Steps, dropped frames, reward and bytes of the chunks written whole so far.
        self._written = (0, 0, 0.0, 0)

    def add(self, step: dict[str, Any], frame: np.ndarray | None) -> None:
        """Append a step (its ``i`` must be the next) and its frame (None: dropped)."""
        if self._encoder.count == 0:
            self._chunk_started = time.monotonic()
        if frame is not None:
            step["hash"] = frame_hash(frame)
        self._encoder.add(int(step["i"]), frame, dumps(step))
        self.steps += 1
        self.dropped += frame is None
        self.reward += float(step.get("reward", 0.0))
        if self._encoder.count >= CHUNK_FRAMES or self.stale():
            self.flush()

    def stale(self) -> bool:
        """Steps have waited in the open chunk for CHUNK_SECONDS."""
        return self._encoder.count > 0 and time.monotonic() - self._chunk_started >= CHUNK_SECONDS

    def flush(self) -> None:
        """Write the open chunk and hand it to the OS (a kill after this keeps it)."""
        data = self._encoder.finish()
        if data:
            self._file.write(data)
            self._file.flush()
            self._written = (self.steps, self.dropped, self.reward, self._written[3] + len(data))

    def finish(self, status: str, **extra: Any) -> None:
        """Write what is left and ``end.json``: the episode is complete."""
        self.flush()
        self._file.close()
        self._end(status, self.steps, self.dropped, self.reward, extra)

    def abandon(self) -> None:
        """After a write failed: close the chunk file cut back to its last whole chunk
        (what a failed write left of the next one goes; best effort)."""
        with contextlib.suppress(OSError):
            self._file.close()  # flushing what failed fails again; closed all the same
        with contextlib.suppress(OSError):
            os.truncate(self.directory / CHUNKS_FILE, self._written[3])

    def finish_failed(self, error: str) -> None:
        """``end.json`` of an abandoned episode: status ``failed``, what is on disk, why."""
        steps, dropped, reward, _ = self._written
        self._end(FAILED, steps, dropped, reward, {"error": error})

    def _end(self, status: str, steps: int, dropped: int, reward: float, extra: dict[str, Any]) -> None:
        write_json_atomically(self.directory / END_FILE, {
            "status": status, "steps": steps, "dropped": dropped,
            "total_reward": reward, "ended": time.time(), **extra,
        })


class RecordingWriter:
    """Writes episodes under ``root`` from a thread of its own.

    Call :meth:`begin` (an episode's meta and first frame), :meth:`step` for every step,
    :meth:`end` with how it ended, and :meth:`close` at the end. None of them waits for
    the disk.
    """

    def __init__(self, root: str | os.PathLike[str], max_queued_bytes: int = MAX_QUEUED_BYTES) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        numbers = [episode_number(p.name) for p in self.root.iterdir() if p.name.startswith(EPISODE_PREFIX)]
        self._next = max((n for n in numbers if n is not None), default=0) + 1
        self.max_queued_bytes = max_queued_bytes
        #: Steps whose pixels were dropped because the writer was behind.
        self.dropped = 0
        #: The directory of the episode begun last (None before the first).
        self.current: Path | None = None
        #: The error that stopped the writer thread (it drops what comes until
        #: :meth:`resume`), if any.
        self.error: BaseException | None = None
        #: The episode being written when it stopped (None: it stopped beginning one).
        self.error_episode: Path | None = None
        self._failed = False  # the thread's view of ``error``: drop until "resume"
        #: The episode a failure cut and why, while its end.json is not written.
        self._unfinished: tuple[EpisodeWriter, str] | None = None
        self._queue: queue.SimpleQueue[tuple[str, Any, Any] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._queued = 0
        self._idle = threading.Condition(self._lock)
        self._pending = 0  # items queued and not yet written
        self._thread = threading.Thread(target=self._run, name="recording-writer", daemon=True)
        self._thread.start()

    # The caller's side: never blocks -----------------------------------------------------

    def begin(self, meta: dict[str, Any], step: dict[str, Any], frame: np.ndarray) -> Path:
        """Start an episode (ending none: call :meth:`end` first); its directory."""
        self.current = self.root / episode_dir_name(self._next)
        self._next += 1
        self._put("begin", (self.current, meta), None)
        self.step(step, frame)
        return self.current

    def step(self, step: dict[str, Any], frame: np.ndarray) -> bool:
        """Queue a step with a copy of ``frame``; False when its pixels were dropped."""
        with self._lock:
            room = self._queued + frame.nbytes <= self.max_queued_bytes
            if room:
                self._queued += frame.nbytes
        if not room:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("recording: the writer is behind; %d frames dropped so far "
                            "(MAX_QUEUED_BYTES %d)", self.dropped, self.max_queued_bytes)
        self._put("step", step, frame.copy() if room else None)
        return room

    def end(self, status: str, **extra: Any) -> None:
        """End the episode begun last, saying how (``format.DONE``, ...)."""
        self._put("end", status, extra)

    def resume(self) -> None:
        """After :attr:`error`: write again, from the next :meth:`begin` (the failed
        episode gets its ``end.json`` first if there is room now). Whether there is room
        shows as the next :attr:`error`, or none."""
        self.error = self.error_episode = None
        self._put("resume", None, None)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far is written and flushed (tests, shutdown)."""
        self._put("flush", None, None)
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Write what is queued and stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("recording: the writer did not finish in %g s; the last episode may "
                      "be partial", timeout)

    def _put(self, kind: str, a: Any, b: Any) -> None:
        with self._lock:
            self._pending += 1
        self._queue.put((kind, a, b))

    # The writer thread ---------------------------------------------------------------------

    def _run(self) -> None:
        episode: EpisodeWriter | None = None
        while True:
            try:
                item = self._queue.get(timeout=CHUNK_SECONDS)
            except queue.Empty:
                if episode is not None and episode.stale():
                    episode = self._do(episode, "flush", None, None)
                continue
            if item is None:
                break
            kind, a, b = item
            try:
                episode = self._do(episode, kind, a, b)
            finally:
                with self._lock:
                    if kind == "step" and b is not None:
                        self._queued -= b.nbytes
                    self._pending -= 1
                    if self._pending == 0:
                        self._idle.notify_all()
        if episode is not None:
            self._do(episode, "flush", None, None)
        self._finish_unfinished()

    def _do(self, episode: EpisodeWriter | None, kind: str, a: Any, b: Any) -> EpisodeWriter | None:
        """Handle one item; on a failure, stop (say why once) and drop the episode."""
        if kind == "resume":
            self._failed = False
            self._finish_unfinished()
            return episode
        if self._failed:
            return None
        try:
            return self._handle(episode, kind, a, b)
        except Exception as exc:  # a full disk: say so once, keep the game going
            self._failed = True
            self.error_episode = episode.directory if episode is not None else (
                a[0] if kind == "begin" else None)
            self.error = exc
            log.error("recording stopped: %s (writing %s); the game goes on unrecorded until "
                      "recording is switched on again", exc, self.error_episode)
            if episode is not None:
                episode.abandon()
                self._unfinished = (episode, str(exc))
                self._finish_unfinished()
            return None

    def _finish_unfinished(self) -> None:
        """``end.json`` (status failed) of the episode a failure cut, if there is room."""
        if self._unfinished is None:
            return
        episode, error = self._unfinished
        try:
            episode.finish_failed(error)
        except OSError:
            return
        self._unfinished = None

    def _handle(self, episode: EpisodeWriter | None, kind: str, a: Any, b: Any) -> EpisodeWriter | None:
        if kind == "begin":
            directory, meta = a
            return EpisodeWriter(directory, meta)
        if episode is None:
            return None
        if kind == "step":
            episode.add(a, b)
        elif kind == "end":
            episode.finish(a, **b)
            return None
        elif kind == "flush":
            episode.flush()
        return episode
