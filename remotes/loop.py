"""The one event loop behind the synchronous gymnasium API, and the rule for threads.

Holds :class:`LoopThread` and :func:`shared_loop`. Every env in a process runs its
real-time sessions, resets and reconnects on one asyncio loop in one daemon thread, so
64 remotes cost one thread, not 64.

**Which thread may step an env.** Any thread, one call at a time per env (an env's own
lock makes a second thread wait): several threads may each step their own envs.

- *Lockstep* runs in the calling thread on blocking sockets across episodes: steps,
  resets, autoresets, ``same_step`` episode ends, losses, connecting and closing
  (:mod:`remotes.lockstep`, :class:`rewarder.blocking.BlockingRewarder`), each new
  episode's first frame through shared memory like a step's. The loop thread is asked
  only for what lives there: a lockstep session's VNC client (connected and closed there,
  and frames over VNC when shared memory cannot be used) and the probe of a lost remote
  (the step that finds it answering connects it). No worker thread. A keepalive thread
  (:mod:`rewarder.keeper`) answers the remote's pings while the caller is busy elsewhere.
- *Everything else* (real-time steps, resets, connecting and reconnecting, VNC-only
  remotes, snapshots) is a coroutine the caller hands to the loop thread with
  :meth:`LoopThread.run` and waits for. The loop is never borrowed: the caller's thread
  never runs it.
- *In a running asyncio loop* (a Jupyter kernel, an async agent, a Ray async actor) the
  sync API works unchanged: it blocks that loop for the call, as any blocking call does;
  nothing is scheduled on the caller's loop.
- *After fork* a child starts afresh: a new loop thread on first use, a new keepalive
  thread, new locks (``os.register_at_fork``). Envs made in the parent are the parent's
  (their sockets are shared with it): a child makes its own (gymnasium's
  ``AsyncVectorEnv`` does, with fork, forkserver and spawn alike), and closing a
  parent's env in a child only forgets it.
- *Ctrl-C* interrupts the caller's call only. A real-time step or reset interrupted
  mid-way is cancelled on the loop thread; a lockstep step interrupted mid-way leaves
  its requests in flight, and the next step returns their replies (remotes.lockstep).
  Other envs, and other threads' steps, are untouched.

Session state on the loop thread (``RemoteSession``'s VNC client, a real-time
rewarder client, a real-time stepping core's slots) is read and written only by
coroutines there; a lockstep core's slots and shared-memory readers only by the thread
that steps it (the loop thread hands it VNC frames and probe results through futures);
the agent's thread gets snapshots (``remotes.stepper.Batch``, the frozen
:class:`~remotes.session.RemoteSnapshot`). Never call :meth:`LoopThread.run` from the loop
thread (it would wait on itself); ``await`` there instead.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from collections.abc import Coroutine
from concurrent.futures import Future, ThreadPoolExecutor, TimeoutError as FutureTimeout
from typing import Any, Final, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Seconds :meth:`LoopThread.close` gives the loop's tasks to finish once cancelled
#: (closing sockets), before it stops the loop anyway.
SHUTDOWN_TIMEOUT: Final = 5.0
#: Worker threads for blocking calls made from the loop (a group's ``address_of`` when a
#: lost remote is relocated, the /proc scan of :mod:`remotes.listening`): threads start
#: only as needed; lockstep channels never use them.
BLOCKING_WORKERS: Final = 256


class LoopThread:
    """An asyncio loop running forever in a daemon thread; :meth:`run` blocks on a coroutine."""

    def __init__(self, name: str = "universe-remote-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(
            ThreadPoolExecutor(BLOCKING_WORKERS, thread_name_prefix=f"{name}-blocking")
        )
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def thread(self) -> threading.Thread:
        """The loop's thread (where session state may be read)."""
        return self._thread

    @property
    def forked(self) -> bool:
        """Whether this loop belongs to another process (this one is a fork's child)."""
        return os.getpid() != self._pid

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Start ``coro`` on the loop; its future, to wait on later."""
        if self.forked:
            coro.close()
            raise RuntimeError(
                "this env was made by the parent process of a fork; make a new one in the child"
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (cancelling it on timeout, or
        when the wait is interrupted)."""
        if _running_loop() is self.loop:
            coro.close()
            raise RuntimeError("LoopThread.run() called from its own loop: await instead")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError(f"gave up after {timeout} s") from None
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Cancel every task still on the loop and let them finish (so none is destroyed
        pending, which asyncio reports as noise at exit), then stop the loop. In a
        fork's child (where the thread does not exist) it does nothing."""
        if self.forked or self.loop.is_closed():
            return
        if self._thread.is_alive():
            done = asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop)
            try:
                done.result(SHUTDOWN_TIMEOUT + 1.0)
            except (FutureTimeout, RuntimeError):
                log.debug("the loop's tasks did not finish within %s s", SHUTDOWN_TIMEOUT)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """This thread's running loop, or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


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
    """The process's loop thread, started on first use (and anew in a fork's child)."""
    global _shared
    with _lock:
        if _shared is None or _shared.loop.is_closed() or _shared.forked:
            _shared = LoopThread()
            atexit.register(_shared.close)
        return _shared


def _after_fork() -> None:
    """In a fork's child: the parent's loop thread does not exist here and the lock may
    have been held at fork; the next :func:`shared_loop` starts a new loop."""
    global _shared, _lock
    _shared = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
