"""LoopThread: ``run(inline=True)`` runs the loop in the caller's thread for the call
(no hand-off), and the loop thread takes the loop back once the caller is quiet, so the
loop's other work (sockets, timers) goes on while the agent thinks."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from remotes.loop import HANDBACK_IDLE, LoopThread


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread("loop-test")
    yield thread
    thread.close()


async def where() -> threading.Thread:
    return threading.current_thread()


def test_inline_calls_run_in_the_callers_thread_and_others_on_the_loop_thread(loop: LoopThread) -> None:
    assert loop.run(where()) is loop.thread
    for _ in range(3):
        assert loop.run(where(), inline=True) is threading.current_thread()
    assert loop.run(where()) is loop.thread  # taken back; a plain call is served there


def test_the_loop_goes_on_between_inline_calls(loop: LoopThread) -> None:
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.001)

    async def start() -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(ticker())

    task = loop.run(start())
    loop.run(asyncio.sleep(0), inline=True)
    before = len(ticks)
    deadline = time.monotonic() + 5.0
    while len(ticks) < before + 20 and time.monotonic() < deadline:
        time.sleep(HANDBACK_IDLE)  # the caller "thinks"; it makes no call
    assert len(ticks) >= before + 20  # the loop thread ran the ticker meanwhile

    async def stop() -> None:
        task.cancel()
    loop.run(stop(), inline=True)


def test_an_inline_timeout_leaves_the_loop_usable(loop: LoopThread) -> None:
    with pytest.raises(TimeoutError, match="gave up after 0.05 s"):
        loop.run(asyncio.sleep(10), timeout=0.05, inline=True)
    assert loop.run(where(), inline=True) is threading.current_thread()
    assert loop.run(where()) is loop.thread


def test_calls_from_the_loop_itself_are_refused(loop: LoopThread) -> None:
    async def nested() -> None:
        loop.run(asyncio.sleep(0), inline=True)

    with pytest.raises(RuntimeError, match="called from its own loop"):
        loop.run(nested(), inline=True)
    with pytest.raises(RuntimeError, match="called from its own loop"):
        loop.run(nested())
