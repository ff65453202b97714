"""The on-disk format of a recording, sans I/O: names, limits, and the chunk codec.

A recording is a directory of episodes (``episode-000001/`` ...); each holds

- ``meta.json``: what was recorded (env id, seed, mode, fps, screen, software version),
  written when the episode starts;
- ``chunks.urc``: chunks appended as the episode goes, each holding up to
  :data:`CHUNK_FRAMES` frames (zstd, each frame XORed with the one before) and their
  steps (JSON lines, zstd): complete chunks are what a reader sees;
- ``end.json``: how the episode ended, written last (atomically): its absence marks an
  episode cut off by a crash or a kill (or one still being written).

``docs/recording.md`` is the user's description of the same; keep them together.

Chunk layout (little endian)::

    magic "URC1" | u32 first step | u32 count | u32 frames bytes | u32 steps bytes
    count flag bytes (FLAG_KEY, FLAG_DELTA, FLAG_DROPPED)
    frames: one zstd frame, the kept frames' pixels (HxWx3 uint8, row major), the first
            of the chunk as is (FLAG_KEY), the others XOR the previous kept frame
    steps:  one zstd frame, ``count`` JSON lines, one per step
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import orjson
import zstandard

#: Bumped when a reader of the previous version could not read what is written now.
FORMAT_VERSION: Final = 1
META_FILE: Final = "meta.json"
CHUNKS_FILE: Final = "chunks.urc"
END_FILE: Final = "end.json"
#: Episode directories: ``episode-000001``, numbered on from the highest in the recording.
EPISODE_PREFIX: Final = "episode-"
EPISODE_DIGITS: Final = 6

CHUNK_MAGIC: Final = b"URC1"
CHUNK_HEADER: Final = struct.Struct("<4sIIII")
#: Steps per chunk: a kill loses at most this many steps (or CHUNK_SECONDS of them).
CHUNK_FRAMES: Final = 60
#: A chunk is written at least this often while steps come (and while they don't, the
#: writer flushes what it holds after this long).
CHUNK_SECONDS: Final = 1.0
#: zstd level: 3 (its default); higher levels were slower and no smaller on game frames
#: (``python -m benchmarks recording``; benchmarks/RESULTS.md).
ZSTD_LEVEL: Final = 3
#: A step's pixels: the first kept frame of a chunk, stored as is.
FLAG_KEY: Final = 0
#: Stored XOR the previous kept frame (unchanged pixels are zeros: they cost nothing).
FLAG_DELTA: Final = 1
#: Not stored: the writer was behind and dropped the pixels (the step is kept); readers
#: repeat the previous frame and list the step in ``Episode.dropped``.
FLAG_DROPPED: Final = 2

#: How an episode ended (``end.json``'s ``status``); PARTIAL when there is no end.json.
DONE: Final = "done"  # the game said done
RESET: Final = "reset"  # a reset (or a runtime failure) started another episode first
STOPPED: Final = "stopped"  # recording was switched off
CLOSED: Final = "closed"  # the remote shut down
FAILED: Final = "failed"  # the writer could not write (a full disk): end.json says why
PARTIAL: Final = "partial"  # no end.json: the process died, or it is still being written
STATUSES: Final = (DONE, RESET, STOPPED, CLOSED, FAILED, PARTIAL)


class FormatError(ValueError):
    """A file is not a recording this version reads; the message names it and why."""


def episode_dir_name(number: int) -> str:
    return f"{EPISODE_PREFIX}{number:0{EPISODE_DIGITS}d}"


def episode_number(name: str) -> int | None:
    """The number of an episode directory's name, or None for any other name."""
    digits = name.removeprefix(EPISODE_PREFIX)
    if name == digits or not digits.isdigit():
        return None
    return int(digits)


def dumps(value: Any) -> bytes:
    """JSON as the recording writes it (numpy scalars and arrays allowed)."""
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY, default=_jsonable)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.decode("latin-1")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


class ChunkEncoder:
    """Builds one chunk at a time: :meth:`add` each step (pixels and its JSON line),
    :meth:`finish` for the chunk's bytes. Compression happens as frames are added, so
    only compressed bytes are held."""

    def __init__(self, shape: tuple[int, int, int], level: int = ZSTD_LEVEL) -> None:
        self.shape = shape
        self._zstd = zstandard.ZstdCompressor(level=level, write_checksum=True)
        self.first = 0
        self.count = 0
        self._flags = bytearray()
        self._frames: zstandard.ZstdCompressionObj | None = None
        self._frame_parts: list[bytes] = []
        self._steps: list[bytes] = []
        self._previous: np.ndarray | None = None

    def add(self, index: int, frame: np.ndarray | None, step_line: bytes) -> None:
        """Step ``index`` (consecutive within a chunk) with its pixels (None: dropped)."""
        if self.count == 0:
            self.first, self._previous = index, None
            self._frames = self._zstd.compressobj()
        elif index != self.first + self.count:
            raise ValueError(f"step {index} after step {self.first + self.count - 1}")
        assert self._frames is not None
        if frame is None:
            self._flags.append(FLAG_DROPPED)
        else:
            if frame.shape != self.shape:
                raise ValueError(f"frame of shape {frame.shape} in an episode of {self.shape}")
            if self._previous is None:
                self._flags.append(FLAG_KEY)
                data = frame
            else:
                self._flags.append(FLAG_DELTA)
                data = np.bitwise_xor(frame, self._previous)
            self._frame_parts.append(self._frames.compress(np.ascontiguousarray(data).data))
            self._previous = frame
        self._steps.append(step_line)
        self.count += 1

    def finish(self) -> bytes:
        """The chunk's bytes (empty if no step was added); the encoder starts afresh."""
        if self.count == 0:
            return b""
        assert self._frames is not None
        self._frame_parts.append(self._frames.flush())
        frames = b"".join(self._frame_parts)
        steps = self._zstd.compress(b"\n".join(self._steps) + b"\n")
        header = CHUNK_HEADER.pack(CHUNK_MAGIC, self.first, self.count, len(frames), len(steps))
        out = b"".join((header, bytes(self._flags), frames, steps))
        self.count = 0
        self._flags.clear()
        self._frame_parts.clear()
        self._steps.clear()
        self._previous, self._frames = None, None
        return out


