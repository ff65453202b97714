"""The rewarder port's local twin: a Unix socket beside a loopback TCP port.

A remote whose rewarder port listens on loopback (or every address) also listens on a
Linux abstract Unix socket named after that port; a lockstep agent dialling that port on
``127.0.0.1``/``localhost`` without TLS tries it first and falls back to TCP. The
WebSocket and every message are the same: only the kernel's path differs, and a Unix
socket skips TCP's per-segment work on both sides of every step (`python -m benchmarks
step_channel`, the (b') and (c) rows).

Why the name is safe to trust: abstract names live in the network namespace, like the
TCP port they are named after, and a remote binds its name only when it holds that port
on loopback, so whoever answers on the name holds the port too. TLS remotes keep TCP (a
Unix socket would skip their certificate). Sans-I/O: names and rules only.
"""

from __future__ import annotations

import ipaddress
import sys
from typing import Final

#: The abstract socket's name for a rewarder port (the leading NUL: no file to clean up).
NAME_FORMAT: Final = "\0universe-remote-rewarder-{port}"
#: Hosts a client may reach the local twin under (what it dials, as typed).
LOCAL_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1"})
#: Where abstract Unix sockets exist.
SUPPORTED: Final = sys.platform.startswith("linux")


def name(port: int) -> str:
    """The abstract socket's name for rewarder port ``port``."""
    return NAME_FORMAT.format(port=int(port))


def serves(host: str | None, tls: bool) -> bool:
    """Whether a rewarder port bound on ``host`` gets a local twin: loopback or every
    address (``""``/``0.0.0.0``/``::``/None), no TLS, on Linux."""
    if tls or not SUPPORTED:
        return False
    if host in (None, "", "0.0.0.0", "::", "localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def dials(host: str | None, secure: bool) -> bool:
    """Whether a client dialling ``host`` (no TLS) tries the local twin first."""
    return SUPPORTED and not secure and host in LOCAL_HOSTS
