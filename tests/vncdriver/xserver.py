"""Test helpers: real X servers (TigerVNC Xvnc, Xvfb), x11vnc, and X programs on them.

Holds :class:`XServers` (starts servers and programs, kills them all at ``close()``),
the pytest fixture ``xservers`` (import :func:`xservers_fixture` into a test module to
use it), :class:`XDisplay`, :class:`XEventLog` (``xev`` output parsed into events you
can wait for), and helpers: :func:`require`, :func:`free_port`, :func:`xwd_bytes`,
:func:`read_xwd`.

Servers are started by the remote's own code in :mod:`runtimes.xdisplay` (so these tests
exercise it too): Xvnc by :class:`~runtimes.xdisplay.XvncDisplay`; Xvfb and x11vnc, which
the remote never runs, through the steps it is made of (``start_x_server``,
``read_display_number``, ``wait_listening``, ``stop_group``), as is every program here
but :meth:`XServers.spawn`'s. Servers pick their own free display number
(``-displayfd``), so tests can run beside each other and beside other X servers. Each
VNC server gets a free TCP port (picked, then retried if another process took it first)
and is ready when that port accepts connections. Nothing here sleeps to synchronise:
readiness is a condition polled with a deadline, and X program output is read as it
comes. Those waits are coroutines; the synchronous methods here run them on a loop of
their own (:func:`_blocking`), so they work in sync fixtures and async tests alike.

Needs the Debian packages ``scripts/install-system-packages`` installs; where one is
missing, :func:`require` skips the test (CI installs everything and fails on a skip).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

import numpy as np
import pytest

from runtimes import xdisplay
from runtimes.xdisplay import PORT_ATTEMPTS, STOP_TIMEOUT, XvncDisplay, XvncFailed, log_tail

#: How long a server may take to come up (Xvnc needs < 0.3 s, x11vnc about 1 s; the
#: remote's own limit is shorter, tests get slack for a loaded machine).
START_TIMEOUT = 15.0
_T = TypeVar("_T")


def require(*commands: str) -> None:
    """Skip the test unless every command is installed."""
    missing = [c for c in commands if shutil.which(c) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed; run scripts/install-system-packages")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return xdisplay.free_port("127.0.0.1")


def _blocking(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to its end on an event loop of its own, in a thread of its own: the
    readiness waits of :mod:`runtimes.xdisplay` are coroutines, and a synchronous helper
    may be called while this thread's loop runs (from an async test)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@dataclass
class XDisplay:
    """A running X server: ``display`` (":N"), its size, and its VNC port if it has one."""

    display: str
    width: int
    height: int
    process: subprocess.Popen[bytes]
    log: Path
    vnc_port: int | None = None
    password: str | None = None

    @property
    def env(self) -> dict[str, str]:
        """The environment for X programs on this display."""
        return {**os.environ, "DISPLAY": self.display}

    @property
    def vnc_address(self) -> str:
        """``127.0.0.1::port``, for our client and for vncviewer."""
        if self.vnc_port is None:
            raise ValueError(f"{self.display} has no VNC server")
        return f"127.0.0.1::{self.vnc_port}"


@dataclass
class _Started:
    process: subprocess.Popen[bytes] | asyncio.subprocess.Process
    name: str
    files: list[object] = field(default_factory=list)


class XServers:
    """Starts X servers, VNC servers and X programs; ``close()`` kills them, newest first.

    Use the ``xservers`` fixture, or ``with XServers() as xs:``. Logs go to a
    temporary directory (``xs.directory``) and their tails are quoted in start errors.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="xservers-")
            directory = Path(self._tmp.name)
        self.directory = directory
        self._started: list[_Started] = []
        self._xvnc: list[XvncDisplay] = []
        self._count = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Servers ---------------------------------------------------------------------------

    async def xvnc(
        self,
        width: int = 320,
        height: int = 240,
        *,
        password: str | None = None,
        args: Sequence[str] = (),
    ) -> XDisplay:
        """TigerVNC ``Xvnc`` (depth 24) on a free display and port, started by the remote's
        own code (:class:`runtimes.xdisplay.XvncDisplay`); ready to connect.

        ``password`` sets VNC Authentication; otherwise the security type is None.
        ``args`` are more Xvnc options (``-FrameRate 120``, ...).
        """
        require("Xvnc", *(("vncpasswd",) if password is not None else ()))
        server = XvncDisplay(width, height, password=password, args=args,
                             start_timeout=START_TIMEOUT)
        await server.start()
        self._xvnc.append(server)
        assert server.display is not None and server.process is not None
        assert server.log is not None
        return XDisplay(server.display, width, height, server.process, server.log,
                        vnc_port=server.port, password=password)

    def xvfb(
        self, width: int = 320, height: int = 240, depth: int = 24, args: Sequence[str] = ()
    ) -> XDisplay:
        """``Xvfb`` on a free display (no VNC: add :meth:`x11vnc`, or run a viewer on it)."""
        require("Xvfb")
        argv = ["Xvfb", "-screen", "0", f"{width}x{height}x{depth}", "-nolisten", "tcp", *args]
        log = self._log("Xvfb")
        log_file = open(log, "wb")  # noqa: SIM115 (closed at close())
        try:
            process, read_fd = xdisplay.start_x_server(argv, log_file)
        except BaseException:
            log_file.close()
            raise
        self._started.append(_Started(process, "Xvfb", [log_file]))
        try:
            number = _blocking(xdisplay.read_display_number(
                read_fd, process, timeout=START_TIMEOUT, log=log, name="Xvfb"
            ))
        finally:
            os.close(read_fd)
        if number is None:
            raise XvncFailed(
                f"Xvfb exited with {process.returncode} before it was ready{log_tail(log)}"
            )
        return XDisplay(f":{number}", width, height, process, log)

    def x11vnc(
        self, display: XDisplay, *, password: str | None = None, args: Sequence[str] = ()
    ) -> int:
        """x11vnc serving ``display``; returns its port (also set as ``display.vnc_port``)."""
        require("x11vnc")
        auth = ["-passwd", password] if password is not None else ["-nopw"]
        last: Exception | None = None
        for _ in range(PORT_ATTEMPTS):
            port = free_port()
            log = self._log("x11vnc")
            argv = [
                "x11vnc",
                "-display",
                display.display,
                "-rfbport",
                str(port),
                "-localhost",
                "-forever",
                "-shared",
                "-noxdamage",
                *auth,
                *args,
            ]
            process = self._popen(argv, "x11vnc", log=log, env=display.env)
            try:
                _blocking(xdisplay.wait_listening(
                    "127.0.0.1", port, process, timeout=START_TIMEOUT, log=log, name="x11vnc"
                ))
            except XvncFailed as exc:
                if process.poll() is None:
                    raise  # it runs but does not listen: not a port someone took
                last = exc
                continue
            display.vnc_port, display.password = port, password
            return port
        raise RuntimeError(f"x11vnc did not start in {PORT_ATTEMPTS} attempts: {last}")

    # Programs ----------------------------------------------------------------------------

    def run(
        self, display: XDisplay, *argv: str, stdout: int | None = subprocess.DEVNULL
    ) -> subprocess.Popen[bytes]:
        """Start X program ``argv`` on ``display`` (killed at close)."""
        require(argv[0])
        return self._popen(
            list(argv), argv[0], log=self._log(argv[0]), env=display.env, stdout=stdout
        )

    def check_output(self, display: XDisplay, *argv: str, timeout: float = 10.0) -> bytes:
        """Run a short X program (``xwd``, ``xwininfo``, ``xdotool``) to completion."""
        require(argv[0])
        return subprocess.run(
            list(argv), env=display.env, check=True, capture_output=True, timeout=timeout
        ).stdout

    async def spawn(self, display: XDisplay, *argv: str) -> asyncio.subprocess.Process:
        """Start X program ``argv`` with its stdout piped to us, for reading as it runs."""
        require(argv[0])
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=display.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._started.append(_Started(process, argv[0]))
        return process

    def show_image(
        self, display: XDisplay, rgb: np.ndarray, x: int = 0, y: int = 0
    ) -> subprocess.Popen[bytes]:
        """Show ``rgb`` (``uint8[h, w, 3]``) pixel for pixel at (x, y) with ``xwud``.

        The window has no border and, with no window manager, sits exactly at (x, y).
        """
        self._count += 1
        path = self.directory / f"image{self._count}.xwd"
        path.write_bytes(xwd_bytes(rgb))
        return self.run(display, "xwud", "-in", str(path), "-geometry", f"+{x}+{y}", "-noclick")

    def screenshot(self, display: XDisplay) -> np.ndarray:
        """The X server's own picture of the root window (``xwd -root``), ``uint8[H, W, 3]``."""
        return read_xwd(self.check_output(display, "xwd", "-root", "-silent"))

    async def xev(
        self, display: XDisplay, x: int, y: int, width: int = 100, height: int = 80
    ) -> XEventLog:
        """An ``xev`` window at (x, y) logging key, button and motion events, once mapped."""
        process = await self.spawn(
            display,
            "xev",
            "-geometry",
            f"{width}x{height}+{x}+{y}",
            "-event",
            "keyboard",
            "-event",
            "button",
            "-event",
            "mouse",
            "-event",
            "expose",
        )
        events = XEventLog(process)
        await events.wait_for(lambda e: e.type == "Expose", timeout=START_TIMEOUT)
        return events

    # Teardown ------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill every program and server started here, newest first.

        Programs from :meth:`spawn` belong to an event loop: prefer :meth:`aclose` while
        it runs (the ``xservers`` fixture does).
        """
        while self._xvnc:
            self._xvnc.pop().stop()
        while self._started:
            started = self._started.pop()
            process = started.process
            if isinstance(process, subprocess.Popen):
                xdisplay.stop_group(process, STOP_TIMEOUT)
            elif process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            for f in started.files:
                with contextlib.suppress(Exception):
                    f.close()  # type: ignore[attr-defined]
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def aclose(self) -> None:
        """:meth:`close`, reaping :meth:`spawn`ed programs in their event loop first."""
        for started in reversed(self._started):
            process = started.process
            if isinstance(process, asyncio.subprocess.Process) and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
                try:
                    async with asyncio.timeout(STOP_TIMEOUT):
                        await process.wait()
                except TimeoutError:
                    process.kill()
                    await process.wait()
        self._started = [s for s in self._started if isinstance(s.process, subprocess.Popen)]
        self.close()

    # Internals -----------------------------------------------------------------------------

    def _log(self, name: str) -> Path:
        self._count += 1
        return self.directory / f"{self._count:02d}-{name}.log"

    def _popen(
        self,
        argv: list[str],
        name: str,
        *,
        log: Path,
        env: dict[str, str] | None = None,
        stdout: int | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` as the remote starts programs (a process group of its own)."""
        log_file = open(log, "wb")  # noqa: SIM115 (closed at close())
        try:
            process = xdisplay.start_process(
                argv, stdout=log_file if stdout is None else stdout, stderr=log_file, env=env
            )
        except BaseException:
            log_file.close()
            raise
        self._started.append(_Started(process, name, [log_file]))
        return process


