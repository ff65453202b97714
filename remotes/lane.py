"""What the stepping core's strategies share: :class:`Lane`, and :class:`Batch`.

:class:`~remotes.stepper.Stepper` composes a lane and the strategies that work on it —
:class:`~remotes.lockstep.LockstepSteps`, :class:`~remotes.realtime.RealtimeSteps`,
:class:`~remotes.faults.Faults`, :class:`~remotes.web.WebSteps` — each given the lane and
the collaborators it uses, never the stepper: dependencies run one way (stepper ->
strategies -> lane -> slots and sessions). A lane holds the slots, the settings, the loop
thread, the batch under construction and the step's flags, and the few helpers every
strategy needs (a step's outcome arrays, copying a VNC frame in, the batch's shape).
Whose thread writes it is the strategy's: real time the loop thread, lockstep the thread
that steps (remotes.loop).
"""

from __future__ import annotations

import platform
import sys
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from rewarder.protocol import LOCKSTEP

from .loop import LoopThread
from .options import EnvOptions
from .session import RemoteSession, RemoteSnapshot
from .slot import FrameGate, Slot, instruct

#: Steps per second when neither the caller nor the remote's describe says.
DEFAULT_FPS: Final = 60.0
#: Batches a lane keeps for :class:`Outputs` to write again once nobody holds them: the
#: last one (the caller's and the vector's), one before it that the caller dropped, and one
#: more for a wrapper that keeps the previous observation.
KEPT_OUTPUTS: Final = 3
#: References to a kept batch when only :class:`Outputs` holds it: its deque, the loop's
#: name and ``sys.getrefcount``'s argument.
_ONLY_OURS: Final = 3


@dataclass(frozen=True, slots=True)
class Batch:
    """What one reset or step hands the agent's thread: fresh objects, its own.

    ``infos`` has one dict per remote. With ``SAME_STEP`` autoreset, ``final`` holds, for
    each remote whose episode ended in this step, ``(final observation, final info)``.
    ``columns``: the vector's info (gymnasium's, a key at a time) when the step built it
    itself (the batched lane's steady state, remotes.lockstep_fast); its ``infos`` are
    then made only when read.
    """

    obs: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: Sequence[dict[str, Any]]
    final: dict[int, tuple[np.ndarray, dict[str, Any]]] = field(default_factory=dict)
    columns: dict[str, Any] | None = None


class Outputs:
    """The arrays a real-time step hands out, written again once nobody else holds them.

    A fresh ``frames.copy()`` each step costs a new allocation whose pages the kernel
    zeroes and maps on first touch (at 256 remotes, a 26 MB batch: the agent's profile
    gave 22 us a remote-step for it, 15 for the copy into a kept array;
    benchmarks/RESULTS.md). A batch the caller dropped (the usual ``obs, ... =
    env.step(...)`` drops the one before last) is written over instead. Held is anything
    that keeps a reference: the caller's name, a view of it (``obs[0]`` holds its base), a
    buffer export (``memoryview``, ``torch.from_numpy``), a weak reference; an array
    made read-only is left alone too. Only where reference counts mean that (CPython);
    elsewhere every step copies afresh.
    """

    def __init__(self, kept: int = KEPT_OUTPUTS) -> None:
        self._kept: deque[np.ndarray] = deque(maxlen=kept)
        self._counted = platform.python_implementation() == "CPython"

    def copy(self, frames: np.ndarray) -> np.ndarray:
        """A copy of ``frames`` in an array nobody else holds (a kept one when it can)."""
        if self._counted:
            for i in range(len(self._kept)):  # (no enumerate: its tuple holds one more)
                kept = self._kept[i]
                if (sys.getrefcount(kept) == _ONLY_OURS and kept.shape == frames.shape
                        and kept.dtype == frames.dtype and kept.flags.writeable
                        and not weakref.getweakrefcount(kept)):
                    del self._kept[i]  # (ends the loop: the deque changed)
                    np.copyto(kept, frames)
                    self._kept.append(kept)
                    return kept
        out = frames.copy()
        if self._counted:
            self._kept.append(out)
        return out


