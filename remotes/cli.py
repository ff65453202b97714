"""The ``universe-remote`` command: serve, play, list, health.

Each subcommand imports only what it needs, so ``serve`` in a slim image never loads
the agent side (gymnasium) and ``list`` starts no servers.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from .address import is_loopback

PASSWORD_ENV: str = "UNIVERSE_REMOTE_PASSWORD"
#: A file holding the password (Docker and Kubernetes secrets: /run/secrets/...).
PASSWORD_FILE_ENV: str = "UNIVERSE_REMOTE_PASSWORD_FILE"
VIEW_ONLY_PASSWORD_ENV: str = "UNIVERSE_REMOTE_VIEW_ONLY_PASSWORD"
#: Seconds ``universe-remote health`` waits for the rewarder's describe.
HEALTH_TIMEOUT: float = 5.0


def default_password() -> str | None:
    """The password from $UNIVERSE_REMOTE_PASSWORD, else from the file $UNIVERSE_REMOTE_PASSWORD_FILE names."""
    password = os.environ.get(PASSWORD_ENV)
    if password:
        return password
    path = os.environ.get(PASSWORD_FILE_ENV)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError as exc:
            raise SystemExit(f"universe-remote: cannot read ${PASSWORD_FILE_ENV} ({path}): {exc}")
    return None

log = logging.getLogger("universe-remote")


def _cmd_list(args: argparse.Namespace) -> int:
    from runtimes import registry

    for env_id in registry.env_ids():
        runtime = registry.lookup(env_id)
        description = getattr(runtime, "description", "")
        print(f"{env_id:32} {description}".rstrip())
    for family, why in sorted(registry.missing.items()):
        print(f"({family}.* not available: {why})", file=sys.stderr)
    return 0


async def _serve(args: argparse.Namespace) -> int:
    from runtimes.remote import Remote

    remote = Remote(
        args.env_id,
        fps=args.fps,
        password=args.password,
        view_only_password=args.view_only_password,
        mode=args.mode,
        runtime_options={"scale": args.scale} if args.scale != 1 else None,
    )
    await remote.start(args.host, args.rewarder_port, args.vnc_port, args.http_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    rewarder_port, vnc_port = remote.rewarder.port, remote.vnc_port
    host = args.host
    secret = "?password=<password>" if args.password else ""
    display = vnc_port - 5900 if 5900 <= vnc_port < 6000 else None
    viewer = f"{host}:{display}" if display is not None else f"{host}::{vnc_port}"
    print(
        f"universe-remote: serving {remote.runtime.env_id} "
        f"({remote.runtime.width}x{remote.runtime.height} at {remote.fps:g} fps)\n"
        f"  VNC       {host}:{vnc_port}   watch:  vncviewer {viewer}\n"
        f"  rewarder  ws://{host}:{rewarder_port}   (JSON over WebSocket, Universe v0)\n"
        + (
            f"  viewer    http://{host}:{remote.viewer.port}/viewer/   (view only, in a browser)\n"
            if remote.viewer is not None
            else ""
        )
        + f"  agent address  vnc://{host}:{vnc_port}+{rewarder_port}{secret}\n"
        "  Ctrl-C to stop.",
        flush=True,
    )
    await stop.wait()
    log.info("shutting down")
    await remote.close("the remote is shutting down (signal received)")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    if args.password and len(args.password) > 8:
        log.warning("VNC uses only the first 8 characters of the password")
    if not is_loopback(args.host) and not args.password:
        print(
            f"universe-remote: refusing to serve on {args.host} without a password: anyone "
            f"who can reach it could control the remote. Pass --password PW or set "
            f"{PASSWORD_ENV}, or bind --host 127.0.0.1.",
            file=sys.stderr,
        )
        return 2
    from runtimes.errors import RuntimeFailure

    try:
        return asyncio.run(_serve(args))
    except (RuntimeFailure, ValueError) as exc:  # unknown env, missing program, bad option
        print(f"universe-remote: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"universe-remote: cannot listen on {args.host}: {exc.strerror or exc}. "
            "Is another remote using the port? Pick others with --rewarder-port/--vnc-port"
            "/--http-port.",
            file=sys.stderr,
        )
        return 1


def _cmd_play(args: argparse.Namespace) -> int:
    if args.env_id is None and args.remote is None:
        print("universe-remote play: give an ENV_ID or --remote ADDRESS", file=sys.stderr)
        return 2
    from .play import play
    from .session import RemoteUnavailable

    try:
        play(
            args.env_id,
            remote=args.remote,
            n=args.n,
            agent=args.agent,
            steps=args.steps,
            seconds=args.seconds,
            fps=args.fps,
            password=args.password,
            dashboard=args.dashboard,
        )
    except (RemoteUnavailable, ValueError) as exc:
        print(f"universe-remote play: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


async def _health(args: argparse.Namespace) -> int:
    from rewarder.client import RewarderClient
    from rewarder.errors import RewarderError

    client = RewarderClient(
        f"{args.host}:{args.rewarder_port}",
        password=args.password,
        observer=True,
        start_timeout=args.timeout,
        reconnect=False,
        calibration_pings=0,
    )
    try:
        async with client:
            describe = await client.wait_for_state("running", timeout=args.timeout)
    except (RewarderError, TimeoutError, OSError) as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    print(f"healthy: {describe.env_id} episode {describe.episode_id} ({describe.env_state})")
    return 0


def _cmd_health(args: argparse.Namespace) -> int:
    return asyncio.run(_health(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="universe-remote",
        description="Universe-style remote environments: VNC pixels and a JSON rewarder.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser(
        "serve",
        help="run an environment and serve it on the VNC and rewarder ports",
        description="Run ENV_ID in real time and serve it. Stop with Ctrl-C or SIGTERM.",
    )
    serve.add_argument("env_id", metavar="ENV_ID", help="for example builtin.Catch-v0")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--rewarder-port", type=int, default=15900, help="default 15900")
    serve.add_argument("--vnc-port", type=int, default=5900, help="default 5900")
    serve.add_argument(
        "--password",
        default=None,
        help=f"password for both channels (default: ${PASSWORD_ENV}, or the file "
        f"${PASSWORD_FILE_ENV} names); required when --host is not loopback",
    )
    serve.add_argument(
        "--view-only-password",
        default=os.environ.get(VIEW_ONLY_PASSWORD_ENV) or None,
        help=f"VNC password for viewers whose input is ignored (default: ${VIEW_ONLY_PASSWORD_ENV})",
    )
    serve.add_argument(
        "--fps", type=float, default=None, help="frames per second (default: the runtime's, 60)"
    )
    serve.add_argument(
        "--mode",
        choices=["realtime", "lockstep"],
        default="realtime",
        help="realtime: run at --fps whatever agents do (Universe); lockstep: advance only "
        "when the active client sends v0.env.step (default realtime; a reset may switch)",
    )
    serve.add_argument(
        "--scale", type=int, default=1, help="integer zoom of the screen for viewers (Atari)"
    )
    serve.add_argument(
        "--http-port",
        type=int,
        nargs="?",
        const=8900,  # runtimes.viewer.DEFAULT_HTTP_PORT (not imported: it needs aiohttp)
        default=None,
        metavar="PORT",
        help="also serve the screen to browsers at http://HOST:PORT/viewer/ (noVNC, view "
        "only, behind --password); PORT defaults to 8900, 0 picks a free one; off unless given",
    )
    serve.set_defaults(func=_cmd_serve)

    player = sub.add_parser(
        "play",
        help="run an agent on remotes and show its progress",
        description="Start -n local remotes of ENV_ID (or use --remote ADDRESS) and run an agent.",
    )
    player.add_argument("env_id", metavar="ENV_ID", nargs="?", help="start local remotes of this env")
    player.add_argument("--remote", metavar="ADDRESS", help="vnc://host:5900+15900,... instead")
    player.add_argument("-n", type=int, default=1, help="local remotes to start (default 1)")
    player.add_argument("--agent", choices=["random", "noop"], default="random")
    player.add_argument("--steps", type=int, default=None, help="stop after N steps")
    player.add_argument("--seconds", type=float, default=None, help="stop after S seconds")
    player.add_argument("--fps", type=float, default=None, help="steps per second (default: remote's)")
    player.add_argument("--password", default=None, help=f"the remotes' password (default: ${PASSWORD_ENV})")
    player.add_argument(
        "--dashboard",
        type=int,
        nargs="?",
        const=8800,  # remotes.dashboard.DEFAULT_PORT (not imported: it needs aiohttp)
        default=None,
        metavar="PORT",
        help="serve a live page of the remotes (screens, state, steps/s, episode returns) at "
        "http://127.0.0.1:PORT/; PORT defaults to 8800, 0 picks a free one",
    )
    player.set_defaults(func=_cmd_play)

    health = sub.add_parser(
        "health",
        help="exit 0 if a remote's rewarder answers (asks as an observer; for HEALTHCHECK)",
    )
    health.add_argument("--host", default="127.0.0.1")
    health.add_argument("--rewarder-port", type=int, default=15900)
    health.add_argument("--password", default=None, help=f"default: ${PASSWORD_ENV}")
    health.add_argument("--timeout", type=float, default=HEALTH_TIMEOUT)
    health.set_defaults(func=_cmd_health)

    lister = sub.add_parser("list", help="print the environment ids this install can serve")
    lister.set_defaults(func=_cmd_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "password", "absent") is None:
        args.password = default_password()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "serve" and args.fps is not None and not 0 < args.fps <= 1000:
        print("universe-remote: --fps must be in (0, 1000]", file=sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `universe-remote list | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
