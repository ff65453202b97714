"""A lone remote's steady lockstep step in a few calls (issue 40, "both ends leaner").

Holds :class:`FastOne`, which :class:`~remotes.lockstep.LockstepSteps` asks first for a
step of a lane with one remote (a :class:`~remotes.env.RemoteEnv`, a vector of one). The
general step goes through the lane's machinery for any number of remotes, each call
asking again what a lone remote's steady step never changes (carried steps, autoresets,
batches, which remotes answered, a poll over the channels), about 150 Python calls a
step; the same step here is its request sent (``send_step``, as the general step sends
it), its reply taken as one blocking read and one parse (``take_raw`` of
rewarder.blocking_socket: no poll first, no filing), its frame read from the remote's
segment (``SharedFrames.take``) and a plain reply (no end, nothing heard before it)
delivered inline as :meth:`~remotes.lockstep_replies.Replies.deliver` then
:meth:`~remotes.lane.Lane.finish` deliver it; any other reply by those two.

**The general step stays the one source of truth**, as :mod:`remotes.lockstep_fast`'s:
a step is taken here only while the remote is connected, running its episode, with
nothing out, frames through shared memory, no action string and no truncation due. A
reply that is anything else (a refusal, a text or reward heard first, a lost or slow
connection, a frame not read from the segment) is filed back as the channel files any
reply (``untake``), and the step, its request already out, goes to
:meth:`LockstepSteps.finish`, which does what it always does with it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from rewarder.client_state import step_reply
from rewarder.errors import ConnectionClosed
from rewarder.protocol import REPLY_STEP, STEP

from .faults import error_text
from .lane import Batch
from .lockstep_replies import Sent
from .slot_state import Phase

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .faults import Faults
    from .lane import Lane
    from .lockstep_replies import Replies

_RUNNING = Phase.RUNNING


class Stepping(Protocol):
    """What the lone remote's step uses of :class:`~remotes.lockstep.LockstepSteps`."""

    lane: Lane
    replies: Replies
    faults: Faults

    def finish(self, sent: Sent) -> Batch: ...


class FastOne:
    """The steady step of ``steps``' lone remote (see the module docstring)."""

    def __init__(self, steps: Stepping) -> None:
        self.steps = steps
        #: False forces the general step (tests compare the two).
        self.enabled = True
        #: Steps delivered here (the rest went the general way).
        self.taken = 0

    def forget(self) -> None:
        """Something changed outside a fast step (nothing is kept between steps here)."""

    def step(self, actions: Sequence[Sequence[Any]]) -> Batch | None:
        """The step, or None when it must go the general way (nothing sent then)."""
        steps = self.steps
        lane = steps.lane
        slot = lane.slots[0]
        session = slot.session
        channel = session.lockstep_channel
        shared = session.shared
        action = actions[0]
        limit = lane.max_episode_steps
        if (not self.enabled or slot.phase is not _RUNNING or slot.pending is not None
                or slot.reply is not None or slot.batch is not None or channel is None
                or channel.outstanding or not session.connected or session.replaced
                or session.rewarder is not channel or not shared.enabled or shared.error is not None
                or type(action) is str or (limit is not None and slot.steps + 1 >= limit)):
            return None
        lane.same_step = False
        previous = lane.gate.frames
        assert previous is not None
        batch = np.empty_like(previous)  # (a new batch each step, as the general step's)
        lane.gate.frames = batch
        written: set[int] = set()
        steps.replies.written = written
        deadline = time.monotonic() + lane.stall_timeout
        try:
            message_id = channel.send_step(action, lane.frameskip, shared.obs, timeout=lane.stall_timeout)
        except (ConnectionClosed, OSError) as exc:  # as the general step's send reports it
            outcome = lane.outcome()
            rewards, _, truncated, infos = outcome
            infos[0] = steps.faults.lose(slot, error_text(exc), rewards, truncated)
            np.copyto(batch[0], previous[0])
            return steps.finish(Sent.out(outcome, [], batch, previous, written))
        slot.pending, slot.deadline = message_id, deadline
        got = None
        while got is None and time.monotonic() < deadline:
            try:
                got = channel.take_raw(message_id, REPLY_STEP, wait=True)
            except (ConnectionClosed, TimeoutError):  # the general wait reports it, or waits on
                break
            if got is None and channel.holds_reply(message_id):  # filed: not plain
                break
        reply = None if got is None else step_reply(got[0]["headers"], got[0]["body"], (message_id,))
        if reply is None or not shared.take(reply, batch[0]):
            if got is not None:  # (its frame not read: the general step reads it again, or over VNC)
                channel.untake(message_id, STEP, got[1])
            return steps.finish(Sent.out(lane.outcome(), [slot], batch, previous, written))
        # Taken, as Replies.taken takes a reply whose frame came through shared memory.
        slot.pending = slot.vnc_frame = None
        written.add(0)
        vnc = session.vnc
        if vnc is not None:
            vnc.pause_updates()
        self.taken += 1
        if reply.done or not channel.buffer.quiet() or lane.annotate is not None:
            slot.reply = reply  # (what deliver takes)
            rewards, terminated, truncated, infos = lane.outcome()
            infos[0] = steps.replies.deliver(slot, rewards, terminated, truncated)
            return lane.finish(rewards, terminated, truncated, infos, copy=False)
        # A plain reply, delivered as Replies.deliver then Lane.finish deliver it.
        slot.steps += 1
        frame = reply.frame
        slot.returned, slot.episode = frame, reply.episode_id
        seen = slot.seen
        if seen is None or frame > seen:
            slot.seen = frame
        slot.progress_at = time.monotonic()
        info = {**reply.info, "episode_id": reply.episode_id, "frame": frame, "remote.connected": True,
                "text": [], "rewarder.rtt": channel.rtt, "rewarder.clock_skew": channel.clock_skew}
        info.setdefault("instruction", slot.instruction)
        return Batch(batch, np.array((reply.reward,)), np.zeros(1, bool), np.zeros(1, bool), (info,), {})
