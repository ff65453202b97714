"""Lockstep steps in the agent's own thread: the stepping core's fast path.

Holds :class:`LockstepSteps`, the part of :class:`~remotes.stepper.Stepper` that runs a
lockstep step, and its limits. A lockstep step is a request and a reply per remote, back
to back: each remote's :class:`~rewarder.blocking.BlockingRewarder` sends its step, then
the replies are read as they come (one blocking read for a single remote; ``poll`` over
all of them for a vector) and each frame goes from shared memory straight into the batch.
No event loop is involved, so it works the same in a script, a thread of its own, a
Jupyter kernel (whose loop runs in this thread) and a forked worker. Resets and
reconnects run on the loop thread; the step waits for them.

**Per remote, not per step.** Each remote's step request has its own deadline
(``stall_timeout``): a remote that misses it is lost (truncated, reconnected in the
background). A vector step does not wait on one slow remote for the rest: once a reply
came in, those still out get :data:`STRAGGLER_GRACE` more; a remote still out then
returns its previous frame with reward 0 and ``info["remote.waiting"] = True``, gets no
new action, and its reply is delivered by a later step (or its deadline passes). A step
interrupted by Ctrl-C leaves the same state behind: the replies not yet returned are
returned by the next step (whose actions are not sent to those remotes), so nothing is
lost and the env stays usable.
"""

from __future__ import annotations

import select
import time
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from rewarder.blocking import BlockingRewarder
from rewarder.errors import ConnectionClosed, RemoteError
from rewarder.protocol import StepReply

from .faults import error_text
from .slot import Phase, Slot

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .stepper import Batch, Stepper

#: Seconds a vector step waits, after the latest reply of this step came in, for the
#: remotes whose replies are still out before it returns without them (they are
#: ``remote.waiting``): one stopped or slow remote does not hold up the others for its
#: whole deadline. Far above a healthy remote's step on a loaded machine.
STRAGGLER_GRACE: Final = 1.0
#: Seconds past the slots' own deadlines the hand-over of VNC frames to the loop thread
#: may take before the call gives up (the slots' deadlines decide first).
_LOOP_SLACK: Final = 5.0
#: Longest single wait for replies: each slice ends with a look at every channel, so the
#: keepalive thread never takes a channel this step is reading.
POLL_SLICE: Final = 0.1


