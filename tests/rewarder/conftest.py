"""Shared by the rewarder tests: one ``serve --games 2`` process for the batch-step tests
(started once for the session: each test holds its games anew, under its own client id)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from remotes import start_local
from remotes.local import LocalRemotes
from rewarder.blocking import BlockingRewarder

#: Seconds a reset may take.
WAIT = 10.0


@pytest.fixture(scope="session")
def two_games() -> Iterator[LocalRemotes]:
    """Two lockstep Catch games in one process (``batch`` describes: one token)."""
    with start_local("builtin.Catch-v0", 2, extra_args=["--mode", "lockstep"], games_per_process=2) as local:
        yield local


@contextmanager
def holding(local: LocalRemotes, client_id: str) -> Iterator[list[BlockingRewarder]]:
    """``local``'s games, each reset and held by one agent ``client_id`` (a batch goes on
    the first's channel); closed after."""
    channels = [BlockingRewarder(f"127.0.0.1:{address.rewarder_port}", client_id=client_id)
                for address in local.addresses]
    try:
        for channel in channels:
            channel.connect()
            channel.wait_reply(channel.send_reset(mode="lockstep"), time.monotonic() + WAIT)
        yield channels
    finally:
        for channel in channels:
            channel.close()
