"""The remote's commands: ``serve`` (run an environment on its two ports), ``replay``
(serve a recording), ``health`` (is a remote answering?) and ``list`` (the environment ids
this install serves).

This module only parses: ``serve`` and ``replay`` become one frozen
:class:`~envserver.config.ServeConfig` (:func:`serve_config`), checked
(:meth:`ServeConfig.refusal <envserver.config.ServeConfig.refusal>`) and handed to
:func:`envserver.games.run`, the one serve path. Heavy imports (the runtimes, the
servers) happen inside the commands, so building the parser costs nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from dataclasses import replace
from typing import Any, Final

from rewarder.auth import PASSWORD_ENV, PASSWORD_FILE_ENV, VIEW_ONLY_PASSWORD_ENV
from rewarder.tls import CA_ENV, CERT_ENV, KEY_ENV, TLSSetupError, client_context, pinned_context, server_tls

from .config import (
    DEFAULT_MAX_VIEWERS,
    EXIT_CANNOT_LISTEN,
    EXIT_REFUSED,
    EXIT_RUNTIME_FAILED,
    ServeConfig,
)
from .cpus import parse_cpus, pin
from .restores import VERIFY_ENV

#: Seconds ``universe-remote health`` waits for the rewarder's describe.
HEALTH_TIMEOUT: Final = 5.0

log = logging.getLogger("universe-remote")


def _cmd_list(args: argparse.Namespace) -> int:
    from runtimes import registry

    # The catalogue, the ids every "prints all N" counts; one this machine cannot serve
    # (its X program absent) is listed, saying so.
    served = set(registry.env_ids())
    for env_id in sorted(set(registry.catalogue()) | served):
        if env_id in served:
            description = getattr(registry.lookup(env_id), "description", "")
        else:
            family = env_id.split(".", 1)[0] + "."
            what = "its family, below," if registry.missing_hint(family) else "its program"
            description = f"(not served on this machine: {what} is not installed)"
        print(f"{env_id:32} {description}".rstrip())
    for family in sorted(registry.FAMILIES):
        if why := registry.missing_hint(f"{family}."):
            print(f"({family}.* not available: {why})", file=sys.stderr)
    return 0


def _cpus(text: str) -> frozenset[int]:
    """``--cpus``: argparse's error names the option and what was wrong."""
    try:
        return parse_cpus(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _runtime_option(text: str) -> tuple[str, Any]:
    """``--option repeat_action_probability=0.25`` -> ("repeat_action_probability", 0.25):
    true/false are booleans, numbers are ints or floats, anything else a string."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(
            f"{text!r}: write KEY=VALUE, a keyword of the runtime and its value "
            "(repeat_action_probability=0.25)"
        )
    value = value.strip()
    if value.lower() in ("true", "false"):
        return key, value.lower() == "true"
    for kind in (int, float):
        try:
            return key, kind(value)
        except ValueError:
            pass
    return key, value


def _game_ports(text: str) -> list[tuple[int, int]]:
    """``--game-ports 5900+15900,5901+15901`` -> [(5900, 15900), (5901, 15901)]."""
    pairs = []
    for item in text.split(","):
        vnc, sep, rewarder = item.strip().partition("+")
        if not sep or not vnc.isdigit() or not rewarder.isdigit():
            raise argparse.ArgumentTypeError(
                f"{text!r}: write each game's VNC+REWARDER ports, comma separated "
                "(5900+15900,5901+15901)"
            )
        pairs.append((int(vnc), int(rewarder)))
    return pairs


def _player_password(text: str) -> tuple[int, str]:
    """``--player-password 1=secret`` -> (1, "secret")."""
    player, sep, password = text.partition("=")
    if not sep or not player.strip().isdigit() or not password:
        raise argparse.ArgumentTypeError(
            f"{text!r}: write N=PASSWORD, the player's number and its VNC password (1=right-pw)"
        )
    return int(player), password


def serve_config(args: argparse.Namespace) -> ServeConfig:
    """The :class:`~envserver.config.ServeConfig` of a parsed ``serve`` or ``replay``
    command line: the one place the parser's names meet the server's."""
    replay = args.command == "replay"
    if getattr(args, "verify_restores", False):  # read by every Remote this process makes
        os.environ[VERIFY_ENV] = "1"
    return ServeConfig(
        env_id=None if replay else args.env_id,
        recording=args.recording if replay else None,
        episode=args.episode if replay else None,
        host=args.host,
        vnc_port=args.vnc_port,
        rewarder_port=args.rewarder_port,
        http_port=args.http_port,
        dm_env_rpc_port=args.dm_env_rpc_port,
        openenv_port=args.openenv_port,
        mcp_port=args.mcp_port,
        mcp_lease=args.mcp_lease,
        games=args.games,
        game_ports=tuple(args.game_ports or ()),
        password=args.password,
        view_only_password=args.view_only_password,
        player_passwords=tuple(args.player_password or ()),
        control_password=args.control_password,
        fps=args.fps,
        mode=args.mode,
        scale=args.scale,
        options=tuple(args.option or ()),
        max_viewers=args.max_viewers,
        allow_origins=tuple(args.allow_origin),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        insecure=args.insecure,
        record=None if replay else args.record,
    )


def _cmd_serve(args: argparse.Namespace) -> int:
    from . import games

    if args.unpin_when_shared and args.cpus is None:
        print("universe-remote: --unpin-when-shared lets go of the CPUs --cpus pinned this "
              "process to: give --cpus too, or leave it out", file=sys.stderr)
        return EXIT_REFUSED
    config = serve_config(args)
    if args.cpus is not None:  # first: every thread started later inherits it
        wider = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        try:
            pin(args.cpus)
        except ValueError as exc:
            print(f"universe-remote: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        log.info("running on CPU %s only (--cpus)", ",".join(map(str, sorted(args.cpus))))
        if args.unpin_when_shared and wider is not None and wider != args.cpus:
            config = replace(config, pinned=(args.cpus, wider))
    refusal = config.refusal()
    if refusal is not None:
        print(f"universe-remote: {refusal}", file=sys.stderr)
        return EXIT_REFUSED
    if config.password and len(config.password) > 8:
        log.warning("VNC uses only the first 8 characters of the password")
    try:  # before anything binds: a bad certificate is the operator's to fix
        cert, key = config.tls_cert, config.tls_key  # both or neither: refusal() checked
        tls = server_tls(cert, key) if cert is not None and key is not None else None
    except TLSSetupError as exc:
        print(f"universe-remote: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return games.run(config, tls)


async def _health(args: argparse.Namespace) -> int:
    from rewarder.client import RewarderClient
    from rewarder.errors import RewarderError

    try:
        if args.tls or args.tls_ca:
            tls = client_context(args.tls_ca)
        elif os.environ.get(CERT_ENV):  # checking our own remote (Docker's HEALTHCHECK)
            tls = pinned_context(os.environ[CERT_ENV])
        else:
            tls = None
    except TLSSetupError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    client = RewarderClient(
        f"{args.host}:{args.rewarder_port}",
        password=args.password,
        observer=True,
        start_timeout=args.timeout,
        reconnect=False,
        calibration_pings=0,
        tls=tls,
    )
    try:
        async with client:
            describe = await client.wait_for_state("running", timeout=args.timeout)
    except (RewarderError, TimeoutError, OSError) as exc:
        message = str(exc)
        if "needs a password" in message or "wrong password" in message:
            where = "wrong" if "wrong password" in message else "missing"
            message = (
                f"the remote at {args.host}:{args.rewarder_port} refused the password ({where}): "
                f"pass --password PW or set ${PASSWORD_ENV}"
            )
        print(f"unhealthy: {message.replace('pass tls_ca=', 'pass --tls-ca ')}", file=sys.stderr)
        return 1
    print(f"healthy: {describe.env_id} episode {describe.episode_id} ({describe.env_state})")
    return 0


def _cmd_health(args: argparse.Namespace) -> int:
    return asyncio.run(_health(args))


def add_commands(sub: Any) -> None:
    """Add ``serve``, ``health`` and ``list`` to the ``universe-remote`` subparsers."""
    # serve's options, which replay takes too (argparse's parents)
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    shared.add_argument(
        "--rewarder-port", type=int, default=None,
        help="default: the VNC port + 10000 (15900 with 5900); 0 picks a free one",
    )
    shared.add_argument(
        "--vnc-port", type=int, default=None,
        help="default: the rewarder port - 10000, or with neither given 5900 and 15900, or "
        "the next free pair 5900+i / 15900+i when those are taken (the banner says which); "
        "0 picks a free one",
    )
    shared.add_argument(
        "--games", type=int, default=1, metavar="K",
        help="serve K games in this one process, one game loop for all (each its own ports: "
        "the VNC and rewarder ports + i for game i, 0 free ones; its own episodes, seats and "
        "faults); a crash of the process ends them all (default 1)",
    )
    shared.add_argument(
        "--cpus", type=_cpus, default=None, metavar="LIST",
        help="run this process on these CPUs only (taskset's list: 0-3,6). start_local pins "
        "each lockstep process of a vector to a core of its own so; default: any CPU",
    )
    shared.add_argument(
        "--unpin-when-shared", action="store_true",
        help="with --cpus: once this process waits for those CPUs while other work runs there "
        "(30%% of the time it runs or more, two looks a second apart), run on every CPU it "
        "could before, for good: a pinned process beside a busy program gets half its core. "
        "start_local's default pinning adds it",
    )
    shared.add_argument(
        "--game-ports", type=_game_ports, default=None, metavar="V+R,...",
        help="each game's VNC+rewarder ports (5900+15900,5901+15901): as many games as pairs",
    )
    shared.add_argument(
        "--password",
        default=None,
        help=f"password for both channels (default: ${PASSWORD_ENV}, or the file "
        f"${PASSWORD_FILE_ENV} names); required when --host is not loopback, and so is "
        "--tls-cert (or --insecure)",
    )
    shared.add_argument(
        "--view-only-password",
        default=os.environ.get(VIEW_ONLY_PASSWORD_ENV) or None,
        help=f"VNC password for viewers whose input is ignored (default: ${VIEW_ONLY_PASSWORD_ENV})",
    )
    shared.add_argument(
        "--player-password", type=_player_password, action="append", metavar="N=PW",
        help="multi-player envs (builtin.Duel-v0): VNC viewers giving PW drive player N "
        "(repeat for each player; --password drives player 0); docs/multiagent.md",
    )
    shared.add_argument(
        "--fps", type=float, default=None, help="frames per second (default: the runtime's, 60)"
    )
    shared.add_argument(
        "--mode",
        choices=["realtime", "lockstep"],
        default="realtime",
        help="realtime: run at --fps whatever agents do (Universe); lockstep: advance only "
        "when the active client sends v0.env.step (default realtime; a reset may switch)",
    )
    shared.add_argument(
        "--scale", type=int, default=1, help="integer zoom of the screen for viewers (Atari)"
    )
    shared.add_argument(
        "--option", type=_runtime_option, action="append", metavar="KEY=VALUE",
        help="a keyword argument of the runtime, kept for envs a reset switches to (repeatable; "
        "Atari: repeat_action_probability=0.25, full_action_space=true, noop_max=0, "
        "max_episode_frames=N); `describe` reports the values in force",
    )
    shared.add_argument(
        "--max-viewers",
        type=int,
        default=DEFAULT_MAX_VIEWERS,
        metavar="N",
        help="VNC viewers served at once (clients that ask for no frame tags); agents have "
        f"slots of their own (default {DEFAULT_MAX_VIEWERS})",
    )
    shared.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="accept rewarder WebSocket handshakes from this web page (e.g. "
        "https://example.org; repeatable). Browsers send an Origin and agents don't, so "
        "without it every web page is refused: a page open here could drive the remote",
    )
    shared.add_argument(
        "--http-port",
        type=int,
        nargs="?",
        const=-1,  # envserver.ports.AUTO: the first free port from 8900 (ports.HTTP_BASE)
        default=None,
        metavar="PORT",
        help="also serve the screen to browsers at http://HOST:PORT/viewer/ (noVNC, view "
        "only, behind --password); without PORT the first free one from 8900, 0 picks any "
        "free one; off unless given",
    )
    shared.add_argument(
        "--control-password", default=None, metavar="PW",
        help="the browser viewer takes input from pages opened with this password "
        "(?password=PW; player 0), so a person plays, or records a demonstration with "
        "--record, from a browser tab; a multi-player remote's --player-password N=PW opens "
        "it as player N. Without it the viewer is view only. Needs --http-port",
    )
    shared.add_argument(
        "--dm-env-rpc-port",
        type=int,
        nargs="?",
        const=16000,  # envserver.dmrpc.server.DEFAULT_PORT (not imported: it needs grpc)
        default=None,
        metavar="PORT",
        help="also serve dm_env_rpc (DeepMind's protocol, gRPC) on PORT (default 16000; "
        "needs pip install 'universe-remote[dmenv]'); off unless given",
    )
    shared.add_argument(
        "--openenv-port",
        type=int,
        nargs="?",
        const=8000,  # envserver.openenv.server.DEFAULT_PORT (not imported: parsing stays cheap)
        default=None,
        metavar="PORT",
        help="also serve OpenEnv (HTTP /reset /step /state /schema /metadata /health and "
        "/ws sessions; GenericEnvClient) on PORT (default 8000; docs/openenv.md); off unless given",
    )
    shared.add_argument(
        "--mcp-port",
        type=int,
        nargs="?",
        const=-1,  # envserver.ports.AUTO: the first free port from 8800 (ports.MCP_BASE)
        default=None,
        metavar="PORT",
        help="also serve MCP (streamable HTTP at /mcp: the computer tool for computer-use "
        "agents) on PORT (without PORT the first "
        "free one from 8800, 0 picks any free one; docs/computer-use.md); off unless given",
    )
    shared.add_argument(
        "--mcp-lease",
        type=float,
        default=30.0,  # envserver.computer_use.leases.LEASE (not imported: parsing stays cheap)
        metavar="SECONDS",
        help="an MCP session whose host sends no request and holds no event stream open ends "
        "this many seconds later, letting go of its seat (default 30; 1 to 3600)",
    )
    shared.add_argument(
        "--tls-cert",
        default=os.environ.get(CERT_ENV) or None,
        metavar="CERT",
        help="serve every port over TLS with this PEM certificate (chain): the rewarder as "
        "wss://, the viewer and OpenEnv as https://, VNC as VeNCrypt X509, dm_env_rpc as gRPC with TLS "
        f"(default: ${CERT_ENV}; needs --tls-key)",
    )
    shared.add_argument(
        "--tls-key",
        default=os.environ.get(KEY_ENV) or None,
        metavar="KEY",
        help=f"the certificate's PEM private key, unencrypted (default: ${KEY_ENV})",
    )
    shared.add_argument(
        "--insecure",
        action="store_true",
        help="serve off loopback without TLS (a private network, or a container whose ports "
        "are published on 127.0.0.1); a password is still required",
    )
    serve = sub.add_parser(
        "serve",
        parents=[shared],
        help="run an environment and serve it on the VNC and rewarder ports",
        description="Run ENV_ID in real time and serve it. Stop with Ctrl-C or SIGTERM. Exit "
        f"status {EXIT_CANNOT_LISTEN}: a port could not be bound; {EXIT_REFUSED}: an option, env "
        f"or certificate was refused before anything bound; {EXIT_RUNTIME_FAILED}: the runtime "
        "failed past recovery (every game's, with --games), for a supervisor to restart it.",
    )
    serve.add_argument("env_id", metavar="ENV_ID", help="for example builtin.Catch-v0")
    serve.add_argument(
        "--record", default=None, metavar="DIR",
        help="record every episode to DIR as it happens: frames, input with who sent it, "
        "rewards (docs/recording.md); the property 'recording' (1/0) switches it on and off",
    )
    serve.add_argument(
        "--verify-restores", action="store_true",
        help="check every v0.env.restore against the snapshot's digest of the runtime's state "
        "(docs/snapshots.md); a restore that did not come back is the runtime's failure",
    )
    serve.set_defaults(func=_cmd_serve)

    replay = sub.add_parser(
        "replay", help="serve a recording (serve --record DIR) as a remote, to watch or step",
        description="Serve the episodes recorded in DIR as a remote: VNC viewers, the browser "
        "viewer and agents watch it in real time (one recorded step per tick) or step it "
        "in lockstep. Input is ignored. Takes serve's options.",
        parents=[shared],
    )
    replay.add_argument("recording", metavar="DIR", help="a directory serve --record wrote")
    replay.add_argument("--episode", type=int, default=None, metavar="K",
                        help="only episode K (episode-00000K); default: every episode in turn")
    replay.set_defaults(func=_cmd_serve)

    health = sub.add_parser(
        "health",
        help="exit 0 if a remote's rewarder answers (asks as an observer; for HEALTHCHECK)",
        description="Ask a remote's rewarder, as an observer, whether it runs: exit 0 if it "
        "answers with a describe, 1 if not (the reason on stderr).",
    )
    health.add_argument("--host", default="127.0.0.1", help="the remote's host (default 127.0.0.1)")
    health.add_argument("--rewarder-port", type=int, default=15900, help="default 15900")
    health.add_argument(
        "--password", default=None,
        help=f"the remote's password (default: ${PASSWORD_ENV}, or the file ${PASSWORD_FILE_ENV} names)",
    )
    health.add_argument(
        "--tls", action="store_true",
        help="the remote serves TLS (serve --tls-cert): verify it against the system's trust "
        f"store, or --tls-ca / ${CA_ENV}",
    )
    health.add_argument(
        "--tls-ca", default=None, metavar="CA.pem",
        help=f"the CA that issued the remote's certificate (implies --tls; default ${CA_ENV}). "
        f"Without either, a set ${CERT_ENV} means the remote is this machine's own: its "
        "certificate is checked as the one in that file (the Docker HEALTHCHECK)",
    )
    health.add_argument(
        "--timeout", type=float, default=HEALTH_TIMEOUT,
        help=f"seconds to wait for an answer (default {HEALTH_TIMEOUT:g})",
    )
    health.set_defaults(func=_cmd_health)

    lister = sub.add_parser(
        "list", help="print the environment ids this install can serve",
        description="Print each environment id this install can serve, with one line about "
        "it; families whose packages are missing are named on stderr with what to install.",
    )
    lister.set_defaults(func=_cmd_list)
