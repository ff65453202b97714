"""A real remote whose lockstep shared-memory frames are hostile, for agent-side tests.

``python -m tests.remotes.hostile_remote serve ENV_ID ...`` takes the arguments of
``universe-remote serve`` and runs it with :class:`rewarder.shm.FrameSegment` replaced by
:class:`HostileSegment` (this module only: the product code has no such switch). The
environment variable :data:`KIND_VAR` says what the file a step reply names is:

``fifo``
    a FIFO of that name (a plain ``open()`` of it blocks forever);
``symlink``
    a symbolic link to a real, correctly written segment;
``symlink-fifo``
    a symbolic link to a FIFO;
``directory``
    a directory;
``truncated``
    a real segment, truncated to a third of its pixels after each frame is written once
    :data:`AFTER_VAR` frames (default 1) were written whole: the agent opens it while it
    is whole and finds it truncated on a later step (a mapping of it would SIGBUS);
``bad-dims``
    a real segment whose header names ``height + 1`` x ``width``;
``other-user``
    a real segment owned by uid 65534 (the remote must run as root to give it away).

Every hostile file is named like a real segment (``shm.PREFIX`` + this process's pid), so
the remote's close and the next remote's sweep remove them.

From a test: ``with start_hostile("fifo") as remote: ...`` (a
:class:`remotes.local.LocalRemotes` of one remote on 127.0.0.1, stopped on exit).
``tests/remotes/test_hostile_remote.py`` checks that each kind starts and that its
replies name the hostile file, and steps a ``RemoteEnv`` against each: the error in
``info``, the true frame over VNC, the agent alive.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from rewarder import shm

if TYPE_CHECKING:  # the remote's process never imports the agent side
    from remotes.local import LocalRemotes

#: What the segment is (one of :data:`KINDS`).
KIND_VAR: Final = "UNIVERSE_REMOTE_HOSTILE_SHM"
#: ``truncated``: frames written whole before the truncating starts.
AFTER_VAR: Final = "UNIVERSE_REMOTE_HOSTILE_SHM_AFTER"
KINDS: Final = ("fifo", "symlink", "symlink-fifo", "directory", "truncated", "bad-dims", "other-user")
#: Who owns an ``other-user`` segment.
OTHER_UID: Final = 65534

_REPO: Final = Path(__file__).resolve().parents[2]


class HostileSegment(shm.FrameSegment):
    """Stands in for :class:`rewarder.shm.FrameSegment` in the remote (same attributes and
    methods: ``name``, ``path``, ``height``, ``width``, ``reply``, ``write``, ``close``);
    maps nothing, so truncating its file cannot hurt the remote."""

    def __init__(self, height: int, width: int) -> None:  # no super().__init__: no mapping
        kind = os.environ.get(KIND_VAR, "")
        if kind not in KINDS:
            raise ValueError(f"{KIND_VAR} must be one of {', '.join(KINDS)}, not {kind!r}")
        self.kind = kind
        self.height, self.width = height, width
        self.name = f"{shm.PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        self.path = shm.SHM_DIR / self.name
        self.written = 0
        self._after = int(os.environ.get(AFTER_VAR, "1"))
        self._size = shm.PIXELS_AT + height * width * 3
        #: What close() removes; the file frames are written into, if any.
        self._made: list[Path] = []
        self._file: Path | None = None
        if kind == "fifo":
            self._make_fifo(self.path)
        elif kind == "directory":
            self.path.mkdir(0o700)
            self._made.append(self.path)
        elif kind in ("symlink", "symlink-fifo"):
            target = shm.SHM_DIR / f"{self.name}-target"
            if kind == "symlink":
                self._make_file(target)
            else:
                self._make_fifo(target)
            self.path.symlink_to(target)
            self._made.append(self.path)
        else:
            self._make_file(self.path)
            if kind == "other-user":
                os.chown(self.path, OTHER_UID, -1)

    @property
    def pixels(self) -> np.ndarray | None:  # type: ignore[override]
        """None: nothing is mapped, so no runtime draws here; every frame comes through
        :meth:`write`, which does the kind's harm."""
        return None

    def write(self, frame: np.ndarray, number: int, episode_id: int) -> None:
        """Write the frame as a real segment would (into the file, if there is one), then
        do the kind's harm."""
        self.written += 1
        if self._file is None:
            return
        height = self.height + 1 if self.kind == "bad-dims" else self.height
        header = bytearray(shm.PIXELS_AT)
        shm.HEADER.pack_into(header, 0, shm.MAGIC, number, episode_id, height, self.width)
        fd = os.open(self._file, os.O_WRONLY)
        try:
            os.pwritev(fd, [header, np.ascontiguousarray(frame, np.uint8).data.cast("B")], 0)
            if self.kind == "truncated" and self.written > self._after:
                os.ftruncate(fd, shm.PIXELS_AT + self.height * self.width)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Remove every file it made (idempotent)."""
        while self._made:
            path = self._made.pop()
            try:
                if path.is_dir() and not path.is_symlink():
                    path.rmdir()
                else:
                    path.unlink()
            except FileNotFoundError:
                pass

    def _make_file(self, path: Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, self._size)
        finally:
            os.close(fd)
        self._made.append(path)
        self._file = path

    def _make_fifo(self, path: Path) -> None:
        os.mkfifo(path, 0o600)
        self._made.append(path)


def start_hostile(kind: str, env_id: str = "builtin.Catch-v0", *, after: int = 1,
                  start_timeout: float = 30.0, extra_args: tuple[str, ...] = ()) -> LocalRemotes:
    """One hostile remote serving ``env_id`` on 127.0.0.1 (free ports), as
    :func:`remotes.local.start_local` starts real ones: a ``LocalRemotes`` to use in a
    ``with``. ``after``: for ``truncated``, the frames written whole first."""
    import tempfile
    from functools import partial

    from remotes.local import LocalRemotes, _await_ready, _spawn, spawner
    from remotes.loop import shared_loop

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if kind == "other-user" and os.geteuid() != 0:
        raise PermissionError("an other-user segment needs a remote running as root")
    command = [sys.executable, "-m", "tests.remotes.hostile_remote", "serve", env_id,
               "--host", "127.0.0.1", *extra_args]
    path = os.pathsep.join(p for p in (str(_REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": path,
           KIND_VAR: kind, AFTER_VAR: str(after)}
    log = Path(tempfile.mkdtemp(prefix="universe-remote-hostile-")) / "remote-0.log"
    ports = ["--vnc-port", "0", "--rewarder-port", "0"]
    proc = spawner().submit(partial(_spawn, [*command, *ports], env, log)).result()
    remotes = LocalRemotes([proc], [], None, [log], command, env)
    try:
        addresses = shared_loop().run(_await_ready(proc, log, None, start_timeout), start_timeout + 10)
    except BaseException:
        remotes.close()
        raise
    remotes.addresses = addresses
    return remotes


def main() -> int:
    """``serve`` (or any command) with the hostile segment in place."""
    kind = os.environ.get(KIND_VAR, "")
    if kind not in KINDS:
        print(f"{KIND_VAR} must be one of {', '.join(KINDS)}, not {kind!r}", file=sys.stderr)
        return 2
    shm.FrameSegment = HostileSegment  # type: ignore[misc]
    from universe_remote.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
