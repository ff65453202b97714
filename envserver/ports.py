"""Which ports ``serve`` takes when it is not told: Universe's pairs, the next free one.

Holds :func:`choose_ports` and :func:`busy_port_advice`. A remote serves VNC on 5900+i and
the rewarder on 15900+i (Universe's convention, which ``vnc://host:5901+15901`` follows).
``serve`` without ``--vnc-port``/``--rewarder-port`` takes the first such pair whose
ports are both free, as Jupyter moves past a taken 8888, so a README command run beside
``make run`` (which holds 5900/15900) serves on 5901/15901 instead of failing; it says so
in its banner, whose "agent address" is the one to use. Given one of the two ports, the
other follows it (``--vnc-port 5901`` alone means rewarder 15901). Ports given are never
moved: a taken one is an error that names it. ``--http-port`` given without a number
likewise takes the first free port from 8900, and ``--mcp-port`` the first from 8800.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from typing import Final

#: Universe's ports of remote 0; remote i serves on these plus i.
VNC_BASE: Final = 5900
REWARDER_BASE: Final = 15900
#: The rewarder port of a remote is its VNC port plus this.
REWARDER_OFFSET: Final = REWARDER_BASE - VNC_BASE
#: The browser viewer's port (``--http-port`` without a number starts looking here, and
#: ``Viewer.start``'s default): 8900 next to 5900 and 15900, so remote *i* can use
#: 5900+i, 15900+i and 8900+i.
HTTP_BASE: Final = 8900
#: The MCP port ``--mcp-port`` without a number starts looking at (its ports stay below
#: HTTP_BASE's: 8800+i for remote i).
MCP_BASE: Final = 8800
#: How many pairs (or viewer ports) past the first ``serve`` tries: VNC displays :0-:99.
FLOAT_RANGE: Final = 100
#: The value argparse gives ``--http-port`` and ``--mcp-port`` when they come without a number.
AUTO: Final = -1
#: Ports above this do not exist.
MAX_PORT: Final = 65535


@dataclass(frozen=True, slots=True)
class Ports:
    """The ports to bind, and a line for the banner when they are not the ones asked for."""

    vnc: int
    rewarder: int
    http: int | None
    note: str | None = None
    mcp: int | None = None


def is_free(host: str, port: int) -> bool:
    """Whether ``port`` can be bound on ``host`` now (as the servers bind: SO_REUSEADDR)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise  # a bad host: the servers' bind says what is wrong with it
    return True


def _first_free(host: str, base: int) -> int:
    """The first free port from ``base`` (``base`` itself when all are taken: its bind
    fails naming it)."""
    return next((base + i for i in range(FLOAT_RANGE) if is_free(host, base + i)), base)


def choose_ports(
    host: str, vnc: int | None, rewarder: int | None, http: int | None, mcp: int | None = None,
) -> Ports:
    """The ports ``serve`` binds (module docstring): None means "not given"; ``http`` and
    ``mcp`` are :data:`AUTO` for ``--http-port`` / ``--mcp-port`` without a number, None
    for no viewer / MCP port."""
    note = None
    if vnc is None and rewarder is None:
        for i in range(FLOAT_RANGE):
            if is_free(host, VNC_BASE + i) and is_free(host, REWARDER_BASE + i):
                vnc, rewarder = VNC_BASE + i, REWARDER_BASE + i
                if i:
                    note = (f"{VNC_BASE}/{REWARDER_BASE} are taken (another remote, `make run`'s?): "
                            f"serving on the next free pair, {vnc}/{rewarder}")
                break
        else:  # all taken: bind the defaults, and fail naming them
            vnc, rewarder = VNC_BASE, REWARDER_BASE
    elif rewarder is None:
        assert vnc is not None
        rewarder = vnc + REWARDER_OFFSET if vnc and vnc + REWARDER_OFFSET <= MAX_PORT else 0
    elif vnc is None:
        vnc = rewarder - REWARDER_OFFSET if rewarder > REWARDER_OFFSET else 0
    if http == AUTO:
        http = _first_free(host, HTTP_BASE)
    if mcp == AUTO:
        mcp = _first_free(host, MCP_BASE)
    return Ports(vnc, rewarder, http, note, mcp)


def busy_port_advice(host: str, ports: Ports) -> str:
    """What to do when a port ``serve`` was given is taken: which one, and for each what
    to pass instead (the next free VNC/rewarder pair; ``--http-port`` or ``--mcp-port``
    alone, which float)."""
    named = {"VNC": ports.vnc, "rewarder": ports.rewarder, "viewer": ports.http, "MCP": ports.mcp}
    taken = [name for name, port in named.items() if port and not is_free(host, port)]
    advice = []
    if "VNC" in taken or "rewarder" in taken or not taken:
        free = next((i for i in range(1, FLOAT_RANGE)
                     if is_free(host, VNC_BASE + i) and is_free(host, REWARDER_BASE + i)), None)
        advice.append(f"pass --vnc-port {VNC_BASE + free} (the rewarder port follows: "
                      f"{REWARDER_BASE + free}), or leave both out and serve takes the next free pair"
                      if free is not None else "pick free ports with --vnc-port/--rewarder-port")
    if "viewer" in taken:
        advice.append(f"pass --http-port without a number (the first free port from {HTTP_BASE})")
    if "MCP" in taken:
        advice.append(f"pass --mcp-port without a number (the first free port from {MCP_BASE})")
    ports_taken = ", ".join(f"{name} {named[name]}" for name in taken)
    what = f"port{'s' if len(taken) > 1 else ''} {ports_taken} taken" if taken else "a port taken"
    return f"{what} (another remote, `make run`'s?): {'; '.join(advice)}"
