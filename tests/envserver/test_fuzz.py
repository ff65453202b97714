"""The fuzzers of ``make fuzz``, short: every request answered, no hang, no crash."""

from __future__ import annotations

import logging

import pytest

from envserver.remote import Remote
from fuzz import rewarder, rfb
from tests.conftest import StartRemote
from tests.optional import need_extra


async def test_rewarder_fuzz_gets_every_request_answered(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    counts = await rewarder.run(remote.rewarder.port, 2_000, seed=7)
    assert counts.messages == 2_000 and counts.requests == 2_000
    assert counts.unanswered == counts.hangs == counts.crashes == 0, counts
    assert counts.answered == counts.requests


async def test_rfb_fuzz_never_stops_the_server_serving_others(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0")
    assert remote.vnc_port is not None
    counts = await rfb.run(remote.vnc_port, 400, seed=7)
    assert counts.messages >= 400 and counts.connections >= 20
    assert counts.hangs == counts.crashes == 0, counts
    assert counts.closed_by_server > 0  # garbage got its connection closed, not ignored


async def test_dm_env_rpc_fuzz_gets_every_request_answered_with_one_line_per_kind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    need_extra("dmenv")
    from fuzz import dmrpc

    caplog.set_level(logging.INFO)
    remote = Remote("builtin.Catch-v0", mode="lockstep")
    await remote.start("127.0.0.1", 0, 0, dm_env_rpc_port=0)
    try:
        assert remote.dm_env_rpc is not None
        counts = await dmrpc.run(remote.dm_env_rpc.port, 3_000, seed=7)
        kinds = dict(remote.dm_env_rpc.bad_input.counts)
    finally:
        await remote.close()
    assert counts.messages == 3_000 and counts.answered == counts.requests, counts
    assert counts.unanswered == counts.hangs == counts.crashes == 0, counts
    # No stream ended under its requests, but for one over MAX_MESSAGE_BYTES (by design).
    assert counts.stream_ends["OK"] == counts.streams - counts.closed_oversized, counts
    assert counts.responses["step"] > 0 and counts.responses["extension"] > 0, counts
    assert kinds["undecodable request"] > 50 and kinds["oversized tensor"] > 5, kinds
    assert not any(kind.startswith("bug") for kind in kinds), kinds
    # One line per kind while it lasted, one more with the count at close; no traceback.
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 2 * len(kinds), [r.getMessage()[:100] for r in lines]
    assert all(r.name == "envserver.dmrpc.server" and r.exc_info is None for r in lines)
