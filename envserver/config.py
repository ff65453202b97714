"""What ``serve`` and ``replay`` were asked to do, built once from the command line.

Holds :class:`ServeConfig`, :func:`exposure_refusal` and the process's exit statuses.
:mod:`envserver.cli` parses the command line into one frozen :class:`ServeConfig`;
:func:`envserver.games.run` serves it (one game or ``--games K``), and the banner
(:mod:`envserver.banner`) reads it. Nothing here binds or imports a server: building
and checking a configuration is cheap, so ``serve``'s refusals come before anything
listens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from rewarder.auth import PASSWORD_ENV
from rewarder.protocol import MAX_FPS, MAX_GAMES_PER_PROCESS, MIN_FPS, REALTIME
from rewarder.tls import CERT_ENV, KEY_ENV
from vncdriver.addresses import is_loopback

#: Exit status of ``serve`` when it cannot listen (a port taken, a bad host).
EXIT_CANNOT_LISTEN: Final = 1
#: Exit status of ``serve`` refusing what it was asked (a bad option, an unknown env, a
#: bad certificate), before anything binds.
EXIT_REFUSED: Final = 2
#: Exit status of ``serve`` when its runtime failed past recovery (every game's, with
#: ``--games``): a supervisor (Docker, Ray, systemd) restarts it instead of a dead game
#: being served.
EXIT_RUNTIME_FAILED: Final = 3
#: What ``--max-viewers`` is when not given (vncdriver.server.MAX_VIEWERS; not imported:
#: building a configuration stays cheap).
DEFAULT_MAX_VIEWERS: Final = 128


def exposure_refusal(host: str, *, password: str | None, tls: bool, insecure: bool) -> str | None:
    """Why ``serve`` must not start on ``host``, else None (docs/security.md).

    Off loopback, a password is always needed (TLS hides traffic, it does not say who may
    drive the remote), and so is TLS unless ``insecure`` says the network is private.
    """
    if is_loopback(host):
        return None
    if not password:
        return (
            f"refusing to serve on {host} without a password: anyone who can reach it could "
            f"control the remote. Pass --password PW or set ${PASSWORD_ENV}, or bind "
            "--host 127.0.0.1."
        )
    if not tls and not insecure:
        return (
            f"refusing to serve on {host} in clear: pixels, input, rewards and the password "
            f"would cross the network unencrypted. Pass --tls-cert CERT --tls-key KEY (or set "
            f"${CERT_ENV} and ${KEY_ENV}; docs/security.md), or --insecure if only trusted "
            "machines can reach it (a private network, a container whose ports are published "
            "on 127.0.0.1)."
        )
    return None


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """One ``serve`` (or ``replay``) process's configuration: every option as given (None:
    not given), so the port choice (:mod:`envserver.ports`) can tell "asked for" from
    "default"."""

    #: The env id to serve; None for ``replay``, which serves :attr:`recording`.
    env_id: str | None
    recording: str | None = None
    #: ``replay --episode K``: only that episode.
    episode: int | None = None
    host: str = "127.0.0.1"
    vnc_port: int | None = None
    rewarder_port: int | None = None
    #: ``--http-port``: None for no viewer, :data:`envserver.ports.AUTO` for the first free.
    http_port: int | None = None
    dm_env_rpc_port: int | None = None
    openenv_port: int | None = None
    #: ``--mcp-port``: the MCP endpoint for computer-use agents (docs/computer-use.md);
    #: :data:`envserver.ports.AUTO` for the first free from 8800.
    mcp_port: int | None = None
    #: ``--mcp-lease``: seconds an MCP session outlives its host (envserver.computer_use.leases).
    mcp_lease: float = 30.0
    #: ``--games K``, and ``--game-ports``' (VNC, rewarder) pairs when listed.
    games: int = 1
    game_ports: tuple[tuple[int, int], ...] = ()
    password: str | None = None
    view_only_password: str | None = None
    #: ``--player-password N=PW``, in the order given.
    player_passwords: tuple[tuple[int, str], ...] = ()
    control_password: str | None = None
    fps: float | None = None
    mode: str = REALTIME
    scale: int = 1
    #: ``--option KEY=VALUE``, in the order given.
    options: tuple[tuple[str, Any], ...] = ()
    max_viewers: int = DEFAULT_MAX_VIEWERS
    allow_origins: tuple[str, ...] = ()
    tls_cert: str | None = None
    tls_key: str | None = None
    insecure: bool = False
    #: ``--record DIR``.
    record: str | None = None
    #: ``--cpus`` with ``--unpin-when-shared``: the CPUs pinned to, and the wider set to
    #: run on once another program shares them (:func:`envserver.cpus.unpin_when_shared`).
    pinned: tuple[frozenset[int], frozenset[int]] | None = None

    @property
    def game_count(self) -> int:
        """How many games to serve (``--games``, or ``--game-ports``' count)."""
        return len(self.game_ports) if self.game_ports else self.games

    @property
    def several(self) -> bool:
        """Whether the process serves as several games: more than one, or ports listed
        (their banner and their ``--record`` directories are per game)."""
        return self.game_count > 1 or bool(self.game_ports)

    @property
    def runtime_options(self) -> dict[str, Any] | None:
        """The runtime's keyword arguments: ``--option``s and ``--scale``."""
        options = dict(self.options)
        if self.scale != 1:
            options["scale"] = self.scale
        return options or None

    def refusal(self) -> str | None:
        """Why this cannot be served as given (what was wrong and what to pass), else
        None: checked before anything binds."""
        if self.fps is not None and not MIN_FPS <= self.fps <= MAX_FPS:
            return f"--fps must be in [{MIN_FPS:g}, {MAX_FPS:g}]"
        if (self.tls_cert is None) != (self.tls_key is None):
            given, missing = (("--tls-cert", "--tls-key") if self.tls_key is None
                              else ("--tls-key", "--tls-cert"))
            return f"{given} needs {missing} too (the certificate and its key)"
        if self.control_password and self.http_port is None:
            return ("--control-password opens the browser viewer with input: add --http-port "
                    "(VNC viewers play with --password or --player-password)")
        refusal = exposure_refusal(self.host, password=self.password,
                                   tls=self.tls_cert is not None, insecure=self.insecure)
        if refusal is not None:
            return refusal
        return self._games_refusal()

    def _games_refusal(self) -> str | None:
        if not 1 <= self.games <= MAX_GAMES_PER_PROCESS:
            return f"--games must be 1..{MAX_GAMES_PER_PROCESS} (MAX_GAMES_PER_PROCESS), not {self.games}"
        listed = self.game_ports
        if listed:
            if self.games not in (1, len(listed)):
                return f"--games {self.games} but --game-ports names {len(listed)} games: give one of them"
            if self.vnc_port is not None or self.rewarder_port is not None:
                return "--game-ports names every game's ports: leave out --vnc-port/--rewarder-port"
            if len(listed) > MAX_GAMES_PER_PROCESS:
                return (f"--game-ports names {len(listed)} games; at most {MAX_GAMES_PER_PROCESS} "
                        "(MAX_GAMES_PER_PROCESS)")
        return None
