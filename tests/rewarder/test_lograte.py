"""The rate-limited log of bad input: one line per kind per interval, the rest counted;
the rewarder's bugs are logged through it."""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest
from websockets.asyncio.client import connect

from rewarder import protocol
from rewarder.lograte import LOG_INTERVAL, RateLimitedLog
from rewarder.server import RewarderServer
from tests.rewarder.test_client import FakeEnv


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.lograte"]


def test_one_line_per_kind_per_interval_and_the_rest_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "test.lograte")
    clock = Clock()
    limited = RateLimitedLog(logging.getLogger("test.lograte"), 10.0, clock=clock)
    assert limited.log("undecodable", logging.WARNING, "bad bytes from %s", "a")
    for i in range(500):
        clock.now += 0.001
        assert not limited.log("undecodable", logging.WARNING, "bad bytes from %s", i)
    assert limited.log("too large", logging.WARNING, "a big one")  # another kind: its own line
    assert _lines(caplog) == ["bad bytes from a", "a big one"]
    clock.now += 10.0
    assert limited.log("undecodable", logging.WARNING, "bad bytes from %s", "b")
    assert _lines(caplog)[-1] == "bad bytes from b (and 500 more of this kind in the 10 s before)"
    assert limited.counts == {"undecodable": 502, "too large": 1}
    assert caplog.records[0].levelno == logging.WARNING and caplog.records[0].exc_info is None


def test_close_reports_what_was_held_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "test.lograte")
    limited = RateLimitedLog(logging.getLogger("test.lograte"), clock=Clock())
    for _ in range(3):
        limited.log("plain HTTP", logging.WARNING, "plain HTTP to the TLS port")
    limited.close()
    assert _lines(caplog) == [
        "plain HTTP to the TLS port",
        f"plain HTTP: 2 more since (one line per kind per {LOG_INTERVAL:g} s); the last: "
        "plain HTTP to the TLS port",
    ]


async def test_on_a_loop_the_count_comes_when_the_interval_ends(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "test.lograte")
    logger = logging.getLogger("test.lograte")
    counted = asyncio.Event()

    class Wake(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "more since" in record.getMessage():
                counted.set()

    logger.addHandler(wake := Wake())
    try:
        limited = RateLimitedLog(logger, 0.05)
        for i in range(10):
            limited.log("bug", logging.ERROR, "the remote failed: %d", i)
        await asyncio.wait_for(counted.wait(), 5.0)  # no 11th event needed
    finally:
        logger.removeHandler(wake)
    assert _lines(caplog) == [
        "the remote failed: 0",
        "bug: 9 more since (one line per kind per 0.05 s); the last: the remote failed: 9",
    ]
    assert caplog.records[-1].levelno == logging.ERROR


async def test_a_rewarder_bug_is_answered_each_time_and_logged_once_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Buggy(FakeEnv):
        def action(self, request: protocol.ActionRequest) -> None:
            raise RuntimeError("a bug")

    caplog.set_level(logging.INFO, "rewarder.server")
    env = Buggy()
    server = RewarderServer(env)
    env.server = server
    await server.start("127.0.0.1", 0)
    try:
        async with connect(f"ws://127.0.0.1:{server.port}", compression=None) as ws:
            await ws.recv()  # describe
            for i in range(20):
                await ws.send(orjson.dumps({"method": "v0.agent.action", "headers": {
                    "message_id": i, "sent_at": 0.0}, "body": {"action": [["KeyEvent", "a", True]]}
                }).decode())
                reply = orjson.loads(await ws.recv())
                assert reply["method"] == "v0.reply.error"
                assert "(RuntimeError: a bug)" in reply["body"]["message"]
    finally:
        await server.close("test over")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2, [r.getMessage() for r in errors]  # the first, and the count at close
    assert errors[0].exc_info is not None and errors[1].exc_info is None
    assert errors[1].getMessage().startswith("bug: RuntimeError: 19 more since")
