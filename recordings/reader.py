"""Reading recordings: :func:`open_recording` gives a :class:`Recording`, a sequence of
:class:`Episode`; each gives its :class:`Step` list (input events with who sent them,
rewards, done, text, observations) and its frames.

What a crash left is readable: every complete chunk of a partial episode (status
``partial``, ``complete`` False). Steps and frames line up: step ``i`` is the advance
that drew frame ``i``; step 0 is the episode's first frame (the reset, or the moment
recording was switched on) and has no input.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple, overload

import numpy as np
import orjson

from .format import (
    CHUNKS_FILE,
    END_FILE,
    FLAG_DROPPED,
    META_FILE,
    PARTIAL,
    FormatError,
    decode_frames,
    decode_steps,
    episode_number,
    read_chunks,
)


class RecordedEvent(NamedTuple):
    """An input event and who sent it: ``source`` is ``"agent"`` (the rewarder's active
    client), ``"vnc:N"`` (VNC client N) or ``"viewer:N"`` (a browser viewer, VNC client N
    in-process). ``args`` are ``(key, down)`` for a KeyEvent, ``(x, y, buttonmask)`` for
    a PointerEvent. ``player``: whose the event was, on a multi-player runtime (0
    otherwise)."""

    source: str
    kind: str
    args: tuple[Any, ...]
    player: int = 0

    @classmethod
    def from_json(cls, item: Sequence[Any], player: int = 0) -> RecordedEvent:
        """One event as ``steps.jsonl`` holds it.

        Args:
            item: ``[source, kind, *args]``.
            player: whose it was.

        Returns:
            The event.
        """
        return cls(str(item[0]), str(item[1]), tuple(item[2:]), player)

    def action(self) -> list[Any]:
        """The event as a rewarder action (``["KeyEvent", key, down]``).

        Returns:
            ``[kind, *args]``.
        """
        return [self.kind, *self.args]


@dataclass(frozen=True)
class Step:
    """One advance of the runtime (one frame in real time; a lockstep step, or a slice of
    a long one, in lockstep), and what it earned."""

    index: int
    #: The remote's frame counter after it (frame numbers of VNC's frame tags).
    frame: int
    #: Frames it advanced (0 for step 0).
    frames: int
    #: Unix time it was drawn.
    time: float
    #: Applied, in order, before the frame was drawn (so while frame ``index - 1`` showed).
    events: tuple[RecordedEvent, ...]
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)
    text: str | None = None
    observation: Any = None
    #: blake2b (8 bytes, hex) of the frame's pixels as drawn.
    hash: str | None = None
    #: A multi-player runtime's step: every player's reward (``reward`` is player 0's);
    #: None when the runtime has one player or nobody earned anything.
    rewards: tuple[float, ...] | None = None

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> Step:
        """One line of ``steps.jsonl``, read with its defaults for older recordings.

        Args:
            item: the line's object.

        Returns:
            The step.
        """
        return cls(
            index=int(item["i"]), frame=int(item["frame"]), frames=int(item.get("frames", 1)),
            time=float(item.get("t", 0.0)),
            events=tuple(
                RecordedEvent.from_json(e, p) for e, p in zip(
                    item.get("events", ()),
                    item.get("players") or [0] * len(item.get("events", ())),
                    strict=True,
                )
            ),
            reward=float(item.get("reward", 0.0)), done=bool(item.get("done", False)),
            info=dict(item.get("info", {})), text=item.get("text"),
            observation=item.get("observation"), hash=item.get("hash"),
            rewards=tuple(item["rewards"]) if item.get("rewards") else None,
        )


class Episode:
    """One recorded episode (a directory). Cheap to make: files are read when asked for."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Reads only the episode's ``meta.json`` (and ``end.json``) now.

        Args:
            path: the episode's directory.

        Raises:
            FormatError: no ``meta.json``, or not JSON.
        """
        self.path = Path(path)
        try:
            self.meta: dict[str, Any] = orjson.loads((self.path / META_FILE).read_bytes())
        except FileNotFoundError:
            raise FormatError(f"{self.path} has no {META_FILE}: not a recorded episode") from None
        except orjson.JSONDecodeError as exc:
            raise FormatError(f"{self.path / META_FILE} is not JSON ({exc})") from None
        end = self.path / END_FILE
        #: ``end.json`` (how it ended), or None: the episode is partial.
        self.end: dict[str, Any] | None = orjson.loads(end.read_bytes()) if end.exists() else None

    def __repr__(self) -> str:
        return f"<Episode {self.path.name} {self.env_id} {self.status}>"

    @property
    def number(self) -> int:
        return episode_number(self.path.name) or 0

    @property
    def status(self) -> str:
        """``done``, ``reset``, ``stopped``, ``closed``, ``failed`` or ``partial``
        (format.STATUSES)."""
        return str(self.end["status"]) if self.end is not None else PARTIAL

    @property
    def complete(self) -> bool:
        """Written to its end (end.json exists); False for what a crash or kill cut off."""
        return self.end is not None

    @property
    def env_id(self) -> str:
        return str(self.meta["env_id"])

    @property
    def seed(self) -> int | None:
        return self.meta.get("seed")

    @property
    def mode(self) -> str:
        return str(self.meta["mode"])

    @property
    def fps(self) -> float:
        return float(self.meta["fps"])

    @property
    def shape(self) -> tuple[int, int, int]:
        return (int(self.meta["height"]), int(self.meta["width"]), 3)

    def _data(self) -> bytes:
        try:
            return (self.path / CHUNKS_FILE).read_bytes()
        except FileNotFoundError:
            return b""

    @cached_property
    def steps(self) -> list[Step]:
        """Every step written (for a partial episode, up to its last flushed chunk)."""
        name = str(self.path / CHUNKS_FILE)
        return [Step.from_json(s) for chunk in read_chunks(self._data(), name)
                for s in decode_steps(chunk)]

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def rewards(self) -> np.ndarray:
        return np.array([s.reward for s in self.steps], dtype=np.float64)

    @property
    def total_reward(self) -> float:
        return float(self.rewards.sum())

    @property
    def done(self) -> bool:
        """The game ended the episode (its last step says done)."""
        return bool(self.steps) and self.steps[-1].done

    @cached_property
    def dropped(self) -> list[int]:
        """Steps whose pixels the writer dropped (their frame repeats the one before)."""
        out = []
        for chunk in read_chunks(self._data()):
            out += [chunk.first + k for k, flag in enumerate(chunk.flags) if flag == FLAG_DROPPED]
        return out

    def frames(self) -> Iterator[np.ndarray]:
        """The frames, in step order, each a new HxWx3 uint8 array (decoded as you go).

        Yields:
            Each frame.
        """
        previous: np.ndarray | None = None
        for chunk in read_chunks(self._data(), str(self.path / CHUNKS_FILE)):
            for frame in decode_frames(chunk, self.shape, previous):
                previous = frame
                yield frame

    def frame_array(self) -> np.ndarray:
        """All frames as one (steps, H, W, 3) array: mind the memory for big screens.

        Returns:
            The frames.
        """
        out = np.empty((len(self.steps), *self.shape), np.uint8)
        for i, frame in enumerate(self.frames()):
            out[i] = frame
        return out

    def __iter__(self) -> Iterator[tuple[Step, np.ndarray]]:
        """(step, frame) pairs."""
        return zip(self.steps, self.frames(), strict=False)


class Recording(Sequence[Episode]):
    """A recording directory: its episodes in the order they were recorded."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Finds the episodes; each reads its files when asked for.

        Args:
            path: the directory ``serve --record`` wrote.

        Raises:
            FormatError: ``path`` is not a directory, or an episode has no readable ``meta.json``.
        """
        self.path = Path(path)
        if not self.path.is_dir():
            raise FormatError(f"{self.path} is not a directory: pass the DIR given to serve --record")
        numbered = sorted(
            (n, p) for p in self.path.iterdir()
            if p.is_dir() and (n := episode_number(p.name)) is not None
        )
        self.episodes = [Episode(p) for _, p in numbered]

    def __repr__(self) -> str:
        return f"<Recording {self.path} ({len(self.episodes)} episodes)>"

    def __len__(self) -> int:
        return len(self.episodes)

    @overload
    def __getitem__(self, index: int) -> Episode: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Episode]: ...
    def __getitem__(self, index: int | slice) -> Episode | Sequence[Episode]:
        return self.episodes[index]

    def select(self, numbers: Sequence[int] = (), *, min_steps: int, use: str) -> list[Episode]:
        """The episodes ``numbers`` (default: all) with at least ``min_steps`` steps, all of
        one env and screen; :class:`FormatError` names what is missing or mixed and says
        what to do (``use``: what they are for, e.g. "replay", "export").

        Args:
            numbers: the episodes wanted (default: all).
            min_steps: the fewest steps an episode may have.
            use: what they are for, to say in errors.

        Returns:
            The episodes.

        Raises:
            FormatError: none has enough steps, or they mix envs or screens.
        """
        chosen = [self.episode(n) for n in numbers] if numbers else list(self.episodes)
        chosen = [e for e in chosen if len(e.steps) >= min_steps]
        if not chosen:
            raise FormatError(f"{self.path} has no episode with enough recorded steps to {use}")
        first = chosen[0]
        other = [e.number for e in chosen if e.env_id != first.env_id or e.shape != first.shape]
        if other:
            raise FormatError(
                f"episodes {other} of {self.path} are of another env or screen than episode "
                f"{first.number} ({first.env_id}); {use} one kind at a time with --episode K"
            )
        return chosen

    def episode(self, number: int) -> Episode:
        """The episode of that number (its directory's, ``episode-000003`` is 3).

        Args:
            number: the episode's number.

        Returns:
            The episode.

        Raises:
            FormatError: no episode has that number (the message lists those there are).
        """
        for episode in self.episodes:
            if episode.number == number:
                return episode
        have = ", ".join(str(e.number) for e in self.episodes) or "none"
        raise FormatError(f"{self.path} has no episode {number}; it has: {have}")


def open_recording(path: str | os.PathLike[str]) -> Recording:
    """The recording in ``path`` (what ``serve --record DIR`` wrote).

    Args:
        path: the recording's directory.

    Returns:
        The :class:`Recording`.

    Raises:
        FormatError: ``path`` is not a recording.
    """
    return Recording(path)
