"""Lockstep frames over VNC, when shared memory cannot be used (another machine, a
container's own /dev/shm): waited for on the loop thread, where VNC lives.

Holds :func:`frames_over_vnc` (a step's frames, each by the frame number its reply
names) and :func:`vnc_frame` (a copy of what a VNC client shows once a wait is done),
which :mod:`remotes.lockstep` uses for steps and for a new episode's first frame.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from rewarder.protocol import StepReply

if TYPE_CHECKING:
    from .lane import Lane
    from .slot import Slot

#: Seconds past the slots' own deadlines the hand-over of VNC frames to the loop thread
#: may take before the call gives up (the slots' deadlines decide first).
LOOP_SLACK: Final = 5.0
#: Seconds a lockstep step waits at least for a frame over VNC (its reply came in time,
#: its frame follows at once unless the remote is in trouble).
MIN_FRAME_WAIT: Final = 1.0


def frames_over_vnc(lane: Lane, pairs: list[tuple[Slot, StepReply]], written: set[int]) -> dict[Slot, str]:
    """Lockstep without shared memory: each slot's frame as its VNC shows it (waited
    for on the loop thread, where VNC lives, until the slot's own deadline) into the
    batch. Returns the slots whose frame did not come, with why. A session without
    VNC (a parallel env's other players) is left alone: its frame is player 0's."""
    frames = lane.frames
    assert frames is not None
    failed: dict[Slot, str] = {}
    waits = []
    for slot, reply in pairs:
        vnc = slot.session.vnc
        if vnc is None:
            slot.vnc_frame = None
            continue
        timeout = max(slot.deadline - time.monotonic(), MIN_FRAME_WAIT)
        waits.append((slot, reply, vnc_frame(vnc, vnc.wait_frame(reply.frame, timeout))))
    if not waits:
        return failed
    limit = max(s.deadline for s, _, _ in waits) - time.monotonic()
    results = lane.loop.run(_all_settled([w for _, _, w in waits]), max(limit, 0.0) + LOOP_SLACK)
    for (slot, reply, _), result in zip(waits, results, strict=True):
        if isinstance(result, TimeoutError):
            failed[slot] = (f"stalled: frame {reply.frame} did not come over VNC within "
                            f"stall_timeout={lane.stall_timeout:g} s; reconnecting")
        elif isinstance(result, BaseException):
            failed[slot] = f"VNC connection lost while waiting for frame {reply.frame}: {result}"
        else:
            pixels, _ = result
            if pixels.shape == frames.shape[1:]:
                np.copyto(frames[slot.index], pixels)
            slot.vnc_frame = None
            slot.session.shared.vnc_frames += 1
            written.add(slot.index)
    return failed


async def vnc_frame(vnc: Any, shown: Any) -> tuple[np.ndarray, Any]:
    """On the loop thread: once ``shown`` (a wait for a frame) is done, a copy of what
    the VNC client shows and its tag (the stepping thread copies it into the batch)."""
    vnc.resume_updates()
    await shown
    return vnc.framebuffer.copy(), vnc.tag


async def _all_settled(waits: list[Any]) -> list[Any]:
    return await asyncio.gather(*waits, return_exceptions=True)
