"""How a lockstep step's frame leaves the remote: a VNC update, or shared memory.

Holds :class:`LockstepFrames`. A step that asks for ``obs="vnc"`` (the default, and all a
client before the extension knows) gets its frame as the VNC update tagged with it, so
every step is diffed, encoded and sent. A step that asks for ``obs="shm"`` gets it in a
shared-memory segment (:class:`rewarder.shm.FrameSegment`) the reply names: one copy of
the screen, no encoding, a few bytes on the socket. VNC viewers (people, the browser
viewer, a recorder) still see those frames, at most :data:`MAX_VIEWER_UPDATES` a second:
a fast stepping agent never waits for them, and the last frame always reaches them.
While no VNC client has an update request outstanding (the agent's own client pauses its
updates), stepped frames are not served at all, neither copied nor diffed (a quarter of
a remote's CPU per Atari step, issue 40): the newest is served when a client asks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

import numpy as np

from rewarder import shm
from rewarder.shm_slots import SlotSegment

from .orders import OBS_SHM, Refused

#: VNC updates a second while an agent steps through shared memory (a 60 fps game's worth).
MAX_VIEWER_UPDATES: Final = 60.0


class LockstepFrames:
    """``serve(frame)`` is the remote's "serve over VNC now": ``frame`` None serves the
    runtime's own framebuffer (drawn this instant), an array serves that copy.

    Throttled frames are served from a copy taken when they are served: the runtime keeps
    drawing into its framebuffer between two VNC updates, and a viewer that connects then
    (or catches up late) must get the pixels of the frame its tag names, not newer ones.
    """

    def __init__(
        self, serve: Callable[[np.ndarray | None], None], wanted: Callable[[], bool] = lambda: True,
        screen: Callable[[], np.ndarray] | None = None,
    ) -> None:
        self._serve = serve
        #: The runtime's framebuffer, read when a frame is served, not when it is stepped:
        #: a batch step's runtime draws into its slot and brings the framebuffer up to
        #: date only when it is read (runtimes/base.py ``into``).
        self._screen = screen
        #: Whether any VNC client asks for frames now; when none does, a step's frame is
        #: owed (:attr:`_owed`) and served once one asks (:meth:`serve_owed`).
        self._wanted = wanted
        self._owed = False
        self._segment: shm.FrameSegment | None = None
        self._served_at = 0.0
        self._flush: asyncio.TimerHandle | None = None
        self._source: np.ndarray | None = None  # the runtime's framebuffer
        self._stepped = False  # (a frame was delivered: there is one to serve)
        self._copy: np.ndarray | None = None  # what VNC serves meanwhile

    def deliver(
        self, obs: str, frame: np.ndarray | None, number: int, episode_id: int,
        into: tuple[SlotSegment, int] | None = None,
    ) -> list[str | int] | None:
        """The step's ``frame`` on its way; the reply's ``shm`` value, if any. ``into``: a
        batch step's slot (envserver.batch), which its reply names (None here); ``frame``
        None: the runtime drew it into that slot itself, or (no ``into``) into this
        step's own segment (:meth:`target`)."""
        if into is not None:
            segment_of_batch, slot = into
            segment_of_batch.write(slot, frame, number, episode_id)
            self._source, self._stepped = frame, True
            if not self._owed:  # (_serve_soon's first look, here: most batch steps stop at it)
                self._serve_soon()
            return None
        segment = self._segment
        if frame is None:  # drawn into our segment itself (:meth:`target`): its header only
            assert segment is not None, "a frame is drawn into the segment only once it exists"
        elif obs != OBS_SHM:
            self._serve(None)
            return None
        elif segment is None or (segment.height, segment.width) != frame.shape[:2]:
            if segment is not None:
                segment.close()
            if not shm.available():
                raise Refused(
                    f"this remote's machine has no writable {shm.SHM_DIR}: step with obs "
                    "\"vnc\" (or leave obs out)"
                )
            self._segment = segment = shm.FrameSegment(frame.shape[0], frame.shape[1])
        segment.write(frame, number, episode_id)
        self._source, self._stepped = frame, True
        self._serve_soon()
        return segment.reply

    def target(self, obs: str, shape: tuple[int, ...]) -> np.ndarray | None:
        """Where a step asking for ``obs`` may have its runtime draw the frame itself
        (``Runtime.into``): the pixels of the segment an earlier step made, when the step
        asks for shared memory and the segment holds frames of ``shape``; None (the
        frame is copied in by :meth:`deliver`) otherwise. One copy of the screen less a
        step (``python -m benchmarks lockstep_peers``, the single-env rows)."""
        segment = self._segment
        if obs != OBS_SHM or segment is None or segment.shape != shape:
            return None
        return segment.pixels

    def _serve_soon(self) -> None:
        """Serve over VNC now if the last update is old enough, else once it is; nothing
        while a frame is owed: nobody asked since, and a client that asks is served the
        newest then (:meth:`serve_owed`, the VNC server's ``on_request``)."""
        if self._owed:
            return
        wait = self._served_at + 1.0 / MAX_VIEWER_UPDATES - time.monotonic()
        if wait <= 0:
            self._serve_now()
        elif self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(wait, self._serve_now)

    def serve_owed(self) -> None:
        """A VNC client asks for an update: serve the frame skipped while nobody asked."""
        if self._owed:
            self._serve_now()

    def _serve_now(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        self._owed = not self._wanted()
        if self._owed:  # nobody asks (a lockstep agent's own client is paused): later
            return
        self._served_at = time.monotonic()
        source, copy = self._source, self._copy
        if self._screen is not None and self._stepped:
            source = self._screen()
        if source is None:
            return
        if copy is None or copy.shape != source.shape:
            self._copy = copy = source.copy()
        else:
            np.copyto(copy, source)
        self._serve(copy)

    def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if self._segment is not None:
            self._segment.close()
            self._segment = None
