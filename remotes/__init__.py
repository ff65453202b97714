"""The agent side: gymnasium envs over one or many remotes.

    from remotes import RemoteEnv, RemoteVectorEnv, start_local

Names are imported lazily, so ``universe-remote serve`` (which lives in this package's
``cli`` module) never loads gymnasium.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RemoteEnv": "remotes.env",
    "RemoteVectorEnv": "remotes.vector",
    "RemoteUnavailable": "remotes.session",
    "VNCActionSpace": "remotes.spaces",
    "DiscreteKeys": "remotes.wrappers",
    "DiscreteClicks": "remotes.wrappers",
    "PointerBox": "remotes.wrappers",
    "parse_remotes": "remotes.address",
    "RemoteAddress": "remotes.address",
    "start_local": "remotes.local",
    "LocalRemotes": "remotes.local",
    "start_docker": "remotes.containers",
    "DockerRemotes": "remotes.containers",
    "DockerUnavailable": "remotes.containers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'remotes' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
