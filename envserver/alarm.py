"""The game loop's sleep, which a mode or fps change cuts short.

Holds :class:`Alarm`: the real-time loop sleeps to its next tick with :meth:`Alarm.sleep`
and waits out lockstep with :meth:`Alarm.wait`; :meth:`Alarm.wake` (a reset switching the
mode, a new fps) ends either at once, so no sleep of the old rate is finished.
"""

from __future__ import annotations

import asyncio


class Alarm:
    def __init__(self) -> None:
        self._wake = asyncio.Event()
        self._sleeper: asyncio.Future[bool] | None = None  # the loop's sleep, if asleep

    async def sleep(self, delay: float) -> bool:
        """Sleep ``delay`` seconds unless woken first (True then). A future and a timer
        handle per tick: cheaper than a task from ``asyncio.wait_for``."""
        if self._wake.is_set():
            self._wake.clear()
            return True
        loop = asyncio.get_running_loop()
        self._sleeper = waiter = loop.create_future()
        timer = loop.call_later(max(0.0, delay), _resolve, waiter, False)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._sleeper = None
            self._wake.clear()

    async def wait(self) -> None:
        """Until :meth:`wake` (lockstep: the loop stands still until real time again)."""
        await self._wake.wait()
        self._wake.clear()

    def wake(self) -> None:
        self._wake.set()
        if self._sleeper is not None:
            _resolve(self._sleeper, True)


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)
