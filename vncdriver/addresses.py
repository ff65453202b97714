"""Host addresses: VNC's address forms, and which hosts only this machine can reach.

Holds :func:`parse_address` (``host:display``, ``host:port``, ``host::port``, as VNC
viewers write them) and :func:`is_loopback`. Loopback decides defaults on both sides: a
remote bound only to loopback may run without a password, and an agent on loopback asks
for Raw (cheapest there) over Tight.
"""

from __future__ import annotations

import ipaddress
from typing import Final

#: VNC's base port: display N listens on 5900 + N.
DEFAULT_PORT: Final = 5900
#: ``host:N`` below this is a display number, at or above it a port (as vncviewer reads it).
DISPLAY_LIMIT: Final = 100


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 (bracketed or with a zone) and the name ``localhost``."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0]).is_loopback
    except ValueError:
        return False


def parse_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of a VNC address: ``host:display``, ``host:port`` or ``host::port``.

    ``host:N`` is display N (port 5900 + N) when N < 100 and port N otherwise; ``host::N``
    is port N; a missing host is 127.0.0.1 and a missing display is 0. IPv6 hosts are
    written in brackets: ``[::1]:1``.
    """
    text = address.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"VNC address {address!r}: missing ']' after the IPv6 host")
        host, rest = text[1:end], text[end + 1 :]
    else:
        host, sep, rest = text.partition(":")
        rest = sep + rest
    if "://" in text or "/" in rest:
        raise ValueError(
            f"VNC address {address!r} must be host:display, host:port or host::port "
            "(such as localhost:1, 127.0.0.1:5901 or example.com::5901), not a URL"
        )
    host = host or "127.0.0.1"
    if not rest:
        return host, DEFAULT_PORT
    explicit = rest.startswith("::")
    number = rest[2:] if explicit else rest[1:]
    if not rest.startswith(":") or not number.isdigit():
        raise ValueError(
            f"VNC address {address!r}: {number or rest!r} is not a display or port number; "
            "write host:display, host:port or host::port (IPv6 hosts in brackets: [::1]:1)"
        )
    value = int(number)
    port = value if explicit or value >= DISPLAY_LIMIT else DEFAULT_PORT + value
    if not 0 < port < 65536:
        raise ValueError(f"VNC address {address!r}: port {port} is outside 1..65535")
    return host, port
