"""A recording played back as a runtime (``universe-remote replay DIR``).

Holds :func:`replay_runtime`, which makes a :class:`ReplayRuntime` for a recording (the
class carries the recorded screen size, keys and fps, as every runtime class does). A
remote serves it like any game: VNC viewers, the browser viewer and agents watch it in
real time (one recorded step per tick, at the recorded fps) or step it in lockstep.
Input is accepted and ignored: the recording already holds what was played.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import numpy as np

from recordings import Episode, Recording, Step, open_recording

from .base import InputEvent, Runtime, StepResult, check_frames


class ReplayRuntime(Runtime):
    """Plays recorded episodes in turn (or one, again and again); reset's seed is ignored."""

    recording: ClassVar[Recording]
    episodes: ClassVar[tuple[Episode, ...]]

    def __init__(self) -> None:
        super().__init__()
        self._turn = 0
        self.episode: Episode | None = None
        self._steps: list[Step] = []
        self._frames: Iterator[np.ndarray] = iter(())
        self._at = 0

    def reset(self, seed: int | None = None) -> None:
        self.episode = self.episodes[self._turn % len(self.episodes)]
        self._turn += 1
        self._steps = self.episode.steps
        self._frames = self.episode.frames()
        self._at = 0
        self._show()

    def _show(self) -> Step | None:
        """Draw the next recorded frame; its step (None past the end)."""
        if self._at >= len(self._steps):
            return None
        frame = next(self._frames, None)
        if frame is None:  # a partial episode: steps flushed, frames not (cannot happen: one chunk)
            return None
        self.framebuffer[...] = frame
        step = self._steps[self._at]
        self._at += 1
        return step

    def step(self, events: Sequence[InputEvent]) -> StepResult:
        return self.advance(events, 1)

    def advance(self, events: Sequence[InputEvent], frames: int) -> StepResult:
        """Play recorded steps until ``frames`` recorded frames have passed (at least one
        step); the recording's end is ``done`` even if the game had not ended it."""
        check_frames(frames)
        total = StepResult(frames=0)
        while total.frames < frames:
            step = self._show()
            if step is None:  # the end: stay done until reset
                total.done = True
                break
            last = self._at >= len(self._steps)
            total.add(StepResult(
                reward=step.reward, done=step.done or last, info=dict(step.info),
                text=step.text, observation=step.observation, frames=max(step.frames, 1),
            ))
            if total.done:
                break
        return total

    def instruction(self) -> str | None:
        return self._steps[0].text if self._steps else None

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {**super().describe(), "replay": {
            "recording": str(cls.recording.path), "episodes": [e.number for e in cls.episodes],
        }}


def replay_runtime(path: str | os.PathLike[str], episode: int | None = None) -> type[ReplayRuntime]:
    """A runtime class that plays ``path``'s episodes (or only episode number ``episode``).

    The episodes must share one screen size; a recording of several envs is replayed an
    episode at a time (``episode``).
    """
    recording = open_recording(path)
    episodes = recording.select((episode,) if episode is not None else (), min_steps=1, use="replay")
    first = episodes[0]
    meta = first.meta
    return type("ReplayRuntime", (ReplayRuntime,), {
        "recording": recording, "episodes": tuple(episodes),
        "env_id": first.env_id, "width": int(meta["width"]), "height": int(meta["height"]),
        "fps": float(meta["fps"]), "keys": tuple(meta.get("keys", ())),
        "buttons": int(meta.get("buttons", 0)),
        "description": f"replay of {recording.path}",
    })
