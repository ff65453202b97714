"""``render_mode="human"``: a window on each remote's screen, as ale-py's users expect one.

A remote serves its screen live to any number of viewers, so "human" draws nothing per
step. The first ``render()`` of an env (``gymnasium.make`` calls it once for
``render_mode="human"``) opens a view of each of its remotes with :func:`show`; later
calls do nothing:

- a window of our own (:mod:`remotes.zoom_window`: Tk, the screen zoomed to an integer
  size near 640 px, so a 160x210 game opens 3x), view only and shared with the agent,
  when ``$DISPLAY`` names an X display and this Python has Tk; else a TigerVNC
  ``vncviewer`` window (:data:`VIEWER`, 1x: it cannot zoom; its "Press F8" notice off),
  when one is installed (a remote served over TLS gets the line below instead);
- otherwise one line on stdout (and in the log) saying where to watch: the remote's
  browser viewer, asked of its rewarder port (whose Universe URL ``/viewer/`` redirects
  to ``serve --http-port``'s viewer; ``gymnasium.make`` starts its local remotes with
  one), or, for a remote without one, the ``vncviewer`` command line.

The windows are stopped when the env closes (:class:`Views` stands in the env's
``owned``, ahead of what was there), at exit, and by themselves when their remote stops
(``-AlertOnFatalError=0``: no dialog is left behind).
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import logging
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from Cryptodome.Cipher import DES

from rewarder.auth import PASSWORD_ENV

from .address import RemoteAddress
from .loop import LoopThread
from .session import RemoteSession
from .zoom_window import can_zoom

log = logging.getLogger(__name__)

#: TigerVNC's viewer (Debian's tigervnc-viewer).
VIEWER: Final = "vncviewer"
#: Its options: no input reaches the game, the agent keeps its connection, a remote that
#: stops ends the window instead of leaving a dialog asking to reconnect, and no menu key
#: (its "Press F8 to open the context menu" notice covered a third of a game for 5 s).
VIEWER_OPTIONS: Final = ("-ViewOnly", "-Shared", "-AlertOnFatalError=0", "-ReconnectOnError=0",
                         "-MenuKey=")
#: The key VNC password files are DES-encrypted with (TigerVNC's ``vncpasswd -f``), with
#: each byte's bits already reversed as VNC's DES wants.
PASSWORD_FILE_KEY: Final = bytes(int(f"{b:08b}"[::-1], 2) for b in (23, 82, 107, 6, 35, 78, 88, 7))
#: Universe's viewer URL on the rewarder port.
VIEWER_PATH: Final = "/viewer/"
#: Seconds asking the rewarder port where the browser viewer is may take.
PROBE_TIMEOUT: Final = 3.0
#: Seconds a viewer gets to stop after SIGTERM before it is killed.
STOP_TIMEOUT: Final = 5.0


@dataclass(frozen=True)
class Target:
    """Where one remote is, as its session knows it (read on the loop thread)."""

    address: RemoteAddress
    password: str | None
    tls: ssl.SSLContext | None


async def _targets(sessions: Sequence[RemoteSession]) -> list[Target]:
    return [Target(s.address, s.password, s.tls) for s in sessions]


def password_file(password: str) -> bytes:
    """``password`` as a VNC password file holds it (``vncviewer -PasswordFile``): its
    first 8 bytes, zero-padded, DES-encrypted with :data:`PASSWORD_FILE_KEY`."""
    raw = password.encode("utf-8")[:8].ljust(8, b"\0")
    return DES.new(PASSWORD_FILE_KEY, DES.MODE_ECB).encrypt(raw)


def can_open_window() -> bool:
    """Whether a viewer window can open here: ``$DISPLAY`` set, and Tk (the zooming
    window) or ``vncviewer`` there to draw it."""
    return bool(os.environ.get("DISPLAY")) and (can_zoom() or shutil.which(VIEWER) is not None)


def zoom_command(address: RemoteAddress) -> list[str]:
    """The command line of the zooming window on ``address`` (its password goes in the
    environment, never on the command line)."""
    return [sys.executable, "-m", "remotes.zoom_window", f"{address.host}::{address.vnc_port}",
            "--title", str(address)]


def viewer_command(address: RemoteAddress, password_path: str | None = None) -> list[str]:
    """The ``vncviewer`` command line that watches ``address`` (view only, shared)."""
    command = [VIEWER, *VIEWER_OPTIONS]
    if password_path is not None:
        command += ["-PasswordFile", password_path]
    return [*command, f"{address.host}::{address.vnc_port}"]


def browser_viewer(target: Target, timeout: float = PROBE_TIMEOUT) -> str | None:
    """The URL of the remote's browser viewer, asked of its rewarder port (a redirect
    there when it serves one); None when it serves none or does not answer."""
    address = target.address
    if address.rewarder_port is None:
        return None
    connection: http.client.HTTPConnection
    if target.tls is not None:
        connection = http.client.HTTPSConnection(
            address.host, address.rewarder_port, timeout=timeout, context=target.tls
        )
    else:
        connection = http.client.HTTPConnection(address.host, address.rewarder_port, timeout=timeout)
    try:
        connection.request("GET", VIEWER_PATH)
        response = connection.getresponse()
        location = response.getheader("Location")
        return location if response.status in (301, 302, 307, 308) and location else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def where_to_watch(target: Target) -> str:
    """One line saying how a person can watch the remote without a window from us."""
    address = target.address
    url = browser_viewer(target)
    if url is not None:
        asks = " (it asks for the remote's password)" if target.password else ""
        return f"universe-remote: watch {address} in a browser: {url}{asks}"
    if address.vnc_port is None:
        return f"universe-remote: {address} serves no screen to watch (no VNC port)"
    if address.tls:
        command = (f"{VIEWER} -ViewOnly -Shared -SecurityTypes X509Vnc,X509None -X509CA CA.pem "
                   f"{address.host}::{address.vnc_port}")
    else:
        command = " ".join(viewer_command(address))
    return (
        f"universe-remote: watch {address} with a VNC viewer: {command} (it serves no browser "
        "viewer: `universe-remote serve --http-port` starts one)"
    )


class Views:
    """What :func:`show` opened for an env: viewer windows, closed with the env.

    It stands in the env's ``owned`` and closes what was there (``then``: local remotes)
    after its windows, so a window never outlives its remote with an error."""

    def __init__(self, then: Any = None) -> None:
        self.then = then
        #: The viewer processes (one per remote shown in a window).
        self.processes: list[subprocess.Popen[bytes]] = []
        #: The lines printed for remotes shown no window.
        self.printed: list[str] = []
        self._files: list[Path] = []
        atexit.register(self._stop)

    def open(self, target: Target) -> None:
        """A window on ``target`` if one can open, else the line saying where to watch."""
        address = target.address
        if can_open_window() and address.vnc_port is not None and not address.tls and can_zoom():
            env = {**os.environ, PASSWORD_ENV: target.password or ""}
            self.processes.append(subprocess.Popen(
                zoom_command(address), env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))
            log.info("watching %s in a zoomed window (pid %d)", address, self.processes[-1].pid)
            return
        if can_open_window() and address.vnc_port is not None and not address.tls:
            path = None
            if target.password:
                handle, name = tempfile.mkstemp(prefix="universe-remote-viewer-")
                with os.fdopen(handle, "wb") as file:  # 0600, as mkstemp makes it
                    file.write(password_file(target.password))
                self._files.append(Path(name))
                path = name
            self.processes.append(subprocess.Popen(
                viewer_command(address, path),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))
            log.info("watching %s in %s (pid %d)", address, VIEWER, self.processes[-1].pid)
            return
        line = where_to_watch(target)
        self.printed.append(line)
        log.info("%s", line)
        print(line, flush=True)

    def _stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for path in self._files:
            with contextlib.suppress(OSError):
                path.unlink()
        self._files.clear()

    def close(self) -> None:
        """Stop the windows, then close what the env owned before."""
        atexit.unregister(self._stop)
        self._stop()
        then, self.then = self.then, None
        if then is not None:
            then.close()


def show(loop: LoopThread, sessions: Sequence[RemoteSession], owned: Any) -> Any:
    """Open a view of each remote (once: ``owned`` already a :class:`Views` is kept) and
    return what the env owns now."""
    if isinstance(owned, Views):
        return owned
    targets = loop.run(_targets(sessions))
    views = Views(owned)
    try:
        for target in targets:
            views.open(target)
    except BaseException:
        views.then = None  # what the env owned stays the env's
        views.close()
        raise
    return views
