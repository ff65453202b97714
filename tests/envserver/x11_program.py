"""An x11.Command-v0 remote serving MCP and running a program of the test's: what the
desktop tests (keys, entries, screen sizes, accessibility, snapshots) share."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from benchmarks.mcp_agent import Served


def served_program(argv: Sequence[str], *serve_args: str) -> Served:
    """``serve x11.Command-v0 --mcp-port 0 SERVE_ARGS`` running ``argv`` on its display."""
    return Served("x11.Command-v0", *serve_args, env={"UNIVERSE_REMOTE_X11_COMMAND": shlex.join(argv)})
