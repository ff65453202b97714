"""Host addresses: which ones only this machine can reach.

Loopback decides defaults on both sides: a remote bound only to loopback may run
without a password, and an agent on loopback asks for Raw (cheapest there) over Tight.
"""

from __future__ import annotations

import ipaddress


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
