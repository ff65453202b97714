"""LoopThread: calls run on the loop thread only (the caller's thread never runs the
loop, so a caller inside a running asyncio loop, or several callers in several threads,
do not disturb it); a fork's child starts a loop of its own."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator

import pytest

from remotes.loop import LoopThread, shared_loop


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread("loop-test")
    yield thread
    thread.close()


async def where() -> threading.Thread:
    return threading.current_thread()


def test_calls_run_on_the_loop_thread(loop: LoopThread) -> None:
    assert loop.run(where()) is loop.thread
    assert loop.submit(where()).result(5) is loop.thread


def test_calls_from_inside_another_running_loop_work(loop: LoopThread) -> None:
    async def notebook_cell() -> threading.Thread:
        return loop.run(where(), timeout=5)  # a sync call, as a Jupyter cell makes it

    assert asyncio.run(notebook_cell()) is loop.thread


def test_several_threads_call_at_once(loop: LoopThread) -> None:
    errors: list[BaseException] = []
    counts = [0] * 4

    def caller(k: int) -> None:
        try:
            for _ in range(200):
                loop.run(asyncio.sleep(0), timeout=5)
                counts[k] += 1
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert counts == [200] * 4


def test_a_timeout_cancels_the_call_and_leaves_the_loop_usable(loop: LoopThread) -> None:
    with pytest.raises(TimeoutError, match="gave up after 0.05 s"):
        loop.run(asyncio.sleep(10), timeout=0.05)
    assert loop.run(where()) is loop.thread


def test_calls_from_the_loop_itself_are_refused(loop: LoopThread) -> None:
    async def nested() -> None:
        loop.run(asyncio.sleep(0))

    with pytest.raises(RuntimeError, match="called from its own loop"):
        loop.run(nested())


def test_a_forked_child_gets_a_loop_of_its_own() -> None:
    parent = shared_loop()
    assert parent.run(where()) is parent.thread
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's atexit
        code = 1
        try:
            child = shared_loop()
            ok = child is not parent and child.run(where(), timeout=5) is child.thread
            ok = ok and parent.forked
            try:
                parent.submit(where())
            except RuntimeError as exc:
                ok = ok and "parent process of a fork" in str(exc)
            else:
                ok = False
            parent.close()  # does nothing in the child (its thread is the parent's)
            code = 0 if ok else 2
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    try:
        result = os.read(read, 1)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert result == b"\x00"
    assert parent.run(where()) is parent.thread  # the parent's loop is untouched
