"""The rewarder port's local twin: a Unix socket beside a loopback TCP port.

A remote whose rewarder port holds ``127.0.0.1`` also listens on a Linux abstract Unix
socket named after that port; a lockstep agent dialling that port on ``127.0.0.1``
without TLS tries it first and falls back to TCP. The WebSocket and every message are
the same: only the kernel's path differs, and a Unix socket skips TCP's per-segment work
on both sides of every step (`python -m benchmarks step_channel`, the (b') and (c) rows).

Which remote the name reaches: abstract names live in the network namespace, like the
TCP port they are named after, but they have no owner: a remote binds the name only
when it holds ``127.0.0.1:PORT`` (bound there, on ``localhost`` or on every IPv4
address), yet any process may have bound it first. So an agent dials it only for
``127.0.0.1:PORT`` and uses it only when the process behind it holds that port
(:mod:`.local_peer` checks, before a byte is sent); a remote that finds its name taken
says so at WARNING (:func:`unavailable`) and serves TCP alone. (A remote on
``127.0.0.2`` or ``::1`` alone may share its port number with another: it gets no twin.)
TLS remotes keep TCP (a Unix socket would skip their certificate). Sans-I/O: names and
rules only.
"""

from __future__ import annotations

import errno
import sys
from typing import Final

#: The abstract socket's name for a rewarder port (the leading NUL: no file to clean up).
NAME_FORMAT: Final = "\0universe-remote-rewarder-{port}"
#: Hosts a client reaches the local twin under (what it dials, as typed): only 127.0.0.1
#: itself (``localhost`` may resolve to ``::1`` first, which another remote may hold).
LOCAL_HOSTS: Final = frozenset({"127.0.0.1"})
#: Hosts a rewarder port gets a twin on: those that hold 127.0.0.1:PORT (None, "": every
#: address, as asyncio's create_server reads them).
TWIN_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "0.0.0.0", ""})
#: Where abstract Unix sockets exist.
SUPPORTED: Final = sys.platform.startswith("linux")


def name(port: int) -> str:
    """The abstract socket's name for rewarder port ``port``."""
    return NAME_FORMAT.format(port=int(port))


def serves(host: str | None, tls: bool) -> bool:
    """Whether a rewarder port bound on ``host`` gets a local twin: a port that holds
    ``127.0.0.1`` (:data:`TWIN_HOSTS`, or None), no TLS, on Linux."""
    return SUPPORTED and not tls and (host is None or host in TWIN_HOSTS)


def dials(host: str | None, secure: bool) -> bool:
    """Whether a client dialling ``host`` (no TLS) tries the local twin first."""
    return SUPPORTED and not secure and host in LOCAL_HOSTS


def unavailable(port: int, exc: OSError) -> str:
    """What a remote says when it cannot bind rewarder port ``port``'s twin (``exc``)."""
    shown = "@" + name(port)[1:]  # as ss and /proc/net/unix show an abstract name
    if exc.errno == errno.EADDRINUSE:
        why = (f"another process holds its name {shown} (not a remote: none other can hold "
               "this port now; perhaps one squatting the name to catch agents; `ss -xlp` "
               "names it)")
    else:
        why = f"binding {shown} failed: {exc}"
    return (f"no local socket for rewarder port {port}: {why}; agents on this host will use "
            "TCP (they use the name only when its process holds this port: docs/security.md)")