class LockstepSteps:
    """Runs a lockstep :meth:`Stepper.step` for ``core`` (its slots, frames and faults)."""

    def __init__(self, core: Stepper) -> None:
        self.core = core
        #: Rows of this step's batch that a frame was written into.
        self._written: set[int] = set()

    def step(
        self, actions: Sequence[Sequence[Any]], same_step: bool, active: Sequence[bool] | None
    ) -> Batch:
        core = self.core
        rewards, terminated, truncated, infos = core.outcome()
        core.same_step = same_step
        now = time.monotonic()
        sent: list[Slot] = []
        carried: list[Slot] = []
        starting: list[Slot] = []
        # A new batch each step, handed to the agent as it is (no copy at the end): rows of
        # remotes that send no step now keep their previous frame, copied in before anyone
        # else writes; the others are written by their reply (or copied at the end).
        previous = core.frames
        assert previous is not None
        batch = np.empty_like(previous)
        for slot in core.slots:
            i = slot.index
            if slot.phase is not Phase.RUNNING or slot.pending is not None or slot.reply is not None or (
                active is not None and not active[i]
            ):
                np.copyto(batch[i], previous[i])
        core.frames = batch  # (after the copies: an interrupt before leaves the old batch)
        self._written = set()
        for slot in core.slots:
            i = slot.index
            if active is not None and not active[i]:
                continue
            if slot.phase is Phase.AWAY:
                infos[i] = core.faults.away(slot, truncated)
                continue
            if slot.pending is None and slot.reply is None:
                self._adopt(slot, now)
            if slot.pending is not None or slot.reply is not None:
                carried.append(slot)  # a step still out (a straggler, an interrupted step)
                continue
            reason = core.faults.lost_reason(slot, now)
            if reason is not None:
                infos[i] = core.faults.lose(slot, reason, rewards, truncated)
                continue
            if slot.phase is not Phase.RUNNING:
                starting.append(slot)
                continue
            session = slot.session
            rewarder = session.rewarder
            if not isinstance(rewarder, BlockingRewarder):
                raise RuntimeError("a lockstep session needs a blocking rewarder channel")
            try:
                if core.web is not None:  # an action string goes the web way (remotes.web)
                    slot.pending = core.web.lockstep_send(
                        slot, rewarder, actions[i], core.frameskip, session.shared.obs
                    )
                else:
                    slot.pending = rewarder.send_step(actions[i], core.frameskip, session.shared.obs)
            except (ConnectionClosed, OSError) as exc:
                infos[i] = core.faults.lose(slot, error_text(exc), rewards, truncated)
                continue
            slot.deadline = now + core.stall_timeout
            sent.append(slot)
        resets = core.loop.submit(core._autoresets(starting, truncated)) if starting else None
        failed: dict[Slot, str] = {}
        try:
            over_vnc = self._wait(sent, carried)
            over_vnc += [(s, s.reply) for s in carried  # an interrupted wait for VNC
                         if s.reply is not None and s.vnc_frame is not None
                         and all(s is not t for t, _ in over_vnc)]
            if over_vnc:
                limit = max(s.deadline for s, _ in over_vnc) - time.monotonic()
                failed = core.loop.run(core.frames_over_vnc(over_vnc), max(limit, 0.0) + _LOOP_SLACK)
                self._written.update(s.index for s, _ in over_vnc if s not in failed)
        finally:
            if resets is not None:
                started = resets.result()  # also after an interrupt: their state is whole
        for slot in (*sent, *carried):
            i = slot.index
            if slot in failed:  # the step happened, its frame did not come
                reply, slot.reply, slot.vnc_frame = slot.reply, None, None
                infos[i] = core.faults.lose(slot, failed[slot], rewards, truncated)
                rewards[i] += reply.reward  # what the step earned is not lost with the frame
            elif slot.reply is not None:
                infos[i] = self._deliver(slot, rewards, terminated, truncated)
            elif not slot.session.connected:
                reason = slot.session.error or "connection lost"
                infos[i] = core.faults.lose(slot, reason, rewards, truncated)
            elif time.monotonic() >= slot.deadline:
                reason = f"stalled: no reply within stall_timeout={core.stall_timeout:g} s; reconnecting"
                infos[i] = core.faults.lose(slot, reason, rewards, truncated)
            else:
                infos[i] = {
                    "remote.connected": True, "remote.waiting": True,
                    "episode_id": slot.episode, "frame": slot.returned,
                }
        for slot in sent:
            if slot.index not in self._written:  # lost, or waiting: its previous frame
                np.copyto(batch[slot.index], previous[slot.index])
        if resets is not None:
            for slot in starting:
                infos[slot.index] = started[slot.index]
        return core.finish(rewards, terminated, truncated, infos, same_step, fresh=True)

    def _wait(self, sent: list[Slot], carried: list[Slot]) -> list[tuple[Slot, StepReply]]:
        """Read replies until every remote sent this step answered (carried ones are taken
        if in), a remote's deadline passes, or the stragglers' grace ends. Frames go
        from shared memory into the batch as replies are taken; the (slot, reply) pairs
        whose frame must come over VNC are returned."""
        over_vnc: list[tuple[Slot, StepReply]] = []
        out = [s for s in (*sent, *carried) if s.pending is not None]
        if len(out) == 1 and sent:  # one remote: one blocking read, nothing to choose
            slot = out[0]
            self._taken(slot, self._wait_one(slot), over_vnc)
            return over_vnc
        hold = set(sent) if sent else set(out)
        poller = select.poll()
        by_fd: dict[int, Slot] = {}
        for slot in out:
            fd = _rewarder(slot).fileno()
            if fd >= 0:
                by_fd[fd] = slot
                poller.register(fd, select.POLLIN)
        last_reply: float | None = None
        ready: list[Slot] = out  # first look: replies already read (the keeper's, a carried one)
        read = False
        while True:
            for slot in ready:
                if slot.pending is None:
                    continue
                try:
                    reply = _rewarder(slot).take_reply(slot.pending, read)
                except ConnectionClosed:
                    slot.pending = None
                    continue
                except RemoteError:  # the remote refused the step: the agent hears why
                    slot.pending = None
                    raise
                if reply is not None:
                    self._taken(slot, reply, over_vnc)
                    last_reply = time.monotonic()
            missing = [s for s in out if s.pending is not None and s in hold]
            if not missing:
                break
            now = time.monotonic()
            limit = min(s.deadline for s in missing)
            if last_reply is not None and len(hold) > 1:
                limit = min(limit, last_reply + STRAGGLER_GRACE)
            if now >= limit:
                break
            events = poller.poll(min(limit - now, POLL_SLICE) * 1000)
            if events:
                ready, read = [by_fd[fd] for fd, _ in events], True
            else:  # a quiet slice: look at every channel (so the keeper leaves them alone)
                ready, read = out, True
        return over_vnc

    def _adopt(self, slot: Slot, now: float) -> None:
        """A step request sent by an interrupted step before the slot noted it (Ctrl-C
        between the send and the bookkeeping) is the slot's step still out."""
        rewarder = slot.session.rewarder
        if isinstance(rewarder, BlockingRewarder):
            sent = rewarder.outstanding_step()
            if sent is not None:
                slot.pending, slot.deadline = sent, now + self.core.stall_timeout

    def _wait_one(self, slot: Slot) -> StepReply | None:
        """The lone remote's reply (None: its deadline passed or the connection ended)."""
        try:
            reply: StepReply = _rewarder(slot).wait_reply(slot.pending, slot.deadline)
        except TimeoutError:
            return None
        except (ConnectionClosed, RemoteError):
            slot.pending = None
            if not _rewarder(slot).connected:
                return None
            raise
        return reply

    def _taken(self, slot: Slot, reply: StepReply | None, over_vnc: list[tuple[Slot, StepReply]]) -> None:
        """A reply is in: keep it for delivery, its frame read into the batch."""
        if reply is None:
            return
        slot.pending = None
        slot.reply = reply
        frames = self.core.frames
        assert frames is not None
        session = slot.session
        slot.vnc_frame = None
        if session.shared.take(reply, frames[slot.index]):
            self._written.add(slot.index)
            if session.vnc is not None:
                # Nobody looks at VNC frames meanwhile: the remote need not encode them, nor
                # the loop thread decode them (a flag the loop thread reads; resumed when a
                # frame must come over VNC, and at every reset).
                session.vnc.pause_updates()
        else:
            slot.vnc_frame = reply.frame
            over_vnc.append((slot, reply))

    def _deliver(
        self, slot: Slot, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> dict[str, Any]:
        """The info of a remote whose reply this step returns (its frame is in the batch)."""
        reply, slot.reply = slot.reply, None
        assert reply is not None
        i, session = slot.index, slot.session
        rewards[i], terminated[i] = reply.reward, reply.done
        slot.steps += 1
        limit = self.core.max_episode_steps
        truncated[i] = limit is not None and slot.steps >= limit and not reply.done
        slot.returned, slot.episode = reply.frame, reply.episode_id
        if slot.seen is None or reply.frame > slot.seen:
            slot.seen = reply.frame
        slot.progress_at = time.monotonic()  # a reply is progress, whatever VNC shows
        info = {**reply.info, "episode_id": reply.episode_id, "frame": reply.frame,
                "remote.connected": True, "text": slot.take_texts()}
        info.update(session.info(vnc=session.shared.last is None))
        error = session.shared.pop_error()
        if error is not None:
            info["shm.error"] = error
        if reply.done or truncated[i]:
            slot.phase = Phase.NEEDS_RESET
        return info


def _rewarder(slot: Slot) -> BlockingRewarder:
    rewarder = slot.session.rewarder
    assert isinstance(rewarder, BlockingRewarder)
    return rewarder

