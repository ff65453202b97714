"""The agent's side of lockstep frames in shared memory (see :mod:`rewarder.shm`).

Holds :class:`SharedFrames`: whether a session asks its remote for ``obs="shm"`` (only a
remote on this machine, dialled at a loopback address), the segments replies name,
mapped once each, and the frame the last step left there. When a segment cannot be
used (another machine, another user, a remote in a container with its own /dev/shm)
the session says so once in the log and goes back to frames over VNC for good.
"""

from __future__ import annotations

import logging

import numpy as np

from rewarder import shm
from rewarder.protocol import OBS_SHM, OBS_VNC, StepReply
from vncdriver.client import VNCClient

log = logging.getLogger(__name__)


class SharedFrames:
    """``enabled``: try shared memory at all (the remote is on this machine)."""

    def __init__(self, name: str, enabled: bool) -> None:
        self.name = name
        self.enabled = enabled and shm.available()
        #: The last step's frame: (pixels, frame number, episode id); None after a reset,
        #: a reconnect, or a step whose frame came over VNC.
        self.stepped: tuple[np.ndarray, int, int] | None = None
        self._view: shm.FrameView | None = None

    @property
    def obs(self) -> str:
        """What a step asks for."""
        return OBS_SHM if self.enabled else OBS_VNC

    def take(self, reply: StepReply) -> bool:
        """Note the frame ``reply`` left in shared memory; False: wait for it over VNC."""
        self.stepped = None
        if reply.shm is None:
            return False
        name, height, width = reply.shm
        try:
            view = self._view
            if view is None or (view.name, view.height, view.width) != reply.shm:
                self.forget()
                self._view = view = shm.FrameView(name, height, width)
            number, episode = view.header()
            if (number, episode) != (reply.frame, reply.episode_id):
                raise ValueError(
                    f"it holds frame {number} of episode {episode}, the reply names frame "
                    f"{reply.frame} of episode {reply.episode_id}"
                )
        except (OSError, ValueError) as exc:
            log.warning("%s: shared-memory frames unusable (%s); taking frames over VNC",
                        self.name, exc)
            self.enabled = False
            self.forget()
            return False
        self.stepped = (view.pixels, number, episode)
        return True

    async def receive(self, reply: StepReply, vnc: VNCClient, timeout: float | None = None) -> None:
        """The frame of the step ``reply`` answers: in shared memory (the VNC client asks
        for no updates meanwhile: nobody would look at them), else the VNC update tagged
        with it."""
        if self.take(reply):
            vnc.pause_updates()
        else:
            vnc.resume_updates()
            await vnc.wait_frame(reply.frame, timeout)

    def new_episode(self, vnc: VNCClient | None) -> None:
        """A reset: its first frame comes over VNC, so ask for updates again."""
        self.stepped = None
        if vnc is not None:
            vnc.resume_updates()

    def forget(self) -> None:
        """Unmap the segment (a reconnect: the remote may be another process now)."""
        self.stepped = None
        if self._view is not None:
            self._view.close()
            self._view = None
