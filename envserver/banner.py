"""What ``serve`` and ``replay`` print once they listen: every port with its scheme, the
address to give an agent, and what this remote is doing (recording, replaying, seating
players).

Holds :func:`banner`, :func:`connect_hosts`, :func:`command` and :func:`in_container`.
Every address printed is one a person can connect to: a wildcard bind (``--host
0.0.0.0``) is shown as 127.0.0.1, with the machine's own addresses for other machines,
or, in a container, a note that the ports the host publishes are the ones to use. Every
command printed is one a new shell finds (``.venv/bin/universe-remote`` when the venv is
not active), and a password-protected port says how to give the password.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rewarder.tls import CA_ENV

if TYPE_CHECKING:
    from .config import ServeConfig

#: Binds that mean "every interface": nobody can connect to them as written.
WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::", "[::]"})
#: A documentation address (TEST-NET-1): a UDP socket "connected" to it names the
#: interface the machine would use, without a packet being sent.
_ROUTE_PROBE: Final = ("192.0.2.1", 9)
#: Files a container engine leaves in its containers (Docker, podman).
CONTAINER_MARKERS: Final = ("/.dockerenv", "/run/.containerenv")
#: Screens no side of which is longer than this are small enough that the banner names
#: ``universe-remote watch`` (which zooms) first: TigerVNC's viewer shows them at 1x.
ZOOM_BELOW: Final = 320
#: Episodes a replay banner lists one by one.
LISTED_EPISODES: Final = 4


def in_container() -> bool:
    """Whether this process runs in a Docker or podman container."""
    return any(os.path.exists(p) for p in CONTAINER_MARKERS) or bool(os.environ.get("container"))


def connect_hosts(host: str) -> tuple[str, list[str]]:
    """The host to print in addresses, and other names for it from elsewhere: ``host``
    itself unless it is a wildcard, else 127.0.0.1 and this machine's outward address
    and name (when it has them)."""
    if host not in WILDCARD_HOSTS:
        return host, []
    others = []
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(_ROUTE_PROBE)
            address = probe.getsockname()[0]
        if not address.startswith("127."):
            others.append(address)
    except OSError:  # no route off this machine (a namespace with only lo)
        pass
    name = socket.gethostname()
    if name and name != "localhost":
        others.append(name)
    return "127.0.0.1", others


def command(cwd: Path | None = None) -> str:
    """How a shell here runs universe-remote: the bare name when it is on PATH, else the
    script beside this Python (``.venv/bin/universe-remote``, relative to ``cwd`` when
    under it: ``make run`` serves from a venv no shell has activated), else ``python -m``."""
    if shutil.which("universe-remote") is not None:
        return "universe-remote"
    script = Path(sys.executable).parent / "universe-remote"
    if not os.access(script, os.X_OK):
        return f"{sys.executable} -m universe_remote"
    try:
        return str(script.relative_to(cwd or Path.cwd()))
    except ValueError:
        return str(script)


def _first_line(remote: Any, tls: bool) -> str:
    runtime = remote.runtime
    size = f"{runtime.width}x{runtime.height} at {remote.fps:g} fps"
    with_tls = f", TLS with {remote.tls.cert}" if tls else ""
    episodes = getattr(runtime, "episodes", None)
    recording = getattr(runtime, "recording", None)
    if not episodes or recording is None:
        return f"universe-remote: serving {runtime.env_id} ({size}){with_tls}"
    path = recording.path
    if len(episodes) == 1:
        (episode,) = episodes
        ended = "ended by the game" if episode.done else f"cut short ({episode.status})"
        return (f"universe-remote: replaying episode {episode.number} of {path} ({runtime.env_id}, "
                f"{size}): {len(episode)} steps, {len(episode) / episode.fps:.1f} s, return "
                f"{episode.total_reward:+g}, {ended}{with_tls}")
    listed = ", ".join(f"{e.number} ({len(e)} steps)" for e in episodes[:LISTED_EPISODES])
    more = f" and {len(episodes) - LISTED_EPISODES} more" if len(episodes) > LISTED_EPISODES else ""
    return (f"universe-remote: replaying {len(episodes)} episodes of {path} in turn "
            f"({runtime.env_id}, {size}): episodes {listed}{more}; --episode K plays one{with_tls}")


def _players(config: ServeConfig, remote: Any) -> list[str]:
    """Who holds which seat of a multi-player remote, and how each joins."""
    players = int(getattr(remote.runtime, "players", 1) or 1)
    if players < 2:
        return []
    seated = dict(config.player_passwords)
    lines = [f"  players   {players} seats; agents: RemoteParallelEnv(address), or the header "
             "openai-player: N (docs/multiagent.md)"]
    for player in range(players):
        if player == 0:
            how = ("VNC viewers with --password, agents without openai-player"
                   if config.password else "VNC viewers (no password), agents without openai-player")
        elif player in seated:
            how = (f"VNC viewers with the password of --player-password {player}=..., agents "
                   f"with openai-player: {player}")
        else:
            how = (f"agents with openai-player: {player}; a person in a VNC viewer needs "
                   f"--player-password {player}=PW")
        lines.append(f"            player {player}: {how}")
    return lines


def banner(config: ServeConfig, remote: Any, openenv: Any = None, note: str | None = None,
           mcp: Any = None) -> str:
    """The banner (module docstring); ``note``: why the ports are not the ones asked for."""
    tls = remote.tls is not None
    host, elsewhere = connect_hosts(config.host)
    rewarder_port, vnc_port = remote.rewarder.port, remote.vnc_port
    secret = "?password=<password>" if config.password else ""
    display = vnc_port - 5900 if 5900 <= vnc_port < 6000 else None
    target = f"{host}:{display}" if display is not None else f"{host}::{vnc_port}"
    if tls:  # TigerVNC's names for VeNCrypt with X.509 certificates
        kind = "X509Vnc" if config.password else "X509None"
        watch = f"vncviewer -SecurityTypes {kind} -X509CA CA.pem {target}"
    elif max(remote.runtime.width, remote.runtime.height) <= ZOOM_BELOW:
        asks = " --password <password>" if config.password else ""  # vncviewer asks by itself
        watch = f"{command()} watch {host}::{vnc_port}{asks}   (zoomed; vncviewer {target} shows 1x)"
    else:
        watch = f"vncviewer {target}"
    lines = [
        _first_line(remote, tls),
        f"  VNC       {host}:{vnc_port}{'  (VeNCrypt)' if tls else ''}   watch:  {watch}",
        f"  rewarder  {'wss' if tls else 'ws'}://{host}:{rewarder_port}   "
        "(JSON over WebSocket, Universe v0)",
    ]
    viewer = remote.viewer
    if viewer is not None:
        how = ("in a browser; view only, but ?password= of --control-password or a player's "
               "password plays" if getattr(viewer, "controllable", False) else "view only, in a browser")
        if config.password:
            how += "; the browser asks for the --password (any user name), or add ?password=..."
        lines.append(f"  viewer    {'https' if tls else 'http'}://{host}:{viewer.port}/viewer/   ({how})")
    if remote.dm_env_rpc is not None:
        lines.append(f"  dm_env_rpc  {host}:{remote.dm_env_rpc.port}   "
                     f"(gRPC{' with TLS' if tls else ''}; docs/dm_env_rpc.md)")
    if openenv is not None:
        lines.append(f"  openenv   {'https' if tls else 'http'}://{host}:{openenv.port}   "
                     "(OpenEnv HTTP + /ws: GenericEnvClient(base_url=...); docs/openenv.md)")
    if mcp is not None:
        bearer = "; header Authorization: Bearer <the --password>" if config.password else ""
        lines.append(f"  mcp       {'https' if tls else 'http'}://{host}:{mcp.port}/mcp   "
                     f"(computer-use tools, streamable HTTP{bearer}; docs/computer-use.md)")
    lines += _players(config, remote)
    record = config.record
    if record is not None:
        where = Path(record).resolve()
        lines.append(f"  recording every episode to {where}/ (replay: {command()} replay {record}; "
                     "the property 'recording' 1/0 pauses it)")
    lines.append(f"  agent address  vnc{'+tls' if tls else ''}://{host}:{vnc_port}+{rewarder_port}{secret}")
    if config.host in WILDCARD_HOSTS:
        if in_container():
            lines.append(f"  in a container: from outside, connect to the ports the host publishes "
                         f"(docker run -p 127.0.0.1:{vnc_port}:{vnc_port} -p 127.0.0.1:"
                         f"{rewarder_port}:{rewarder_port} ...), at the host's address")
        elif elsewhere:
            lines.append(f"  listening on every interface ({config.host or '0.0.0.0'}): from other "
                         f"machines use {' or '.join(elsewhere)} in place of {host}")
    if note:
        lines.append(f"  ({note})")
    if tls:
        lines.append(f"  CA.pem: the CA that issued the certificate (a self-signed one: the "
                     f"certificate itself); agents take it as tls_ca= or ${CA_ENV}")
    lines.append("  Ctrl-C to stop.")
    return "\n".join(lines)
