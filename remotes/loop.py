"""The one event loop behind the synchronous gymnasium API, and the rule for threads.

Holds :class:`LoopThread` and :func:`shared_loop`. Every env in a process runs its
sessions on one asyncio loop in one daemon thread, so 64 remotes cost one thread, not 64.

**Threads.** Two threads meet here: the agent's (which calls ``reset``/``step``) and the
loop thread (which owns every socket). The rule:

- Session state (``RemoteSession``, its VNC and rewarder clients, the stepping core's
  slots) is read and written **only by the thread running the loop**, inside coroutines
  the agent runs with :meth:`LoopThread.run`. That is the loop thread, except during an
  inline call (``run(..., inline=True)``, what lockstep steps use): then the agent's own
  thread runs the loop for the call, saving two thread wake-ups and a GIL hand-over per
  step, and the loop thread takes the loop back after :data:`HANDBACK_IDLE` of quiet. A
  lock says who runs it; never both. A reconnect sets a session's clients to None and
  back at any moment between two of the agent's calls.
- The agent's thread receives **snapshots**: a step's observations, rewards and infos are
  fresh objects built on the loop thread and never touched by it again
  (``remotes.stepper.Batch``); what a remote is like (name, screen, describe,
  connected) is a frozen :class:`~remotes.session.RemoteState`.
- Never call :meth:`LoopThread.run` from the loop thread (it would wait on itself);
  ``await`` there instead.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Final, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Seconds :meth:`LoopThread.close` gives the loop's tasks to finish once cancelled
#: (closing sockets), before it stops the loop anyway.
SHUTDOWN_TIMEOUT: Final = 5.0
#: After an inline call (:meth:`LoopThread.run` with ``inline=True``) the loop thread
#: leaves the loop to the caller for this long, in case it calls again (a lockstep agent
#: steps back to back); then it runs the loop again, so sockets are served while the
#: agent thinks (the remote's liveness checks need answers within seconds).
HANDBACK_IDLE: Final = 0.005


class LoopThread:
    """An asyncio loop running forever in a daemon thread; :meth:`run` blocks on a coroutine."""

    def __init__(self, name: str = "universe-remote-loop") -> None:
        self.loop = asyncio.new_event_loop()
        #: Held by whichever thread runs the loop: ours, or an inline caller's.
        self._owner = threading.Lock()
        self._inline_at = 0.0  # when the last inline call ended (monotonic)
        self._inline_calls = 0
        self._closing = False
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        while not self._closing:
            with self._owner:
                if self._closing:
                    break
                self.loop.run_forever()  # until an inline caller (or close) stops it
            # An inline caller has the loop: take it back once it has been quiet a while.
            while not self._closing:
                quiet = time.monotonic() - self._inline_at
                if self._inline_calls == 0 and quiet >= HANDBACK_IDLE:
                    break
                # (A call under way: check again a whole HANDBACK_IDLE later, not sooner:
                # every wake of this thread contends for the GIL with the caller's.)
                time.sleep(HANDBACK_IDLE if self._inline_calls else HANDBACK_IDLE - quiet)

    @property
    def thread(self) -> threading.Thread:
        """The loop's thread (where session state may be read)."""
        return self._thread

    def run(
        self, coro: Coroutine[Any, Any, T], timeout: float | None = None, inline: bool = False
    ) -> T:
        """Run ``coro`` on the loop and wait for its result (cancelling it on timeout).

        ``inline``: run the loop in the calling thread for the call (taking it from the
        loop thread, which takes it back after HANDBACK_IDLE of quiet): no thread hand-off,
        for calls made back to back (lockstep steps)."""
        if asyncio._get_running_loop() is self.loop:
            coro.close()
            raise RuntimeError("LoopThread.run() called from its own loop: await instead")
        if inline:
            return self._run_inline(coro, timeout)
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError(f"gave up after {timeout} s") from None
        except BaseException:
            future.cancel()
            raise

    def _run_inline(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        self._inline_calls += 1
        try:
            if not self._owner.acquire(blocking=False):
                self.loop.call_soon_threadsafe(self.loop.stop)
                self._owner.acquire()
            try:
                task = self.loop.create_task(coro)
                try:
                    return self.loop.run_until_complete(asyncio.wait_for(task, timeout))
                except TimeoutError:
                    raise TimeoutError(f"gave up after {timeout} s") from None
                finally:
                    if not task.done():  # interrupted (Ctrl-C): the loop thread finishes it
                        task.cancel()
            finally:
                self._inline_at = time.monotonic()
                self._owner.release()
        finally:
            self._inline_calls -= 1

    def close(self) -> None:
        """Cancel every task still on the loop and let them finish (so none is destroyed
        pending, which asyncio reports as noise at exit), then stop the loop."""
        if self.loop.is_closed():
            return
        if self._thread.is_alive():
            done = asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop)
            try:
                done.result(SHUTDOWN_TIMEOUT + 1.0)
            except (FutureTimeout, RuntimeError):
                log.debug("the loop's tasks did not finish within %s s", SHUTDOWN_TIMEOUT)
            self._closing = True
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


async def _cancel_all() -> None:
    """Cancel every other task on this loop and wait (bounded) until they end."""
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=SHUTDOWN_TIMEOUT)
    await asyncio.get_running_loop().shutdown_asyncgens()


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
