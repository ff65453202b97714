"""X displays served over VNC by TigerVNC's ``Xvnc``, for runtimes that run X programs.

Holds :class:`XvncDisplay` (an Xvnc server on a free display number, bound to the
remote's host and VNC port, and the X programs started on it), :class:`XProgram` (one such
program and its process group) and the limits of starting Xvnc. The steps an X server's
start is made of, for any X server, and how the remote starts and stops any program are
:mod:`.xprocess`'s (:func:`~.xprocess.start_process`, :func:`~.xprocess.start_x_server`,
:func:`~.xprocess.read_display_number`, :func:`~.xprocess.wait_listening`,
:func:`~.xprocess.stop_group`, :func:`~.xprocess.find_program`,
:class:`~.xprocess.ProgramMissing`, ...), re-exported here as they were before.

A runtime's display listens on a Unix socket only (``unix_socket=True``: ``-rfbunixpath``
in a private directory, mode 0600, no TCP port): the remote reads its frames and sends
it input over that socket (``runtimes.xruntime``) and serves viewers from its own VNC
server, with its passwords, throttle, TLS and frame tags. A TCP display (``port``) is
for tests and benchmarks that use Xvnc as a peer. Xvnc picks its own display number
(``-displayfd``: no race with other X servers on the machine); port 0 means "pick a free
port", retried when another process takes the one we picked before Xvnc binds it.
Nothing waits by sleeping: readiness is polled with a deadline, and errors quote the
tail of the log.

Use::

    display = XvncDisplay(640, 480, unix_socket=True)
    await display.start()               # display.display == ":N", display.address == "/tmp/.../rfb.sock"
    program = display.spawn(["xeyes"])  # runs with DISPLAY=:N, stopped with the display
    await display.aclose()              # programs first, newest first, then Xvnc
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Final, Self

from vncdriver.addresses import is_loopback

from .xprocess import (
    DEATH_SIGNAL,
    LOG_TAIL_LINES,
    POLL_INTERVAL,
    SETPRIV,
    STOP_TIMEOUT,
    ProgramMissing,
    XvncFailed,
    all_pids,
    death_signal_prefix,
    find_program,
    free_port,
    interface,
    log_tail,
    process_group,
    process_memory,
    read_display_number,
    start_process,
    start_x_server,
    stop_group,
    wait_listening,
)

__all__ = [
    "DEATH_SIGNAL",  # from .xprocess (to the next comment), re-exported
    "LOG_TAIL_LINES",
    "POLL_INTERVAL",
    "SETPRIV",
    "STOP_TIMEOUT",
    "ProgramMissing",
    "XvncFailed",
    "death_signal_prefix",
    "find_program",
    "free_port",
    "interface",
    "log_tail",
    "read_display_number",
    "start_process",
    "start_x_server",
    "stop_group",
    "wait_listening",
    "PORT_ATTEMPTS",  # this module's own
    "SOCKET_NAME",
    "START_TIMEOUT",
    "VNCPASSWD_PACKAGE",
    "XVNC_FLAGS",
    "XVNC_PACKAGE",
    "XProgram",
    "XvncDisplay",
]

log = logging.getLogger(__name__)

#: Seconds Xvnc may take to accept connections (it needs < 0.3 s here).
START_TIMEOUT: Final = 10.0
#: Attempts at a free VNC port when another process grabs the one we picked.
PORT_ATTEMPTS: Final = 5
#: The Unix socket a ``unix_socket`` display listens on, in its private directory.
SOCKET_NAME: Final = "rfb.sock"
#: Debian packages that bring the programs this module runs.
XVNC_PACKAGE: Final = "tigervnc-standalone-server"
VNCPASSWD_PACKAGE: Final = "tigervnc-tools"

#: Xvnc flags every display gets (FIELD-NOTES): shared sessions; no blacklisting of the
#: many quick handshakes agents and probes make; no X over TCP; no clipboard pushed to
#: viewers; viewers may not resize the screen (the runtime's layout depends on its size).
XVNC_FLAGS: Final = (
    "-AlwaysShared",
    "-BlacklistThreshold",
    "1000000",
    "-nolisten",
    "tcp",
    "-SendCutText=0",
    "-AcceptSetDesktopSize=0",
)


class XProgram:
    """An X program started by :meth:`XvncDisplay.spawn`, in a process group of its own
    (a browser's helpers die with it); stdout and stderr go to :attr:`log`."""

    def __init__(
        self, process: subprocess.Popen[bytes], log_path: Path, log_file: IO[bytes], name: str
    ) -> None:
        self.process, self.log, self.name = process, log_path, name
        self._log_file = log_file

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM the program and its group, SIGKILL them after ``timeout``; idempotent."""
        stop_group(self.process, timeout)
        self._log_file.close()


class XvncDisplay:
    """A TigerVNC ``Xvnc`` X server, read over a Unix socket or served on a TCP port.

    ``unix_socket``: listen only on :data:`SOCKET_NAME` in the display's private
    directory (mode 0700, the socket 0600: only this user gets in, so no password), and
    on no TCP port. Otherwise ``host`` is the address to serve on (loopback adds
    ``-localhost``; ``""`` or ``0.0.0.0`` listens everywhere) and ``port`` 0 picks a
    free port. ``password`` turns on VNC Authentication (only its first 8 characters
    count, as in every VNC server); ``view_only_password`` lets viewers watch without
    input reaching the display (it needs ``password``). ``args`` are more Xvnc options
    (``-FrameRate 30``, ...).
    """

    def __init__(
        self,
        width: int,
        height: int,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        password: str | None = None,
        view_only_password: str | None = None,
        depth: int = 24,
        args: Sequence[str] = (),
        start_timeout: float = START_TIMEOUT,
        unix_socket: bool = False,
    ) -> None:
        if view_only_password is not None and password is None:
            raise ValueError(
                "Xvnc needs a password to offer a view-only one; set both, or neither"
            )
        self.width, self.height, self.depth = width, height, depth
        self.host, self.requested_port = host, port
        self.password, self.view_only_password = password, view_only_password
        self.args = tuple(args)
        self.start_timeout = start_timeout
        self.unix_socket = unix_socket
        #: ``:N`` once started.
        self.display: str | None = None
        #: The VNC port Xvnc listens on, once started.
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.programs: list[XProgram] = []
        self.directory: Path | None = None
        self.log: Path | None = None
        self._log_file: IO[bytes] | None = None
        self._count = 0

    def __repr__(self) -> str:
        where = self.socket_path if self.unix_socket else f"port {self.port}"
        state = f"{self.display} {where}" if self.display else "not started"
        return f"<XvncDisplay {self.width}x{self.height} {state}>"

    @property
    def socket_path(self) -> Path | None:
        """The Unix socket of a ``unix_socket`` display (None before start)."""
        return self.directory / SOCKET_NAME if self.directory is not None else None

    @property
    def address(self) -> str:
        """Where a VNC client on this machine reaches the display: ``host::port``, or the
        socket's path (which :class:`~vncdriver.client.VNCClient` takes as an address)."""
        if self.display is None:
            raise XvncFailed("the display is not started; await start() first")
        if self.unix_socket:
            return str(self.socket_path)
        assert self.port is not None
        listen = interface(self.host)
        connect = "127.0.0.1" if listen is None else listen
        return f"[{connect}]::{self.port}" if ":" in connect else f"{connect}::{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The environment for X programs on this display."""
        if self.display is None:
            raise XvncFailed("the display is not started; await start() first")
        return {**os.environ, "DISPLAY": self.display}

    def pids(self) -> list[int]:
        """Process ids of Xvnc and of every process in the groups of its programs."""
        groups = {p.pid for p in self.programs}
        pids = [self.process.pid] if self.process is not None else []
        return pids + [pid for pid in all_pids() if process_group(pid) in groups]

    def memory(self) -> dict[str, tuple[int, int]]:
        """Resident memory in bytes, (RSS, PSS), of Xvnc and of each program with its
        helpers (PSS splits shared pages among the processes that share them)."""
        usage: dict[str, tuple[int, int]] = {}
        if self.process is not None:
            usage["Xvnc"] = process_memory([self.process.pid])
        for program in self.programs:
            members = [pid for pid in all_pids() if process_group(pid) == program.pid]
            rss, pss = usage.get(program.name, (0, 0))
            more = process_memory(members)
            usage[program.name] = (rss + more[0], pss + more[1])
        return usage

    # Starting ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start Xvnc and return once its VNC port accepts connections.

        Raises :class:`ProgramMissing` (Xvnc or vncpasswd not installed), OSError
        EADDRINUSE (the requested port is taken) or :class:`XvncFailed` (with its log).
        """
        xvnc = find_program("Xvnc", package=XVNC_PACKAGE)
        self.directory = Path(tempfile.mkdtemp(prefix="universe-xvnc-"))  # mode 0700
        try:
            security = ["-SecurityTypes", "None"]
            if self.password is not None:
                passwd = self._password_file()
                security = ["-SecurityTypes", "VncAuth", "-PasswordFile", str(passwd)]
            if self.unix_socket:
                path = str(self.socket_path)
                argv = [
                    xvnc, "-geometry", f"{self.width}x{self.height}", "-depth", str(self.depth),
                    "-rfbport", "-1", "-rfbunixpath", path,  # mode 0600 by default
                    *security, *XVNC_FLAGS, *self.args,
                ]
                if not await self._try_start(argv, None):
                    raise XvncFailed(f"Xvnc could not listen on {path}{log_tail(self.log)}")
                return
            listen = interface(self.host)
            where = ["-interface", listen] if listen is not None else []
            if is_loopback(listen):
                where.append("-localhost")
            last = ""
            for _ in range(PORT_ATTEMPTS):
                port = self.requested_port or free_port(listen)
                argv = [
                    xvnc,
                    "-geometry", f"{self.width}x{self.height}",
                    "-depth", str(self.depth),
                    "-rfbport", str(port),
                    *where,
                    *security,
                    *XVNC_FLAGS,
                    *self.args,
                ]
                if await self._try_start(argv, port):
                    return
                last = log_tail(self.log)
                if self.requested_port:
                    raise OSError(
                        errno.EADDRINUSE,
                        f"port {port} is taken (Xvnc could not bind it on {self.host})",
                    )
            raise XvncFailed(f"Xvnc found no free port in {PORT_ATTEMPTS} attempts{last}")
        except BaseException:
            await self.aclose()
            raise

    async def _try_start(self, argv: list[str], port: int | None) -> bool:
        """Start ``argv``; True once it listens (on ``port``, or on its Unix socket when
        None), False if the port was taken meanwhile."""
        process, read_fd = self._launch(argv)
        try:
            number = await read_display_number(
                read_fd, process, timeout=self.start_timeout, log=self.log
            )
        finally:
            os.close(read_fd)
        if number is None:
            if "Address already in use" in log_tail(self.log):
                return False
            raise XvncFailed(f"Xvnc exited with {process.returncode}{log_tail(self.log)}")
        self.display, self.port = f":{number}", port
        host = self.address if port is None else self.address.rsplit("::", 1)[0].strip("[]")
        await wait_listening(host, port, process, timeout=self.start_timeout, log=self.log)
        log.info("Xvnc %s listening on %s (pid %d)", self.display, self.address, process.pid)
        return True

    def _launch(self, argv: list[str]) -> tuple[subprocess.Popen[bytes], int]:
        """Start Xvnc with a fresh log: its process, the read end of its ``-displayfd`` pipe."""
        self._count += 1
        assert self.directory is not None
        self.log = self.directory / f"xvnc-{self._count}.log"
        if self._log_file is not None:
            self._log_file.close()
        self._log_file = open(self.log, "wb")  # noqa: SIM115 (closed in stop())
        self.process, read_fd = start_x_server(argv, self._log_file)
        return self.process, read_fd

    def _password_file(self) -> Path:
        """A ``vncpasswd -f`` file: the password, then the view-only one if any."""
        assert self.directory is not None and self.password is not None
        vncpasswd = find_program("vncpasswd", "tigervncpasswd", package=VNCPASSWD_PACKAGE)
        lines = [self.password] + ([self.view_only_password] if self.view_only_password else [])
        result = subprocess.run(
            [vncpasswd, "-f"],
            input="".join(f"{line}\n" for line in lines).encode(),
            capture_output=True,
            check=False,
            timeout=STOP_TIMEOUT,
        )
        if result.returncode != 0 or not result.stdout:
            raise XvncFailed(
                f"vncpasswd -f failed ({result.returncode}): {result.stderr.decode()!r}"
            )
        path = self.directory / "passwd"
        path.write_bytes(result.stdout)
        path.chmod(0o600)
        return path

    # Programs ----------------------------------------------------------------------------

    def spawn(
        self,
        argv: Sequence[str],
        *,
        name: str | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> XProgram:
        """Start X program ``argv`` on this display in a process group of its own (in
        directory ``cwd``, or ours).

        It is stopped (with its whole group) by :meth:`stop`, newest first. Its output
        goes to ``<directory>/<name>.log``.
        """
        if self.directory is None or self.display is None:
            raise XvncFailed("the display is not started; await start() first")
        self._count += 1
        name = name or Path(argv[0]).name
        path = self.directory / f"{name}-{self._count}.log"
        log_file = open(path, "wb")  # noqa: SIM115 (closed by XProgram.stop)
        try:
            process = start_process(
                argv, stdout=log_file, stderr=log_file, env={**self.env, **(env or {})}, cwd=cwd
            )
        except BaseException:
            log_file.close()
            raise
        program = XProgram(process, path, log_file, name)
        self.programs.append(program)
        return program

    # Stopping ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every program (newest first), then Xvnc; remove the temp files. Idempotent."""
        while self.programs:
            self.programs.pop().stop()
        if self.process is not None:
            stop_group(self.process, STOP_TIMEOUT)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    async def aclose(self) -> None:
        """:meth:`stop` without blocking the event loop."""
        await asyncio.to_thread(self.stop)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
