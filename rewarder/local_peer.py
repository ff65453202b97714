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
2. the kernel's socket table (``NETLINK_SOCK_DIAG``, asked for the one socket a
   connection to ``127.0.0.1:PORT`` reaches, in this network namespace: the one the
   agent would dial over TCP) gives that listener's inode and owner; where netlink is
   not available (some sandboxes), ``/proc/net/tcp``'s rows for ``127.0.0.1`` and
   ``0.0.0.0`` do, at a few milliseconds a read on a VM instead of tens of microseconds;
3. the peer must be that socket's owner (uid), and ``/proc/PID/fd`` of the peer's pid
   must hold it.

The uid check covers a reused pid: a process that listened on the name and handed the
socket on before it exited leaves its pid to whoever gets it next, perhaps the remote;
its uid stays its own. Whatever cannot be read fails the check (a remote of another user
when the agent is not root, a peer in another pid namespace, whose pid reads 0), and
the agent dials TCP. The check runs once per connection, never per step (``python -m
benchmarks twin_connect`` measures it).
"""

from __future__ import annotations

import errno
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
#: The kernel's TCP_LISTEN, and as ``/proc/net/tcp{,6}`` shows it.
TCP_LISTEN_STATE: Final = 10
TCP_LISTEN: Final = f"{TCP_LISTEN_STATE:02X}"
#: What a listening socket's row has after its local address: no remote address, LISTEN
#: (a cheap test that skips the established connections a busy host has thousands of).
_LISTENING_TAIL: Final = {
    "tcp": f" 00000000:0000 {TCP_LISTEN} ",
    "tcp6": f" {'0' * 32}:0000 {TCP_LISTEN} ",
}
#: The IPv4 addresses a listener takes ``127.0.0.1:PORT`` connections on, the kernel's
#: first choice first (an exact address beats the wildcard).
TWIN_ADDRESSES: Final = ("127.0.0.1", "0.0.0.0")
#: The twin's address, as sock_diag takes it.
_LOOPBACK: Final = socket.inet_aton("127.0.0.1")
#: <linux/netlink.h>, <linux/sock_diag.h>, <linux/inet_diag.h>: what a lookup of one socket sends.
NETLINK_SOCK_DIAG: Final = 4
SOCK_DIAG_BY_FAMILY: Final = 20
NLM_F_REQUEST: Final = 1
NLMSG_ERROR: Final = 2
#: nlmsghdr (length, type, flags, seq, pid); inet_diag_req_v2's head (family, protocol,
#: ext, pad, states) and its inet_diag_sockid (ports and addresses in network order,
#: interface, cookie); inet_diag_msg's head (family, state, timer, retrans), sockid and
#: tail (expires, rqueue, wqueue, uid, inode).
_NLMSGHDR: Final = struct.Struct("=IHHII")
_REQ_HEAD: Final = struct.Struct("=BBBxI")
_SOCKID: Final = struct.Struct("!HH16s16s")
_SOCKID_TAIL: Final = struct.Struct("=III")
_MSG_HEAD: Final = struct.Struct("=BBBB")
_MSG_TAIL: Final = struct.Struct("=IIIII")
_DIAG_MSG_SIZE: Final = _MSG_HEAD.size + _SOCKID.size + _SOCKID_TAIL.size + _MSG_TAIL.size
_NO_COOKIE: Final = 0xFFFFFFFF
#: A netlink request to the kernel is answered before send returns; this only bounds a
#: kernel that never answers.
DIAG_TIMEOUT: Final = 1.0


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


def _diag_listener(port: int) -> tuple[int, int] | None:
    """The (inode, uid) of the socket a connection to ``127.0.0.1:PORT`` reaches, asked of
    the kernel (sock_diag's lookup of one socket); None: nothing listens there. Raises
    OSError where sock_diag is not available."""
    request = (
        _REQ_HEAD.pack(socket.AF_INET, socket.IPPROTO_TCP, 0, 1 << TCP_LISTEN_STATE)
        + _SOCKID.pack(port, 0, _LOOPBACK.ljust(16, b"\0"), bytes(16))
        + _SOCKID_TAIL.pack(0, _NO_COOKIE, _NO_COOKIE)
    )
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as diag:
        diag.settimeout(DIAG_TIMEOUT)
        diag.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(request), SOCK_DIAG_BY_FAMILY,
                                 NLM_F_REQUEST, 1, 0) + request)
        reply = diag.recv(65536)
    at = _NLMSGHDR.size
    kind = _NLMSGHDR.unpack_from(reply)[1] if len(reply) >= at else None
    if kind == NLMSG_ERROR and len(reply) >= at + 4:
        (error,) = struct.unpack_from("=i", reply, at)
        if -error == errno.ENOENT:
            return None
        raise OSError(-error, f"sock_diag: {os.strerror(-error)}")
    if kind != SOCK_DIAG_BY_FAMILY or len(reply) < at + _DIAG_MSG_SIZE:
        raise OSError(f"sock_diag answered something else: {reply[:96].hex()}")
    family, state, _, _ = _MSG_HEAD.unpack_from(reply, at)
    sport, _, _, _ = _SOCKID.unpack_from(reply, at + _MSG_HEAD.size)
    *_, uid, inode = _MSG_TAIL.unpack_from(reply, at + _MSG_HEAD.size + _SOCKID.size + _SOCKID_TAIL.size)
    if (family, state, sport) != (socket.AF_INET, TCP_LISTEN_STATE, port):
        raise OSError(f"sock_diag answered something else: {reply[:96].hex()}")
    return inode, uid


def listener(port: int, proc: Path = Path("/proc")) -> tuple[int, int] | None:
    """The (inode, uid) of the socket listening where a TCP connection to
    ``127.0.0.1:PORT`` lands; None when nothing listens there."""
    try:
        return _diag_listener(port)
    except OSError as exc:  # no sock_diag here: /proc/net/tcp, slower
        log.debug("sock_diag failed (%s): reading %s/net/tcp", exc, proc)
    held = {each.address: each for each in listeners(port, ("tcp",), proc)}
    for host in TWIN_ADDRESSES:
        if (found := held.get(proc_address(host))) is not None:
            return found.inode, found.uid
    return None


def refusal(sock: socket.socket, port: int, proc: Path = Path("/proc")) -> str | None:
    """Why the peer of ``sock`` (connected to port ``port``'s twin) is not the process that
    holds ``127.0.0.1:PORT``; None when it is."""
    pid, uid = peer_credentials(sock)
    if pid <= 0:
        return "its peer is in another pid namespace"
    held = listener(port, proc)
    if held is None:
        return f"nothing listens on 127.0.0.1:{port}"
    inode, owner = held
    if uid != owner:
        return f"its peer (pid {pid}, uid {uid}) is not the user that listens on 127.0.0.1:{port}"
    if inode not in socket_inodes(proc / str(pid) / "fd"):
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
