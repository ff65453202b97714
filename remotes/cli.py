"""The agent side's commands: ``universe-remote play`` (run an agent on remotes), ``watch``
and ``pool`` (a warm pool of remotes handed out as leases: :mod:`remotes.pool.cli`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rewarder.auth import PASSWORD_ENV
from rewarder.tls import CA_ENV


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


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
            tls_ca=args.tls_ca,
            ray=args.ray,
        )
    except LookupError as exc:  # an unknown env id: the closest ones are in the message
        print(f"universe-remote play: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    # RuntimeError: a remote failed to start, or Ray is missing or has no room (RayUnavailable)
    except (RemoteUnavailable, ValueError, RuntimeError) as exc:
        print(f"universe-remote play: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def add_commands(sub: Any) -> None:
    """Add ``play`` to the ``universe-remote`` subparsers."""
    player = sub.add_parser(
        "play",
        help="run an agent on remotes and show its progress",
        description="Start -n local remotes of ENV_ID (or use --remote ADDRESS) and run an agent.",
    )
    player.add_argument("env_id", metavar="ENV_ID", nargs="?", help="start local remotes of this env")
    player.add_argument(
        "--remote", metavar="ADDRESS",
        help="vnc://host:5900+15900,... instead (vnc+tls://... for remotes served with TLS)",
    )
    player.add_argument(
        "--tls-ca", metavar="CA.pem", default=None,
        help=f"the CA that issued a vnc+tls:// remote's certificate (default: ${CA_ENV}, "
        "else the system's trust store)",
    )
    player.add_argument("-n", type=_positive, default=1, help="local remotes to start (default 1)")
    player.add_argument(
        "--ray", metavar="ADDRESS", nargs="?", const="", default=None,
        help="start the -n remotes as actors on a Ray cluster (ADDRESS: ray.init's, e.g. auto, "
        "ray://head:10001, or local for a new local cluster; none: $RAY_ADDRESS, else the "
        "cluster `ray start` started last, else a new local one; one that does not answer is "
        "reported within seconds); needs the ray extra",
    )
    player.add_argument(
        "--agent", choices=["random", "noop"], default="random",
        help="random: random actions; noop: no input (default random)",
    )
    player.add_argument("--steps", type=int, default=None, help="stop after N steps")
    player.add_argument("--seconds", type=float, default=None, help="stop after S seconds")
    player.add_argument("--fps", type=float, default=None, help="steps per second (default: remote's)")
    player.add_argument("--password", default=None, help=f"the remotes' password (default: ${PASSWORD_ENV})")
    player.add_argument(
        "--dashboard",
        type=int,
        nargs="?",
        const=8700,  # remotes.dashboard.DEFAULT_PORT (not imported: it needs aiohttp)
        default=None,
        metavar="PORT",
        help="serve a live page of the remotes (screens, state, steps/s, episode returns) at "
        "http://127.0.0.1:PORT/; PORT defaults to 8700, 0 picks a free one",
    )
    player.set_defaults(func=_cmd_play)
    from .pool.cli import add_commands as add_pool

    add_pool(sub)
    watcher = sub.add_parser(
        "watch",
        help="watch a remote's screen in a window, zoomed (view only)",
        description="Open a window on a remote's screen, each pixel drawn N x N (TigerVNC's "
        "vncviewer shows a 160x210 game at 1x). Needs $DISPLAY and Tk (python3-tk).",
    )
    from .zoom_window import add_arguments

    add_arguments(watcher)
    watcher.add_argument("--password", default=None, help=f"the remote's password (default: ${PASSWORD_ENV})")
    watcher.set_defaults(func=_cmd_watch)


def _cmd_watch(args: argparse.Namespace) -> int:
    from .zoom_window import vnc_address, watch

    if args.zoom is not None and args.zoom < 1:
        print(f"universe-remote watch: --zoom must be 1 or more, not {args.zoom}", file=sys.stderr)
        return 2
    try:
        address, password = vnc_address(args.address)
    except ValueError as exc:
        print(f"universe-remote watch: {exc}", file=sys.stderr)
        return 2
    return watch(address, password or args.password, args.zoom, args.title)
