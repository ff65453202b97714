"""X displays served over VNC by TigerVNC's ``Xvnc``, for runtimes that run X programs.

Holds :class:`XvncDisplay` (an Xvnc server on a free display number, bound to the
remote's host and VNC port, and the X programs started on it), :class:`XProgram` (one such
program and its process group), :class:`ProgramMissing`, :func:`find_program` and the
limits of starting and stopping; and the steps an X server's start is made of, for any X
server (the tests start Xvfb and x11vnc with them): :func:`start_process`,
:func:`start_x_server`, :func:`read_display_number`, :func:`wait_listening`,
:func:`stop_group`, :func:`free_port`, :func:`log_tail`, and
:func:`death_signal_prefix` (how a program dies with the remote).

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
import contextlib
import errno
import functools
import ipaddress
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Final, Self

from vncdriver.addresses import is_loopback

from .errors import RuntimeFailure

log = logging.getLogger(__name__)

#: Seconds Xvnc may take to accept connections (it needs < 0.3 s here).
START_TIMEOUT: Final = 10.0
#: Seconds a process gets to exit after SIGTERM before SIGKILL.
STOP_TIMEOUT: Final = 3.0
#: Attempts at a free VNC port when another process grabs the one we picked.
PORT_ATTEMPTS: Final = 5
#: Interval of readiness polls (a condition with a deadline, not synchronisation).
POLL_INTERVAL: Final = 0.02
#: The Unix socket a ``unix_socket`` display listens on, in its private directory.
SOCKET_NAME: Final = "rfb.sock"
#: Lines of a log quoted in an error.
LOG_TAIL_LINES: Final = 15

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


#: util-linux's ``setpriv`` (Debian's essential util-linux package brings it), the small
#: exec wrapper that gives a program its parent-death signal (see :func:`start_process`).
SETPRIV: Final = "setpriv"
#: The signal a program gets when the remote dies, even by SIGKILL (Linux), so that no
#: Xvnc or browser outlives it holding a port and 400 MB.
DEATH_SIGNAL: Final = signal.SIGTERM


@functools.cache
def death_signal_prefix() -> tuple[str, ...]:
    """``setpriv --pdeathsig=TERM --``, put before a program's argv; empty (with one
    warning) where setpriv is not installed: programs then outlive a SIGKILLed remote.

    Why a wrapper and not ``Popen(preexec_fn=prctl)``: a ``preexec_fn`` makes Popen fork
    for real, and a real fork runs the ``pthread_atfork`` handlers of gRPC (the
    dm_env_rpc port), which crashed programs started while gRPC was busy (SIGSEGV,
    SIGABRT, each start logging "skipping fork() handlers"). Without one Popen uses
    vfork, which runs no handlers; setpriv sets the signal and execs the program, so its
    pid is the program's.
    """
    path = shutil.which(SETPRIV)
    if path is None:
        log.warning(
            "%s is not installed (Debian package util-linux): X programs and browsers will "
            "outlive this remote if it is killed with SIGKILL", SETPRIV,
        )
        return ()
    return (path, f"--pdeathsig={DEATH_SIGNAL.name.removeprefix('SIG')}", "--")


class ProgramMissing(RuntimeFailure, ModuleNotFoundError):
    """A program a runtime needs is not installed; the message names its Debian package.

    It is a ModuleNotFoundError so that the registry treats a family whose programs are
    missing like one whose Python extra is missing: ``universe-remote list`` leaves its
    ids out and says why, and ``serve`` fails at once with the install command.
    """

    def __init__(self, program: str, package: str, detail: str = "not on PATH") -> None:
        self.program, self.package, self.detail = program, package, detail
        super().__init__(
            f"{program} is not installed ({detail}); install the Debian package "
            f"{package}: apt-get install {package}",
            name=program,
        )


class XvncFailed(RuntimeFailure):
    """Xvnc (or a program on its display) exited or did not come up; the message quotes its log."""


def find_program(*names: str, package: str) -> str:
    """The path of the first of ``names`` that is installed (absolute paths are checked
    as they are); raises :class:`ProgramMissing` naming ``package`` otherwise."""
    for name in names:
        if os.path.isabs(name):
            if os.access(name, os.X_OK):
                return name
        else:
            path = shutil.which(name)
            if path is not None:
                return path
    if len(names) == 1:
        detail = f"no executable at {names[0]}" if os.path.isabs(names[0]) else "not on PATH"
    else:
        detail = f"none of {', '.join(names)} is on PATH"
    raise ProgramMissing(names[0], package, detail)


def log_tail(path: Path | None, lines: int = LOG_TAIL_LINES) -> str:
    """``; last lines of PATH: ...`` for error messages (empty if there is no log)."""
    if path is None or not path.exists():
        return ""
    tail = path.read_text(errors="replace").strip().splitlines()[-lines:]
    return f"; last lines of {path}:\n" + "\n".join(tail) if tail else ""


def interface(host: str) -> str | None:
    """The address Xvnc should listen on for ``host`` (None: every interface)."""
    if host in ("", "0.0.0.0", "::", "*"):
        return None
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host))
    try:  # a name: prefer IPv4, as the remote's other servers do for "localhost"
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        infos = socket.getaddrinfo(host, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    return str(infos[0][4][0])


def free_port(address: str | None) -> int:
    """A TCP port on ``address`` (None: every interface) that was free a moment ago."""
    family = socket.AF_INET6 if address and ":" in address else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((address or "", 0))
        return int(s.getsockname()[1])


def start_process(
    argv: Sequence[str],
    *,
    stdout: IO[bytes] | int,
    stderr: IO[bytes] | int,
    env: dict[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the remote starts every program: in a session (so a process
    group) of its own, SIGTERMed when the remote dies (:func:`death_signal_prefix`);
    stop it with :func:`stop_group`.

    Its own session: the remote's Ctrl-C is the remote's to handle, and a program's
    helpers (a browser's renderers) are stopped with it.
    """
    return subprocess.Popen(
        [*death_signal_prefix(), *argv],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=env,
        pass_fds=tuple(pass_fds),
        cwd=cwd,
        start_new_session=True,  # no preexec_fn: Popen may vfork (death_signal_prefix)
    )