@pytest.fixture(name="xservers")
async def xservers_fixture() -> AsyncIterator[XServers]:
    """``xservers``: an :class:`XServers` whose servers and programs die after the test.

    Import ``xservers_fixture`` into a test module to use it.
    """
    servers = XServers()
    try:
        yield servers
    finally:
        await servers.aclose()


# XWD images ------------------------------------------------------------------------------

_XWD_HEADER = struct.Struct(">25I")


def xwd_bytes(rgb: np.ndarray, name: str = "test") -> bytes:
    """``rgb`` (``uint8[h, w, 3]``) as an XWD file (24-bit TrueColor ZPixmap) for ``xwud``."""
    h, w, _ = rgb.shape
    window_name = name.encode() + b"\0"
    header = _XWD_HEADER.pack(
        _XWD_HEADER.size + len(window_name),  # header size
        7,  # file version
        2,  # ZPixmap
        24,  # depth
        w,
        h,
        0,  # x offset
        0,  # byte order: LSBFirst
        32,  # bitmap unit
        0,  # bit order: LSBFirst
        32,  # bitmap pad
        32,  # bits per pixel
        w * 4,  # bytes per line
        4,  # TrueColor
        0xFF0000,
        0x00FF00,
        0x0000FF,
        8,  # bits per RGB
        256,  # colormap entries
        0,  # colours in the file
        w,
        h,
        0,
        0,
        0,
    )
    pixels = np.zeros((h, w, 4), np.uint8)
    pixels[..., :3] = rgb[..., ::-1]  # B, G, R, X in memory = 0x00RRGGBB little endian
    return header + window_name + pixels.tobytes()