class Lane:
    """The slots of ``sessions`` stepped together as ``options`` say, on ``loop``."""

    def __init__(self, sessions: Sequence[RemoteSession], options: EnvOptions, loop: LoopThread) -> None:
        self.options = options
        self.sessions = list(sessions)
        self.mode, self.frameskip = options.mode, options.frameskip
        self.requested_fps = options.fps
        self.fps = float(options.fps or DEFAULT_FPS)
        self.env_id = options.env_id
        self.max_episode_steps = options.max_episode_steps
        self.start_timeout = options.start_timeout
        self.stall_frames = options.stall_frames
        self.stall_timeout = options.stall_timeout
        self.slots = [Slot(i, s) for i, s in enumerate(self.sessions)]
        #: Real time: waits for each remote's target frame (lockstep reads its own frames).
        self.gate = FrameGate(self.slots, hooks=self.mode != LOCKSTEP)
        #: The arrays real-time batches are handed out in (written again once dropped).
        self.outputs = Outputs()
        #: The loop thread the sockets of real-time steps, VNC clients and probes live on.
        self.loop = loop
        #: SAME_STEP autoreset in the step under way (a slot back from away then ends
        #: its idle stretch and starts its episode in the same step).
        self.same_step = False
        self.closed = False
        #: Adds each info's page and last action (remotes.web), if the env has them.
        self.annotate: Callable[[Sequence[dict[str, Any]]], None] | None = None

    @property
    def num(self) -> int:
        return len(self.slots)

    @property
    def frames(self) -> np.ndarray | None:
        """The batch under construction (``[n, H, W, 3]``; the gate copies target frames
        into it as they come)."""
        return self.gate.frames

    @frames.setter
    def frames(self, frames: np.ndarray | None) -> None:
        self.gate.frames = frames

    def outcome(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """A step's rewards, terminated, truncated and infos, to fill in."""
        n = self.num
        return np.zeros(n, np.float64), np.zeros(n, bool), np.zeros(n, bool), [{} for _ in range(n)]

    def configure(self, sizes_now: Mapping[RemoteSession, tuple[int, int]] | None = None) -> None:
        """The fps and the batch's shape, from the remotes' describes (after a connect or
        a reset, which may switch the env). ``sizes_now``: (width, height) a session's
        reset reply named for its first frame, which a VNC client that has not yet heard
        of an env switch's new screen size cannot know yet."""
        describe = self.sessions[0].describe_body()
        self.fps = float(self.requested_fps or describe.get("fps") or DEFAULT_FPS)
        known = sizes_now or {}
        sizes = {known.get(s) or s.screen_size for s in self.sessions}
        if len(sizes) != 1:
            listed = ", ".join(f"{s.name}: {w}x{h}" for s in self.sessions
                               for w, h in [known.get(s) or s.screen_size])
            raise ValueError(f"remotes have different screen sizes ({listed}); use one env id")
        ((width, height),) = sizes
        if self.frames is None or self.frames.shape[1:3] != (height, width):
            self.frames = np.zeros((self.num, height, width, 3), np.uint8)

    def states(self) -> tuple[RemoteSnapshot, ...]:
        """Snapshots of every remote, for the agent's thread."""
        return tuple(s.state() for s in self.sessions)

    def instruct(self, infos: list[dict[str, Any]]) -> None:
        """Each info's instruction, and its page and last action (remotes.web)."""
        instruct(self.slots, infos)
        if self.annotate is not None:
            self.annotate(infos)

    def finish(
        self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
        infos: list[dict[str, Any]], final: dict[int, tuple[np.ndarray, dict[str, Any]]] | None = None,
        copy: bool = True,
    ) -> Batch:
        """The step's batch, each info instructed; ``copy`` False: :attr:`frames` is this
        step's own array, never written again (a lockstep step makes a new one each
        step), handed over as it is."""
        instruct(self.slots, infos)  # (self.instruct, flat: every step)
        if self.annotate is not None:
            self.annotate(infos)
        frames = self.gate.frames
        assert frames is not None
        return Batch(self.outputs.copy(frames) if copy else frames, rewards, terminated, truncated,
                     tuple(infos), final or {})

    def copy_frame(self, slot: Slot) -> None:
        """The slot's newest VNC frame into the batch (its tag noted as returned)."""
        frames = self.frames
        assert frames is not None
        session = slot.session
        vnc = session.vnc
        number: int | None = None
        if vnc is not None:
            pixels, tag = vnc.framebuffer, vnc.tag
            if tag is not None:
                number, episode = tag.frame, tag.episode_id
        else:
            if session.rewarder is not None:
                frames[slot.index] = 0
                slot.mirror = None
            return
        if pixels.shape == frames.shape[1:]:
            self.gate.mirror(slot, pixels, frames)
        if number is not None:
            slot.returned, slot.episode = number, episode
            if slot.seen is None or number > slot.seen:
                slot.seen = number
