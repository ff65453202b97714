"""``universe-remote pool``: run a warm pool, or (``--status``) show one's."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any, Final

from rewarder.auth import PASSWORD_ENV

#: The pool's port when none is given.
DEFAULT_PORT: Final = 8900

log = logging.getLogger("universe-remote")


def add_commands(sub: Any) -> None:
    """Add ``pool`` to the ``universe-remote`` subparsers."""
    from .service import HEALTH_INTERVAL, MAX_SIZE
    from .table import DEFAULT_DEADLINE, DEFAULT_MAX_AGE

    pool = sub.add_parser(
        "pool",
        help="keep warm remotes and hand them out as leases (or --status: show a pool's)",
        description="Keep --size warm remotes of each ENV_ID on this machine and hand them out as "
        "leases over HTTP+JSON on --port (agents: RemoteEnv('pool://HOST:PORT', env_id=...), "
        "make_vec(..., remotes='pool://HOST:PORT')). ENV_ID may carry its own settings: "
        "ENV_ID[,size=N][,mode=lockstep][,KEY=VALUE] (KEY=VALUE: the runtime's serve --option).",
    )
    pool.add_argument("env_ids", metavar="ENV_ID", nargs="*", help="env ids to keep warm")
    pool.add_argument("--size", type=int, default=4,
                      help=f"warm remotes per env id (1..{MAX_SIZE}; default 4)")
    pool.add_argument("--port", type=int, default=DEFAULT_PORT,
                      help=f"the pool's HTTP port (default {DEFAULT_PORT})")
    pool.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    pool.add_argument("--mode", choices=["realtime", "lockstep"], default="realtime",
                      help="the remotes' mode, for env ids that do not name one (default realtime)")
    pool.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE,
                      help="seconds a holder may go without renewing its lease "
                      f"(default {DEFAULT_DEADLINE:g})")
    pool.add_argument("--max-age", type=float, default=DEFAULT_MAX_AGE,
                      help=f"seconds a lease lasts at most (default {DEFAULT_MAX_AGE:g})")
    pool.add_argument("--health-interval", type=float, default=HEALTH_INTERVAL,
                      help="seconds between health checks of each warm remote "
                      f"(default {HEALTH_INTERVAL:g})")
    pool.add_argument("--nice", type=int, default=None,
                      help="the remotes' scheduling priority (default 5: agents on this machine come "
                      "first; 19 when the real-time remotes exceed what the cores hold)")
    pool.add_argument(
        "--ray", metavar="ADDRESS", nargs="?", const="", default=None,
        help="keep the remotes on a Ray cluster, one actor each (ADDRESS: ray.init's; none: "
        "$RAY_ADDRESS or the cluster `ray start` started last); needs the ray extra",
    )
    pool.add_argument(
        "--docker", metavar="IMAGE", nargs="?", const="universe-remote:latest", default=None,
        help="keep the remotes in containers of IMAGE (default universe-remote:latest), one each, "
        "through Docker's CLI (podman's Docker API too); ports published on 127.0.0.1",
    )
    pool.add_argument("--mcp", action="store_true",
                      help="the remotes also serve their MCP port; a claim answers its URL, and an MCP "
                      "session is a lease (universe-remote mcp pool://HOST:PORT --env-id ENV_ID)")
    pool.add_argument("--openenv", action="store_true",
                      help="the remotes also serve their OpenEnv port; a claim answers its URL, and an "
                      "OpenEnv session is a lease (remotes.pool.claim_session)")
    pool.add_argument("--password", default=None, help=f"the pool's password (default: ${PASSWORD_ENV})")
    pool.add_argument("--tls-cert", default=None, help="serve HTTPS with this certificate (PEM)")
    pool.add_argument("--tls-key", default=None, help="the certificate's key (PEM)")
    pool.add_argument("--status", action="store_true",
                      help="print the pool at --host:--port (warm/leased/resetting/failed per env id, "
                      "claim latency, lease ages)")
    pool.add_argument("--json", action="store_true", help="with --status: the status as JSON")
    pool.set_defaults(func=_cmd_pool)


def _cmd_pool(args: argparse.Namespace) -> int:
    if args.status:
        return _status(args)
    if not args.env_ids:
        print("universe-remote pool: give the ENV_IDs to keep warm (or --status)", file=sys.stderr)
        return 2
    from runtimes import registry

    from .service import DEFAULT_NICE, parse_spec, serve_pool

    try:
        if args.mcp:
            try:
                import PIL  # noqa: F401  (the MCP port's screenshots: said now, not by every remote)
            except ModuleNotFoundError:
                raise ValueError("--mcp: the remotes' MCP ports need Pillow: pip install "
                                 "'universe-remote[mcp]'") from None
        specs = [parse_spec(text, args.size, args.mode) for text in args.env_ids]
        for spec in specs:
            registry.check(spec.kind.env_id)
        ssl_context = None
        if args.tls_cert or args.tls_key:
            from rewarder.tls import server_tls

            if not (args.tls_cert and args.tls_key):
                raise ValueError("--tls-cert and --tls-key go together")
            ssl_context = server_tls(args.tls_cert, args.tls_key).context
    except (ValueError, LookupError) as exc:
        print(f"universe-remote pool: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    if args.host not in ("127.0.0.1", "::1", "localhost"):
        if args.ray is None:
            print("universe-remote pool: this pool's remotes are local processes listening on "
                  "127.0.0.1, so its agents run on this machine: keep --host on loopback (or "
                  "keep the remotes on Ray: --ray)", file=sys.stderr)
            return 2
        if not args.password:
            print("universe-remote pool: a pool listening beyond loopback needs --password "
                  f"(or ${PASSWORD_ENV})", file=sys.stderr)
            return 2

    def ready(service: Any, port: int) -> None:
        scheme = "pool+tls" if ssl_context is not None else "pool"
        kinds = ", ".join(f"{s.size} x {s.kind.env_id} ({s.kind.mode})" for s in specs)
        print(f"pool address  {scheme}://{args.host}:{port}", flush=True)
        log.info("keeping warm: %s", kinds)

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        await serve_pool(
            specs, host=args.host, port=args.port, password=args.password, ssl_context=ssl_context,
            ready=ready, deadline=args.deadline, max_age=args.max_age,
            nice=DEFAULT_NICE if args.nice is None else args.nice, health_interval=args.health_interval,
            ray=args.ray, docker=args.docker,
            fronts=[name for name, wanted in (("mcp", args.mcp), ("openenv", args.openenv)) if wanted],
        )

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        pass
    except (ValueError, OSError) as exc:
        print(f"universe-remote pool: {exc}", file=sys.stderr)
        return 1
    return 0


def _status(args: argparse.Namespace) -> int:
    import orjson

    from .client import PoolAddress, PoolClient, PoolError

    # Over TLS the pool's certificate is what --status trusts (or $UNIVERSE_REMOTE_TLS_CA).
    tls = bool(args.tls_cert)
    client = PoolClient(PoolAddress(args.host, args.port, tls), args.password, args.tls_cert)
    try:
        status = client.status()
    except PoolError as exc:
        print(f"universe-remote pool: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(orjson.dumps(status, option=orjson.OPT_INDENT_2).decode())
        return 0
    print(format_status(status))
    return 0


def format_status(status: dict[str, Any]) -> str:
    """The status as a few lines a person reads."""
    lines = [f"{'env id':<28} {'mode':<9} {'size':>4} {'warm':>5} {'leased':>6} {'resetting':>9} "
             f"{'starting':>8} {'failed':>6}"]
    for kind in status["kinds"]:
        lines.append(
            f"{kind['env_id']:<28} {kind['mode']:<9} {kind['size']:>4} {kind['warm']:>5} {kind['leased']:>6} "
            f"{kind['resetting']:>9} {kind['starting']:>8} {kind['failed']:>6}"
        )
    claims = status["claims"]
    if "p50_ms" in claims:
        lines.append(f"claims {claims['count']}: p50 {claims['p50_ms']} ms, p90 {claims['p90_ms']} ms, "
                     f"p99 {claims['p99_ms']} ms; {claims['lost']} ended without release")
    else:
        lines.append(f"claims {claims['count']}")
    leases = status["leases"]
    if leases:
        ages = sorted(lease["age_s"] for lease in leases)
        lines.append(f"leases {len(leases)}: ages {ages[0]:.1f}..{ages[-1]:.1f} s (median "
                     f"{ages[len(ages) // 2]:.1f} s); deadline {status['deadline_s']:g} s, "
                     f"max age {status['max_age_s']:g} s")
    return "\n".join(lines)
