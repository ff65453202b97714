"""Is a remote on this machine there, or about to be? Decides whether a first connect on
loopback may give up at once instead of retrying for ``start_timeout``.

Holds :func:`nothing_listens`, :func:`starting_here` (the processes that could be
starting a remote on given ports) and :func:`answers` (is a remote there and alive: how a
lost remote is probed until it is back).

Connecting retries for ``start_timeout`` (30 s) because a remote may still be starting:
``make run`` installs first, a supervisor restarts a crashed one, a test starts one and
connects at once. On loopback a refused connection is certain news that nothing listens
*now*; it says nothing about a second from now. So an env gives up at once only when all
of these hold:

- it is the session's **first** connect (the env is being made): a remote it reached
  before is waited for as always, since it is likely being restarted;
- the host is **loopback** (elsewhere a refusal may be a firewall, a proxy or a
  container whose ports are published before its process listens);
- **every** port of the address refuses (one that accepts means something is there);
- **no process of this machine's network namespace could be starting it**: a
  ``universe-remote serve`` or ``replay`` whose ports are these (its command line's, or
  any of the free-floating defaults' 5900+i / 15900+i when it names none), or a
  ``make run`` (which installs, then serves on the defaults). One that names no ports
  floats only until it listens: it picks its pair once, so a process (or ``make run``'s
  child) already listening on 5900+i or 15900+i serves pair i (and the next ``--games``
  pairs) and no other; a mistyped 5901 beside ``make run``'s 5900 fails at once.

Anything else keeps the old behaviour: retry with backoff until ``start_timeout``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from rewarder.local_peer import listeners, socket_inodes
from vncdriver.addresses import is_loopback

from .address import RemoteAddress

#: Seconds a connect on loopback may take to be refused (it is refused at once; one that
#: neither accepts nor refuses in this time is left to the normal retries).
REFUSAL_TIMEOUT: Final = 0.5
#: ``serve``'s default ports and how far it floats them when they are taken
#: (envserver/cli.py: 5900+i and 15900+i for the first free i below this).
VNC_BASE: Final = 5900
REWARDER_BASE: Final = 15900
FLOAT_RANGE: Final = 100
#: The rewarder port is the VNC port plus this when only one of them is given.
REWARDER_OFFSET: Final = REWARDER_BASE - VNC_BASE
#: Sub-commands of ``universe-remote`` that start a remote.
SERVING_COMMANDS: Final = frozenset({"serve", "replay"})
#: A process caught in the middle of ``execve`` (its parent's ``Popen`` has returned, its
#: arguments are not yet in place) shows an empty command line for a moment, longer on a
#: loaded machine: it is read again this often, for at most this long.
EXEC_SETTLE_INTERVAL: Final = 0.01
EXEC_SETTLE_TIMEOUT: Final = 1.0
#: Seconds :func:`answers` waits for a VNC greeting: a live remote greets at once, a
#: stopped (SIGSTOP) or wedged one never; short, because a reconnect polls with it.
PROBE_TIMEOUT: Final = 0.5
#: The RFB greeting every VNC server sends first (``RFB 003.008\n``): 12 bytes.
_RFB_GREETING_BYTES: Final = 12


class NothingListens(ConnectionRefusedError):
    """Nothing listens at a loopback address and nothing here is starting it; the message
    says what to do."""


async def _refused(host: str, port: int) -> bool:
    """Whether a connect to ``host:port`` is refused (True), rather than accepted or slow."""
    try:
        async with asyncio.timeout(REFUSAL_TIMEOUT):
            _, writer = await asyncio.open_connection(host.strip("[]"), port)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    writer.transport.abort()
    return False


def _option(argv: Sequence[str], name: str) -> int | None:
    """The value of ``--name N`` or ``--name=N`` in ``argv`` (the last one), else None."""
    value = None
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith(name + "="):
            value = word.partition("=")[2]
    return int(value) if value is not None and value.isdigit() else None


def serving_ports(argv: Sequence[str]) -> set[int] | None:
    """The ports a command line could serve on, if it starts a remote (else None): a
    ``universe-remote serve``/``replay`` (its own ports, or the floating defaults), or a
    ``make run`` (the defaults)."""
    words = list(argv)
    if words and Path(words[0]).name == "make" and "run" in words[1:]:
        return _floating()
    for i, word in enumerate(words):
        if ("universe-remote" in Path(word).name or word == "universe_remote") and any(
            w in SERVING_COMMANDS for w in words[i + 1 : i + 3]
        ):
            vnc, rewarder = _option(words, "--vnc-port"), _option(words, "--rewarder-port")
            if vnc is None and rewarder is None:
                return _floating()
            if rewarder is None:
                rewarder = vnc + REWARDER_OFFSET if vnc else 0
            if vnc is None:
                vnc = rewarder - REWARDER_OFFSET if rewarder and rewarder > REWARDER_OFFSET else 0
            return {p for p in (vnc, rewarder) if p}  # 0: a free port, never a named one
    return None


def _floating() -> set[int]:
    return {base + i for base in (VNC_BASE, REWARDER_BASE) for i in range(FLOAT_RANGE)}


def _listening(proc: Path) -> dict[int, int]:
    """This namespace's listening TCP sockets: inode -> port (from /proc/net/tcp{,6})."""
    return {each.inode: each.port for each in listeners(proc=proc)}


