"""Builds the ``universe-remote`` parser from each side's commands and runs one.

Each side adds its subcommands with ``add_commands(subparsers)``; a subcommand imports
what it needs only when it runs, so ``serve`` in a slim image never loads gymnasium and
``list`` starts no servers.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from envserver import cli as server_cli
from envserver.version import version_line
from rewarder.auth import default_password
from universe_remote import evaluate, export, mcp_proxy

#: The logger of the commands' own messages ("shutting down", ...), shown at INFO.
COMMAND_LOGGER = "universe-remote"
#: Commands of the agent side: only they import :mod:`remotes` (and so gymnasium).
AGENT_COMMANDS = frozenset({"play", "watch", "pool"})


class _Version(argparse.Action):
    """``--version``: the line as it is (argparse's own action wraps it to the terminal,
    mid-phrase)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(version_line())
        parser.exit()


def build_parser(agent: bool = True) -> argparse.ArgumentParser:
    """The parser; ``agent=False`` leaves out the agent side's commands (and imports)."""
    parser = argparse.ArgumentParser(
        prog="universe-remote",
        description="Universe-style remote environments: VNC pixels and a JSON rewarder.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    parser.add_argument(
        "--version", action=_Version, nargs=0,
        help="print the version and the protocol versions, then exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    server_cli.add_commands(sub)
    export.add_commands(sub)
    mcp_proxy.add_commands(sub)
    evaluate.add_commands(sub)
    if agent:
        from remotes import cli as agent_cli

        agent_cli.add_commands(sub)
    for command in sub.choices.values():  # `universe-remote serve ENV -v` works too
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                             help="log debug details")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = next((w for w in words if not w.startswith("-")), None)
    # serve/health/list/replay/export/mcp never load the agent side; anything else (play,
    # --help) does.
    server_only = command in {"serve", "health", "list", "replay", "export", "mcp"}
    args = build_parser(agent=not server_only).parse_args(words)
    if getattr(args, "password", "absent") is None:
        args.password = default_password()
    # Our command's own lines at INFO; libraries (websockets, grpc, our channels) only
    # when something is wrong, unless -v: a banner and a progress line stay readable.
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger(COMMAND_LOGGER).setLevel(logging.INFO)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `universe-remote list | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
