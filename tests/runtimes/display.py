"""Test helpers for runtimes on an Xvnc display (browser, X programs): start remotes and
prove at teardown that no process they started is left running."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from envserver.remote import Remote
from runtimes.xruntime import DisplayRuntime
from tests.conftest import StartRemote

StartDisplay = Callable[..., Awaitable[Remote]]


def alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie has exited: only its parent has not reaped it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@contextlib.asynccontextmanager
async def display_remotes(
    start_remote: StartRemote, kind: type[DisplayRuntime], default_env: str, what: str
) -> AsyncIterator[StartDisplay]:
    """``start(env_id)`` for remotes whose runtime is a ``kind``; on exit they are closed
    and every process they started (Xvnc and ``what``) must be gone."""
    remotes: list[Remote] = []

    async def start(env_id: str = default_env, **kwargs: Any) -> Remote:
        remote = await start_remote(env_id, **kwargs)
        remotes.append(remote)
        assert isinstance(remote.runtime, kind)
        return remote

    yield start
    pids = [pid for remote in remotes for pid in remote.runtime.pids()]  # type: ignore[attr-defined]
    for remote in remotes:
        await remote.close()
    assert pids and not [pid for pid in pids if alive(pid)], f"Xvnc/{what} left running"