def _family(entry: Path, proc: Path) -> list[Path]:
    """A process and its descendants (``make run``'s serve is its child)."""
    family, queue = [], [entry]
    while queue:
        member = queue.pop()
        family.append(member)
        try:
            tasks = list((member / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                queue += [proc / pid for pid in (task / "children").read_text().split()]
            except OSError:
                continue
    return family


def _listens_on(entry: Path, proc: Path, listening: dict[int, int]) -> set[int]:
    """The ports a process and its descendants listen on (what their own fds can show)."""
    return {listening[inode] for member in _family(entry, proc)
            for inode in socket_inodes(member / "fd") if inode in listening}


def settled_ports(argv: Sequence[str], listens_on: Iterable[int]) -> set[int] | None:
    """The ports a floating serve (or ``make run``) listening on ``listens_on`` can still
    serve on: the pairs it took (``--games K``: K pairs from there), or None while it
    listens on none of the floating ports (it may still take any)."""
    taken = {port - base for port in listens_on for base in (VNC_BASE, REWARDER_BASE)
             if 0 <= port - base < FLOAT_RANGE}
    if not taken:
        return None
    games = _option(argv, "--games") or 1
    return {base + i + game for base in (VNC_BASE, REWARDER_BASE) for i in taken
            for game in range(games)}


def _argv(entry: Path) -> list[str]:
    """A process's command line, waiting out ``execve``'s empty moment (a process with an
    executable and no arguments yet; kernel threads and zombies have no executable)."""
    deadline = time.monotonic() + EXEC_SETTLE_TIMEOUT
    while True:
        raw = (entry / "cmdline").read_bytes()
        if raw or time.monotonic() > deadline:
            return raw.decode(errors="replace").split("\0")[:-1]
        try:
            os.readlink(entry / "exe")
        except OSError:  # a kernel thread, a zombie, or not ours to see: no command line
            return []
        time.sleep(EXEC_SETTLE_INTERVAL)


def starting_here(ports: Iterable[int], proc: Path = Path("/proc")) -> list[str]:
    """Processes in this network namespace that could be serving, or starting to serve,
    one of ``ports`` (``pid: command``)."""
    wanted, floating = set(ports), _floating()
    listening: dict[int, int] | None = None
    try:
        own_net = os.readlink(proc / "self" / "ns" / "net")
    except OSError:
        own_net = None
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if own_net is not None and os.readlink(entry / "ns" / "net") != own_net:
                continue  # another namespace's loopback is not ours
            argv = _argv(entry)
        except OSError:  # gone meanwhile, or not ours to read
            continue
        served = serving_ports(argv)
        if served == floating and served & wanted:  # unless it has taken its pair
            if listening is None:
                listening = _listening(proc)
            served = settled_ports(argv, _listens_on(entry, proc, listening)) or served
        if served is not None and served & wanted:
            found.append(f"{entry.name}: {' '.join(argv)[:200]}")
    return found


async def nothing_listens(address: RemoteAddress) -> str | None:
    """Why connecting to ``address`` cannot succeed soon (module docstring), else None."""
    host = address.host
    ports = [p for p in (address.vnc_port, address.rewarder_port) if p is not None]
    if not ports or not is_loopback(host):
        return None
    for port in ports:
        if not await _refused(host, port):
            return None
    if await asyncio.to_thread(starting_here, ports):
        return None
    named = " and ".join(str(p) for p in ports)
    return (
        f"nothing listens on {host} port{'s' if len(ports) > 1 else ''} {named} (connection "
        "refused), and no universe-remote serve or make run on this machine is starting a "
        "remote there: start it first (make run, or universe-remote serve ENV_ID), or check "
        "the ports against the 'agent address' its banner printed"
    )


async def answers(address: RemoteAddress, timeout: float = PROBE_TIMEOUT) -> bool:
    """True if the remote at ``address`` accepts a connection and is alive: its VNC
    server greets within ``timeout`` (a stopped process accepts into its backlog but
    never greets), or, without VNC, its rewarder port accepts."""
    port = address.vnc_port if address.vnc_port is not None else address.rewarder_port
    if port is None:
        return False
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(address.host, port)
            if address.vnc_port is not None:
                greeting = await reader.readexactly(_RFB_GREETING_BYTES)
                return greeting.startswith(b"RFB ")
            return True
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return False
    finally:
        if writer is not None:
            writer.transport.abort()  # no close handshake to wait for on a dead peer