def start_x_server(
    argv: Sequence[str], log_file: IO[bytes]
) -> tuple[subprocess.Popen[bytes], int]:
    """Start X server ``argv`` (:func:`start_process`, output to ``log_file``) with
    ``-displayfd``; returns it and the read end of that pipe, for
    :func:`read_display_number` (the caller closes it)."""
    read_fd, write_fd = os.pipe()
    try:
        process = start_process(
            [argv[0], "-displayfd", str(write_fd), *argv[1:]],
            stdout=log_file,
            stderr=log_file,
            pass_fds=(write_fd,),
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return process, read_fd


async def read_display_number(
    fd: int,
    process: subprocess.Popen[bytes],
    *,
    timeout: float,
    log: Path | None,
    name: str = "Xvnc",
) -> int | None:
    """The display number an X server writes to ``-displayfd`` when ready; None if it
    exits first. Raises :class:`XvncFailed` (quoting ``log``) after ``timeout`` s."""
    os.set_blocking(fd, False)
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = os.read(fd, 64)
        except BlockingIOError:
            chunk = None
        if chunk == b"":  # every writer closed: the server exited
            await asyncio.to_thread(process.wait, STOP_TIMEOUT)
            return None
        if chunk:
            data += chunk
            continue
        if time.monotonic() > deadline:
            raise XvncFailed(
                f"{name} gave no display number within {timeout} s{log_tail(log)}"
            )
        await asyncio.sleep(POLL_INTERVAL)
    return int(data.strip())


async def wait_listening(
    host: str,
    port: int | None,
    process: subprocess.Popen[bytes],
    *,
    timeout: float,
    log: Path | None,
    name: str = "Xvnc",
) -> None:
    """Poll until ``host:port`` accepts a TCP connection (``port`` None: the Unix socket
    at path ``host``); raises :class:`XvncFailed` (quoting ``log``) if ``process`` exits
    first or ``timeout`` s pass."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if port is None:
                _, writer = await asyncio.open_unix_connection(host)
            else:
                _, writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            error = exc
        else:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return
        if process.poll() is not None:
            raise XvncFailed(f"{name} exited with {process.returncode}{log_tail(log)}")
        if time.monotonic() > deadline:
            raise XvncFailed(
                f"{name} did not listen on {host}:{port} within {timeout} s "
                f"({error}){log_tail(log)}"
            )
        await asyncio.sleep(POLL_INTERVAL)


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
        return pids + [pid for pid in _all_pids() if _pgid(pid) in groups]

    def memory(self) -> dict[str, tuple[int, int]]:
        """Resident memory in bytes, (RSS, PSS), of Xvnc and of each program with its
        helpers (PSS splits shared pages among the processes that share them)."""
        usage: dict[str, tuple[int, int]] = {}
        if self.process is not None:
            usage["Xvnc"] = _memory([self.process.pid])
        for program in self.programs:
            members = [pid for pid in _all_pids() if _pgid(pid) == program.pid]
            rss, pss = usage.get(program.name, (0, 0))
            more = _memory(members)
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


def stop_group(process: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM ``process`` and its process group (it leads one: :func:`start_process`),
    then SIGKILL what is left after ``timeout`` s."""
    pgid = process.pid  # started with start_new_session: it leads its own group
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            process.wait()
    # Helpers (a browser's renderers) may outlive their leader for a moment.
    deadline, killed = time.monotonic() + timeout, False
    while any(_pgid(pid) == pgid for pid in _all_pids()):
        if time.monotonic() > deadline:
            if killed:
                log.warning("processes of group %d survived SIGKILL for %s s", pgid, timeout)
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            deadline, killed = time.monotonic() + timeout, True
        time.sleep(POLL_INTERVAL)


def _memory(pids: Sequence[int]) -> tuple[int, int]:
    """Summed (RSS, PSS) in bytes of ``pids``, from /proc/PID/smaps_rollup."""
    rss = pss = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key in ("Rss", "Pss"):
                kib = int(value.split()[0]) * 1024
                if key == "Rss":
                    rss += kib
                else:
                    pss += kib
    return rss, pss


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _pgid(pid: int) -> int | None:
    """The process group of ``pid``, or None if it is gone or a zombie (already dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else int(fields[2])