def read_xwd(data: bytes) -> np.ndarray:
    """An XWD dump of a 24/32-bit TrueColor screen (``xwd -root``) as ``uint8[h, w, 3]``."""
    fields = _XWD_HEADER.unpack_from(data)
    header_size, pixmap_format, width, height = fields[0], fields[2], fields[4], fields[5]
    byte_order, bpp, line = fields[7], fields[11], fields[12]
    masks, ncolours = fields[14:17], fields[19]
    if pixmap_format != 2 or bpp != 32 or masks != (0xFF0000, 0xFF00, 0xFF):
        raise ValueError(f"unsupported XWD image: format {pixmap_format}, {bpp} bpp, masks {masks}")
    offset = header_size + 12 * ncolours
    rows = np.frombuffer(data, np.uint8, height * line, offset).reshape(height, line)
    pixels = rows[:, : width * 4].reshape(height, width, 4)
    rgb = pixels[..., 2::-1] if byte_order == 0 else pixels[..., 1:]
    return np.ascontiguousarray(rgb)


# xev ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class XEvent:
    """One event ``xev`` printed: its type and the fields tests look at."""

    type: str
    keysym: str | None = None
    button: int | None = None
    root: tuple[int, int] | None = None
    text: str = field(default="", compare=False)


_EVENT_HEAD = re.compile(r"^(\w+) event, serial")
_KEYSYM = re.compile(r"keysym 0x[0-9a-f]+, (\w+)\)")
_BUTTON = re.compile(r"button (\d+)")
_ROOT = re.compile(r"root:\((-?\d+),(-?\d+)\)")