@dataclass(frozen=True)
class Chunk:
    """A chunk as read: where its sections are in the file's bytes."""

    first: int
    count: int
    flags: bytes
    frames: memoryview
    steps: memoryview


def read_chunks(data: bytes | memoryview, name: str = CHUNKS_FILE) -> Iterator[Chunk]:
    """The complete chunks of a chunk file's bytes; a truncated last chunk (the writer
    was killed while writing it) ends the iteration."""
    view = memoryview(data)
    at = 0
    while at + CHUNK_HEADER.size <= len(view):
        magic, first, count, frames_len, steps_len = CHUNK_HEADER.unpack_from(view, at)
        if magic != CHUNK_MAGIC:
            raise FormatError(f"{name}: no chunk at byte {at} (magic {bytes(magic)!r}); "
                              "not a recording of this format, or a damaged one")
        body = at + CHUNK_HEADER.size
        end = body + count + frames_len + steps_len
        if end > len(view):
            return
        frames_at = body + count
        yield Chunk(first, count, bytes(view[body:frames_at]),
                    view[frames_at : frames_at + frames_len], view[frames_at + frames_len : end])
        at = end


def decode_steps(chunk: Chunk) -> list[dict[str, Any]]:
    """The chunk's steps as JSON objects."""
    text = zstandard.ZstdDecompressor().decompress(chunk.steps)
    return [orjson.loads(line) for line in text.splitlines() if line]


def decode_frames(
    chunk: Chunk, shape: tuple[int, int, int], previous: np.ndarray | None
) -> Iterator[np.ndarray]:
    """The chunk's frames, each a new array; a dropped one repeats the frame before it
    (``previous`` is the last frame of the chunk before, for a chunk that starts with one)."""
    size = int(np.prod(shape))
    kept = sum(1 for flag in chunk.flags if flag != FLAG_DROPPED)
    reader = zstandard.ZstdDecompressor().stream_reader(chunk.frames)
    last: np.ndarray | None = None  # the previous kept frame in this chunk
    for flag in chunk.flags:
        if flag == FLAG_DROPPED:
            repeat = last if last is not None else previous
            if repeat is None:
                raise FormatError("a dropped frame with no frame before it to repeat")
            yield repeat.copy()
            continue
        raw = reader.read(size)
        if len(raw) != size:
            raise FormatError(f"a chunk's frames ended early ({kept} frames of {size} bytes)")
        frame = np.frombuffer(raw, np.uint8).reshape(shape)
        if flag == FLAG_DELTA:
            if last is None:
                raise FormatError("a delta frame with no key frame before it")
            frame = np.bitwise_xor(frame, last)
        elif flag == FLAG_KEY:
            frame = frame.copy()
        else:
            raise FormatError(f"unknown frame flag {flag}")
        last = frame
        yield frame.copy()


def frame_hash(frame: np.ndarray) -> str:
    """The hash each step carries: blake2b of the frame's pixels, 8 bytes, in hex."""
    return hashlib.blake2b(np.ascontiguousarray(frame).data, digest_size=8).hexdigest()


def event_players(events: Sequence[Sequence[Any]]) -> list[int] | None:
    """The player of each event (``(player, event)`` pairs are player N's, plain events
    player 0's), or None when every event is player 0's: steps store ``players`` only
    for events of other players."""
    players = [int(e[0]) if len(e) == 2 and isinstance(e[1], tuple) else 0 for e in events]
    return players if any(players) else None


def event_json(source: str, event: Sequence[Any]) -> list[Any]:
    """An input event as a step stores it: ``[source, "KeyEvent", key, down]`` or
    ``[source, "PointerEvent", x, y, buttonmask]``. A multi-player runtime's event of
    player N (``(player, event)``, a ``PlayerEvent``) is stored as its event; the step's
    ``players`` list (:func:`event_players`) says whose it was."""
    if len(event) == 2 and isinstance(event[1], tuple):
        event = event[1]
    if len(event) == 2:
        return [source, "KeyEvent", event[0], bool(event[1])]
    x, y, mask = event
    return [source, "PointerEvent", int(x), int(y), int(mask)]
