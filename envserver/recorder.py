"""Recording a remote's episodes as they happen (``serve --record DIR``).

Holds :class:`Recorder`: attached to a :class:`~envserver.remote.Remote`, it hears each
episode's start (``Remote.episode_sinks``) and every advance (``Remote.result_sinks``),
takes the input events of that advance with who sent them (``Inputs.taken_sources``),
and hands each step with a copy of the frame to a
:class:`~recordings.writer.RecordingWriter`, whose thread compresses and writes: the
game loop pays for a frame copy and a dict, never for a disk. The ``recording``
property (1/0) switches it on and off while the remote runs, and reads what is true:
when the writer fails (a full disk) recording is off, ``recording`` reads 0 and
``recording_error`` says why, until ``recording`` is written 1 again and the disk takes
the new episode's first files (else the write is refused, saying why). The format is
``docs/recording.md``; :mod:`recordings` reads it.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Final

from recordings.format import CLOSED, DONE, RESET, STOPPED, event_json, event_players
from recordings.writer import RecordingWriter
from runtimes.base import StepResult

from .inputs import source_name
from .properties import Property
from .version import server_version

if TYPE_CHECKING:
    from pathlib import Path

    from .remote import Remote

log = logging.getLogger(__name__)

#: The property that switches recording on (1) and off (0).
RECORDING_PROPERTY: Final = "recording"
#: The read-only property that says why recording stopped by itself ("" when it did not).
RECORDING_ERROR_PROPERTY: Final = "recording_error"
#: Seconds writing ``recording`` 1 waits for the writer to make the episode's first files
#: (a full disk refuses the write); longer, and the write is answered without waiting.
BEGIN_TIMEOUT: Final = 3.0


class Recorder:
    """Records every episode of one remote under ``root`` while :attr:`enabled`."""

    def __init__(self, root: str | os.PathLike[str], *, enabled: bool = True,
                 writer: RecordingWriter | None = None) -> None:
        self.writer = writer or RecordingWriter(root)
        self.enabled = enabled
        #: Why recording stopped by itself (the writer failed), until it is switched on
        #: again; None when it did not.
        self.failure: str | None = None
        self.remote: Remote | None = None
        #: Steps recorded in the open episode (None: no episode is open).
        self._step: int | None = None
        self._seed: int | None = None
        self._text: str | None = None
        self._takes_seen = 0
        #: The branch a restore begins (while its episode begins), else None.
        self._branch: dict[str, Any] | None = None
        #: Browser viewers' VNC client ids, remembered while they were connected.
        self._viewers: set[int] = set()

    @property
    def root(self) -> Path:
        return self.writer.root

    def attach(self, remote: Remote) -> None:
        """Hear ``remote``'s episodes and frames; add the ``recording`` property. Call
        before ``remote.start()`` (the first episode starts there)."""
        self.remote = remote
        remote.episode_sinks.append(self._episode_began)
        remote.result_sinks.append(self._advanced)
        remote.restore_sinks.append(self._restored)
        remote.inputs.name_source = self._name_source
        remote.property_table.add(Property(
            RECORDING_PROPERTY, int,
            f"1: record each episode to {self.root} (starting now), 0: stop; reads 0 after "
            f"the disk failed ({RECORDING_ERROR_PROPERTY} says why)", self._read, self._write,
        ), Property(
            RECORDING_ERROR_PROPERTY, str,
            "why recording stopped by itself (a full disk), until it is switched on again; "
            "empty when it did not", lambda: self._check() or "",
        ))

    def close(self) -> None:
        """End the open episode (status ``closed``) and write everything queued."""
        self._end(CLOSED)
        self.writer.close()

    # The property ------------------------------------------------------------------------

    def _read(self) -> int:
        self._check()
        return int(self.enabled)

    async def _write(self, value: int) -> None:
        if value not in (0, 1):
            raise ValueError("1 records, 0 stops")
        self._check()
        if bool(value) == self.enabled:
            return
        if not value:
            self.enabled = False
            self._end(STOPPED)
            log.info("recording off")
            return
        if self.writer.error is not None:
            self.writer.resume()
        self.failure = None
        self.enabled = True
        if self.remote is not None and self.remote.state.value in ("running", "stepping", "done"):
            self._begin(from_reset=False)  # from the frame on screen now
            # Its first files written, or the disk's refusal: the reply tells the truth.
            await asyncio.to_thread(self.writer.drain, BEGIN_TIMEOUT)
            if self._check() is not None:
                raise ValueError(f"cannot record: {self.failure}")
        log.info("recording on")

    def _check(self) -> str | None:
        """Notice a failure of the writer: recording off, and why (:attr:`failure`)."""
        error = self.writer.error
        if error is not None and self.enabled:
            self.enabled = False
            self._step = None  # the writer dropped the episode
            where = self.writer.error_episode
            writing = f" (writing {where})" if where is not None else ""
            self.failure = f"{error}{writing}; write 1 to {RECORDING_PROPERTY} to try again"
            log.warning("recording is off: %s", self.failure)
        return self.failure

    # What the remote tells us ----------------------------------------------------------------

    def _name_source(self, source: object) -> str:
        """``viewer:N`` for a browser (an in-process VNC client), else as Inputs names it."""
        if isinstance(source, tuple) and source[0] == "vnc":
            client_id = int(source[1])
            vnc = self.remote.vnc if self.remote is not None else None
            connection = vnc.connections.get(client_id) if vnc is not None else None
            if connection is not None and connection.trusted:
                self._viewers.add(client_id)
            if client_id in self._viewers:
                return f"viewer:{client_id}"
        return source_name(source)

    def _episode_began(self, episode_id: int, seed: int, text: str | None) -> None:
        self._check()
        self._end(RESET)
        self._seed, self._text = seed, text
        if self.enabled:
            self._begin(from_reset=True)

    def _restored(self, episode_id: int, branch: dict[str, Any]) -> None:
        """A restore began a branch (docs/snapshots.md): a new recorded episode whose
        meta holds the branch and the exported state it starts from (base64), so the
        recording says where its first frame came from, and a replay can restore it."""
        self._check()
        self._end(RESET)
        self._seed, self._text = None, None
        state = branch.get("state")
        self._branch = {**branch, "state": base64.b64encode(state).decode() if state else None}
        if self.enabled:
            self._begin(from_reset=False)
        self._branch = None

    def _begin(self, from_reset: bool) -> None:
        remote = self.remote
        assert remote is not None
        runtime = remote.runtime
        self._takes_seen = remote.inputs.takes
        meta = {
            "env_id": runtime.env_id, "seed": self._seed if from_reset else None,
            "episode_seed": self._seed, "mode": remote.mode, "fps": remote.fps,
            "width": runtime.width, "height": runtime.height, "keys": list(runtime.keys),
            "buttons": runtime.buttons, "players": runtime.players,
            "remote_episode_id": remote.episode_id,
            "from_reset": from_reset, "first_frame": remote.frame,
            "episode_frame": remote.episode_frame, "started": time.time(),
            "software": {"universe-remote": server_version()}, "codec": "zstd-xor",
        }
        if self._branch is not None:  # a restore's branch: where it starts from
            meta["restored"] = self._branch
        step: dict[str, Any] = {"i": 0, "frame": remote.frame, "frames": 0, "t": meta["started"]}
        if from_reset and self._text is not None:
            step["text"] = self._text
        path = self.writer.begin(meta, step, runtime.framebuffer)
        self._step = 1
        log.info("recording episode %d of %s to %s", remote.episode_id, runtime.env_id, path)

    def _advanced(self, episode_id: int, result: StepResult) -> None:
        remote = self.remote
        if self._step is None or remote is None or result.frames == 0:
            return
        if self.writer.error is not None:
            self._check()
            return
        inputs = remote.inputs
        step: dict[str, Any] = {"i": self._step, "frame": remote.frame, "t": time.time()}
        if result.frames != 1:
            step["frames"] = result.frames
        if inputs.takes != self._takes_seen:  # this advance applied what the last take got
            self._takes_seen = inputs.takes
            if inputs.taken:
                step["events"] = [event_json(source, event) for source, event
                                  in zip(inputs.taken_sources, inputs.taken, strict=True)]
                players = event_players(inputs.taken)
                if players is not None:  # a multi-player runtime: whose each event was
                    step["players"] = players
        if result.reward:
            step["reward"] = result.reward
        if result.rewards is not None and any(result.rewards):
            step["rewards"] = list(result.rewards)  # every player's, ``reward`` is player 0's
        if result.done:
            step["done"] = True
        if result.info:
            step["info"] = result.info
        if result.text is not None:
            step["text"] = result.text
        if result.observation is not None:
            step["observation"] = result.observation
        self.writer.step(step, remote.runtime.framebuffer)
        self._step += 1
        if result.done:
            self._end(DONE)

    def _end(self, status: str) -> None:
        if self._step is None:
            return
        self.writer.end(status)
        self._step = None
