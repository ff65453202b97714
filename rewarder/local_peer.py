"""Who answers on the rewarder port's local twin: the remote that holds the port, or
nobody an agent talks to.

An abstract Unix name (:mod:`.local_socket`) has no owner and no permissions: any process
of the network namespace may bind ``\\0universe-remote-rewarder-PORT`` first — before a
remote starts, or between a stop and a restart — and would then receive every local
agent's handshake, password included. TCP has no such gap: while a remote listens on
``127.0.0.1:PORT``, nobody else can. So an agent uses the name only when the process
behind it is the one that holds that TCP port, checked before it sends a byte:

1. ``SO_PEERCRED`` gives the pid and uid of the process that listened on the name (the
   kernel's record, taken when it called ``listen``; the peer cannot choose it);
2. ``/proc/net/tcp`` (this network namespace's: the one the agent would dial over TCP)
   gives the sockets listening where a connection to ``127.0.0.1:PORT`` lands (bound
   to ``127.0.0.1`` or ``0.0.0.0``), with their inodes and owners;
3. the peer must be such a socket's owner (uid), and ``/proc/PID/fd`` of the peer's pid
   must hold it.

The uid check covers a reused pid: a process that listened on the name and handed the
socket on before it exited leaves its pid to whoever gets it next, perhaps the remote;
its uid stays its own. Whatever cannot be read fails the check (a remote of another user
when the agent is not root, a peer in another pid namespace, whose pid reads 0), and
the agent dials TCP. The check reads ``/proc`` once per connection, never per step.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from . import local_socket

log = logging.getLogger(__name__)

#: ``struct ucred``: pid, uid, gid.
_UCRED: Final = struct.Struct("3i")
#: The TCP state ``/proc/net/tcp{,6}`` shows for a listening socket.
TCP_LISTEN: Final = "0A"
#: What a listening socket's row has after its local address: no remote address, LISTEN
#: (a cheap test that skips the established connections a busy host has thousands of).
_LISTENING_TAIL: Final = {
    "tcp": " 00000000:0000 0A ",
    "tcp6": " 00000000000000000000000000000000:0000 0A ",
}
#: The IPv4 addresses a listener takes ``127.0.0.1:PORT`` connections on.
TWIN_ADDRESSES: Final = ("127.0.0.1", "0.0.0.0")


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening TCP socket of this network namespace, as ``/proc/net/tcp{,6}`` shows it."""

    inode: int
    #: The local address as the kernel prints it (hex, in the host's byte order).
    address: str
    port: int
    uid: int


def proc_address(ipv4: str) -> str:
    """``ipv4`` as ``/proc/net/tcp`` prints it (hex of the 32-bit value in host order)."""
    (value,) = struct.unpack("=I", socket.inet_aton(ipv4))
    return f"{value:08X}"


def listeners(
    port: int | None = None, families: tuple[str, ...] = ("tcp", "tcp6"), proc: Path = Path("/proc")
) -> Iterator[Listener]:
    """This network namespace's listening TCP sockets (on ``port``, if given)."""
    for family in families:
        needle = _LISTENING_TAIL[family] if port is None else f":{port:04X}{_LISTENING_TAIL[family]}"
        try:
            text = (proc / "net" / family).read_text()
        except OSError:
            continue
        for line in text.splitlines()[1:]:
            if needle not in line:
                continue
            fields = line.split()
            if len(fields) > 9 and fields[3] == TCP_LISTEN:
                address, _, hex_port = fields[1].rpartition(":")
                yield Listener(int(fields[9]), address, int(hex_port, 16), int(fields[7]))


def socket_inodes(fd_dir: Path) -> Iterator[int]:
    """The inodes of the sockets a process holds (its ``/proc/PID/fd``); nothing when it is
    gone or not ours to read."""
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return
    for name in names:
        try:
            link = os.readlink(fd_dir / name)
        except OSError:
            continue
        if link.startswith("socket:["):
            yield int(link[8:-1])


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """The pid and uid of the process that listened on the Unix socket ``sock`` reached."""
    pid, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return pid, uid


def refusal(sock: socket.socket, port: int, proc: Path = Path("/proc")) -> str | None:
    """Why the peer of ``sock`` (connected to port ``port``'s twin) is not the process that
    holds ``127.0.0.1:PORT``; None when it is."""
    pid, uid = peer_credentials(sock)
    if pid <= 0:
        return "its peer is in another pid namespace"
    wanted = {proc_address(host) for host in TWIN_ADDRESSES}
    held = [each for each in listeners(port, ("tcp",), proc) if each.address in wanted]
    if not held:
        return f"nothing listens on 127.0.0.1:{port}"
    inodes = {each.inode for each in held if each.uid == uid}
    if not inodes:
        return f"its peer (pid {pid}, uid {uid}) is not the user that listens on 127.0.0.1:{port}"
    if inodes.isdisjoint(socket_inodes(proc / str(pid) / "fd")):
        return f"its peer (pid {pid}) does not hold 127.0.0.1:{port} (or is not ours to read)"
    return None


def dial(port: int, timeout: float) -> socket.socket | None:
    """A connection to the twin of rewarder port ``port`` whose peer is the remote that
    holds the port (:func:`refusal`), with ``timeout`` set; None: dial TCP. Nothing is
    sent before the check."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # A Unix connect completes at once, or its listener's backlog is full
        # (BlockingIOError): never wait on a name that does not accept.
        sock.setblocking(False)
        sock.connect(local_socket.name(port))
        why = refusal(sock, port)
    except OSError:  # no twin (an older remote, a port forwarded here), or a full backlog
        sock.close()
        return None
    if why is not None:
        log.debug("not using the local socket of rewarder port %d: %s; dialling TCP", port, why)
        sock.close()
        return None
    sock.settimeout(timeout)
    return sock
