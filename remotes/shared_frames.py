"""The agent's side of lockstep frames in shared memory (see :mod:`rewarder.shm`).

Holds :class:`SharedFrames`: whether a session asks its remote for ``obs="shm"`` (only a
remote on this machine, dialled at a loopback address), the reader of the segment the
replies name (opened once, kept open), and which frame the last step read from it.

A step's frame is read with :meth:`SharedFrames.take` straight into the caller's array
(one copy, nothing mapped). When a segment cannot be used (another machine, another
user, a remote in a container with its own /dev/shm, a FIFO or symbolic link in its
place, a truncated file, a frame that is not the step's) ``take`` returns False, the
reason waits in :attr:`SharedFrames.error` for the stepper to report once
(:meth:`SharedFrames.pop_error`, ``info["shm.error"]``), and frames come over VNC until
the connection is closed (:meth:`SharedFrames.forget`): the next connection, which may be
to another process, tries shared memory again.
"""

from __future__ import annotations

import logging

import numpy as np

from rewarder import shm
from rewarder.protocol import OBS_SHM, OBS_VNC, ResetReply, StepReply

log = logging.getLogger(__name__)


class SharedFrames:
    """One session's shared-memory frames; ``enabled``: try them at all (the remote is on
    this machine). A lockstep session's steps, resets and connections all run in the
    thread that steps (remotes.lockstep), so that thread alone reads and writes this; a
    real-time session's resets and reconnects run on the loop thread, which then does.

    Attributes: :attr:`enabled` (steps ask for ``obs="shm"`` now; False when this machine
    has no writable /dev/shm, and after an error until :meth:`forget`), :attr:`error` (why
    shared memory went off, until popped), :attr:`last` ((frame number, episode id) of the
    frame the last step read).
    """

    def __init__(self, name: str, enabled: bool) -> None:
        self.name = name
        #: The caller asked for shared memory (the remote is on this machine).
        self.requested = enabled
        self.enabled = enabled and shm.available()
        #: Why shared memory went off (a sentence for ``info["shm.error"]``), until
        #: :meth:`pop_error` takes it.
        self.error: str | None = None
        #: (frame number, episode id) of the frame the last step read from shared memory;
        #: None after a reset, a reconnect, or a step whose frame came over VNC.
        self.last: tuple[int, int] | None = None
        self._reader: shm.FrameReader | None = None
        #: Frames read from shared memory, and lockstep frames (a step's or an episode's
        #: first) that had to come over VNC instead, since this session was made.
        self.shm_frames = 0
        self.vnc_frames = 0

    @property
    def obs(self) -> str:
        """What a step asks for."""
        return OBS_SHM if self.enabled else OBS_VNC

    def take(self, reply: StepReply | ResetReply, dest: np.ndarray) -> bool:
        """Read the frame of the step (or reset) ``reply`` answers from shared memory straight into
        ``dest`` (a C-contiguous ``uint8[height, width, 3]``, e.g. a row of a batch array)
        and return True; False when the reply names no segment (the step asked for VNC,
        or the remote ignored ``obs``), or when the segment is unusable: then
        :attr:`error` says why, shared memory is off until :meth:`forget`, and the frame
        comes over VNC. ``dest`` may be partly written when it returns False."""
        self.last = None
        if not self.enabled or reply.shm is None or reply.frame is None:
            return False
        try:
            reader = self._reader
            if reader is None or (reader.name, reader.height, reader.width) != reply.shm:
                self._close_reader()
                self._reader = reader = shm.FrameReader(*reply.shm)
            number, episode = reader.read_into(dest)
            if (number, episode) != (reply.frame, reply.episode_id):
                raise ValueError(
                    f"frame segment {reader.name} holds frame {number} of episode {episode}, "
                    f"the reply names frame {reply.frame} of episode {reply.episode_id}; "
                    f"{shm.VNC_INSTEAD}"
                )
        except (OSError, ValueError) as exc:
            self._off(exc)
            return False
        self.last = (number, episode)
        self.shm_frames += 1
        return True

    def pop_error(self) -> str | None:
        """Why shared memory went off, once (None: nothing new to report)."""
        error, self.error = self.error, None
        return error

    def new_episode(self) -> None:
        """A reset: no frame of the new episode was read yet."""
        self.last = None

    def forget(self) -> None:
        """The connection closed (a reconnect, or the end): close the segment (the next
        connection's remote may be another process), and turn shared memory back on if
        it was asked for and this machine has it, whatever went wrong before. An error
        not yet popped stays to be reported. If the segment's remote is gone (killed: no
        process holds the segment's lock) the segment is removed, so a remote that died
        leaves nothing in /dev/shm behind the agent that used it."""
        self.last = None
        if self._reader is not None and self._reader.remove_if_abandoned():
            log.info("%s: removed %s, the frame segment of a remote that is gone",
                     self.name, self._reader.path)
        self._close_reader()
        self.enabled = self.requested and shm.available()

    def _off(self, exc: OSError | ValueError) -> None:
        """Shared memory off until :meth:`forget`, saying why (in the log and :attr:`error`).
        A segment that is not there at all is the expected case of a remote with its own
        /dev/shm (a container on 127.0.0.1, a forwarded port): said plainly, at INFO."""
        if isinstance(exc, FileNotFoundError):
            self.error = ("the remote's frame segment is not on this machine (a remote in "
                          f"a container, or behind a forwarded port, has its own {shm.SHM_DIR}): "
                          "frames come over VNC, as from another machine")
            log.info("%s: %s", self.name, self.error)
        else:
            self.error = f"{exc} (until the next reconnect)"
            log.warning("%s: shared-memory frames unusable: %s", self.name, self.error)
        self.enabled = False
        self._close_reader()

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