class XEventLog:
    """Reads an ``xev`` process's output as it comes and parses it into :class:`XEvent`.

    ``events`` holds everything parsed so far; :meth:`wait_for` waits for a match. xev
    prints a blank line *before* each event and flushes after it, so an event is complete
    at the end of each read (pipe writes of under 4 KiB arrive whole), not at a blank line.
    """

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.events: list[XEvent] = []
        self._partial = ""

    async def wait_for(
        self, match: Callable[[XEvent], bool], timeout: float = 5.0, start: int = 0
    ) -> XEvent:
        """The first event at index >= ``start`` that ``match``es, reading more as needed."""
        index = start
        try:
            async with asyncio.timeout(timeout):
                while True:
                    while index < len(self.events):
                        if match(self.events[index]):
                            return self.events[index]
                        index += 1
                    await self._read()
        except TimeoutError:
            seen = [(e.type, e.keysym or e.button or e.root) for e in self.events[start:]]
            raise TimeoutError(
                f"xev logged no matching event within {timeout} s; it logged {seen}"
            ) from None

    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        data = await stdout.read(64 * 1024)
        if not data:
            raise EOFError(f"xev exited ({self.process.returncode}); its events: {self.events}")
        text = self._partial + data.decode(errors="replace")
        cut = text.rfind("\n") + 1
        text, self._partial = text[:cut], text[cut:]
        for block in re.split(r"\n[ \t]*\n", text):
            block = block.strip("\n")
            head = _EVENT_HEAD.match(block)
            if head is None:
                continue
            keysym = _KEYSYM.search(block)
            button = _BUTTON.search(block)
            root = _ROOT.search(block)
            self.events.append(
                XEvent(
                    head.group(1),
                    keysym.group(1) if keysym else None,
                    int(button.group(1)) if button else None,
                    (int(root.group(1)), int(root.group(2))) if root else None,
                    block,
                )
            )
