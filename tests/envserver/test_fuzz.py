"""The fuzzers of ``make fuzz``, short: every request answered, no hang, no crash."""

from __future__ import annotations

from fuzz import rewarder, rfb
from tests.conftest import StartRemote


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
