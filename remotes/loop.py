"""The one event loop behind the synchronous gymnasium API.

Holds :class:`LoopThread` and :func:`shared_loop`. Every env in a process runs its
sessions on one asyncio loop in one daemon thread, so 64 remotes cost one thread, not 64.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An asyncio loop running forever in a daemon thread; :meth:`run` blocks on a coroutine."""

    def __init__(self, name: str = "universe-remote-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (cancelling it on timeout)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("LoopThread.run() called from its own loop: await instead")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError(f"gave up after {timeout} s") from None
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


_shared: LoopThread | None = None
_lock = threading.Lock()


def shared_loop() -> LoopThread:
    """The process's loop thread, started on first use."""
    global _shared
    with _lock:
        if _shared is None or _shared.loop.is_closed():
            _shared = LoopThread()
            atexit.register(_shared.close)
        return _shared
