"""What this remote is: its version and the protocol versions it speaks (reported by
``universe-remote --version``, the describe body and the dm_env_rpc ``version`` property,
so a client can tell what it talks to before it relies on an extension)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Final

#: Each protocol the remote speaks, and its version.
PROTOCOLS: Final = {"rewarder": "v0", "rfb": "3.8", "dm_env_rpc": "v1", "openenv": "http 1.0.0 + ws"}


def server_version() -> str:
    """The installed universe-remote's version."""
    try:
        return version("universe-remote")
    except PackageNotFoundError:  # pragma: no cover - run from a tree never installed
        return "0+unknown"


def version_line() -> str:
    protocols = ", ".join(f"{name} {v}" for name, v in PROTOCOLS.items())
    return f"universe-remote {server_version()} (protocols: {protocols})"
