"""``send``/``recv`` with ``batch_size`` < n: the replies of whichever remotes answer first.

Holds :class:`Arrivals`, what :class:`~remotes.vector.RemoteVectorEnv` steps with when it
was made with ``batch_size=k`` below its ``num_envs`` (ALE's ``AtariVectorEnv`` and
EnvPool's asynchronous mode, by the same names): ``send(actions, env_ids)`` sends each
named remote its step and returns at once; ``recv()`` waits until ``k`` remotes have a
result and returns theirs (``k`` rows, ``info["env_id"]`` naming them, in the order they
came), while the others step on. An agent thus computes the next actions of the remotes
that answered while the slower ones (or the other processes) still step.

Each remote is in one of three states: **ready** (its result was returned by the last
``recv`` or by ``reset``: it takes an action), **out** (a step sent, its reply not yet
read), or **in** (its result waits for a ``recv``). ``send`` takes ready remotes only.

Everything a step guarantees holds per remote, as in a whole step
(:mod:`remotes.lockstep`): the step after an episode's end is that remote's autoreset
(its first frame, reward 0; the reset is sent and waited for in ``send``), a remote
whose connection is lost gives ``truncated=True`` and ``info["remote.error"]`` in the
result that sees it (its row keeps its last frame), an away remote idles and comes back.
The frames go from shared memory into one array of every remote's newest frame
(:attr:`Lane.frames`, written in place), of which ``recv`` copies its ``k`` rows.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .arrivals_fast import FastArrivals
from .lockstep_vnc import frames_over_vnc
from .slot import Slot, instruct

if TYPE_CHECKING:
    from .lockstep import LockstepSteps


class Arrivals:
    """``send``/``recv`` over ``steps``' remotes, ``batch_size`` results a ``recv``."""

    def __init__(self, steps: LockstepSteps, batch_size: int) -> None:
        self.steps, self.lane, self.batch_size = steps, steps.lane, batch_size
        n = self.lane.num
        #: Remotes whose result was returned (or reset): they take the next action.
        self.ready: list[int] = list(range(n))
        #: Remotes whose step is sent and whose result is not in yet.
        self.out: list[Slot] = []
        #: Results in, by remote, in the order they came: (reward, terminated,
        #: truncated, info).
        self.results: dict[int, tuple[float, bool, bool, dict[str, Any]]] = {}
        #: The steady state's send and recv, a process at a time (remotes.arrivals_fast).
        self.fast = FastArrivals(self)

    def restart(self) -> None:
        """A reset: every remote is ready, nothing is out or in; the frames are written
        in place from now on, so not into the array the reset returned."""
        self.ready = list(range(self.lane.num))
        self.out, self.results = [], {}
        self.fast.forget()
        frames = self.lane.frames
        if frames is not None:
            self.lane.frames = frames.copy()

    def send(self, actions: Sequence[Any], env_ids: Sequence[int] | None) -> None:
        """Send ``actions[j]`` to remote ``env_ids[j]`` (default: the remotes the last
        ``recv`` or ``reset`` returned); each must be ready. ValueError says which is not."""
        n = self.lane.num
        ids = list(self.ready) if env_ids is None else [int(i) for i in env_ids]
        if len(actions) != len(ids):
            raise ValueError(f"{len(actions)} actions for {len(ids)} env ids ({ids}): give one per env")
        ready = set(self.ready)
        for i in ids:
            if not 0 <= i < n:
                raise ValueError(f"env id {i} is not one of this vector's {n} remotes (0..{n - 1})")
            if i not in ready:
                raise ValueError(
                    f"env {i} is not ready: its step is out or its result waits for recv() "
                    f"(ready now: {sorted(ready)}); call recv() first"
                )
        if len(set(ids)) != len(ids):
            raise ValueError(f"env ids {ids} name a remote twice: one action per remote")
        if self.fast.send(actions, ids):
            return
        self.fast.forget()
        full: list[Any] = [[] for _ in range(n)]
        active = [False] * n
        for i, action in zip(ids, actions, strict=True):
            full[i], active[i] = action, True
        steps = self.steps
        if self.out:  # replies in already come before the results this send makes at once
            self._read(0)
        sent = steps.send(full, False, active, in_place=True)
        self.ready = [i for i in self.ready if not active[i]]
        self.out += [*sent.sent, *sent.carried]  # (carried: a step an interrupt left out)
        going = {s.index for s in self.out}
        rewards, terminated, truncated, infos = sent.rewards, sent.terminated, sent.truncated, sent.infos
        if sent.starting:  # autoresets: waited for here (each episode's first step)
            for i, info in steps.autoresets(sent.starting, sent.resets, truncated, sent.reconnected).items():
                infos[i] = info
        for i in ids:  # lost, idle or reset in the send: their results are in already
            if i not in going:
                self._result(i, rewards, terminated, truncated, infos[i])

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]], np.ndarray]:
        """Wait until ``batch_size`` results are in; theirs (frames, rewards, terminated,
        truncated, infos, env ids), in the order they came."""
        k = self.batch_size
        if len(self.results) + len(self.out) < k:
            raise ValueError(
                f"recv() needs {k} remotes stepping or answered, and {len(self.results)} are in, "
                f"{len(self.out)} out: send() actions for more (ready: {self.ready})"
            )
        while len(self.results) < k:
            if not self.fast.read():
                self.fast.forget()
                self._read(k - len(self.results))
        ids = list(self.results)[:k]
        got = [self.results.pop(i) for i in ids]
        self.ready += ids
        frames = self.lane.frames
        assert frames is not None
        index = np.array(ids, dtype=np.int64)
        infos = [r[3] for r in got]
        instruct([self.lane.slots[i] for i in ids], infos)
        return (frames[index], np.array([r[0] for r in got], np.float64), np.array([r[1] for r in got], bool),
                np.array([r[2] for r in got], bool), infos, index)

    def _read(self, enough: int) -> None:
        """Read replies until ``enough`` more remotes are in (0: what came, no wait) or a
        deadline passes: each becomes a result, a remote whose deadline passed a loss."""
        steps, lane = self.steps, self.lane
        out = [s for s in self.out if s.pending is not None or s.reply is not None]
        n = lane.num
        rewards, terminated, truncated = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)
        written: set[int] = set()
        steps.replies.written = written
        over_vnc = steps.replies.wait(out, [], enough)
        failed = frames_over_vnc(lane, over_vnc, written) if over_vnc else {}
        still: list[Slot] = []
        now = time.monotonic()
        for slot in out:
            i = slot.index
            if slot in failed:  # the step happened, its frame did not come
                reply, slot.reply, slot.vnc_frame = slot.reply, None, None
                info = steps.faults.lose(slot, failed[slot], rewards, truncated)
                if reply is not None:
                    rewards[i] += reply.reward
            elif slot.reply is not None:
                info = steps.replies.deliver(slot, rewards, terminated, truncated)
            elif slot.pending is None or not slot.session.connected:
                slot.pending = slot.batch = None
                info = steps.faults.lose(slot, slot.session.error or "connection lost", rewards, truncated)
            elif now >= slot.deadline:
                slot.pending = slot.batch = None
                reason = f"stalled: no reply within stall_timeout={lane.stall_timeout:g} s; reconnecting"
                info = steps.faults.lose(slot, reason, rewards, truncated)
            else:
                still.append(slot)
                continue
            self._result(i, rewards, terminated, truncated, info)
        self.out = still

    def _result(
        self, i: int, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
        info: dict[str, Any],
    ) -> None:
        self.results[i] = (float(rewards[i]), bool(terminated[i]), bool(truncated[i]), info)
