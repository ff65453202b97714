"""Fixtures shared by the test tree: remotes on 127.0.0.1 with free ports."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from runtimes.remote import Remote  # noqa: E402

StartRemote = Callable[..., Awaitable[Remote]]


@pytest.fixture
async def start_remote() -> AsyncIterator[StartRemote]:
    """``await start_remote(env_id, **kwargs)``: a running remote, closed after the test."""
    started: list[Remote] = []

    async def start(env_id: str = "builtin.Catch-v0", **kwargs: object) -> Remote:
        remote = Remote(env_id, **kwargs)  # type: ignore[arg-type]
        await remote.start("127.0.0.1", 0)
        started.append(remote)
        return remote

    yield start
    for remote in started:
        await remote.close()
