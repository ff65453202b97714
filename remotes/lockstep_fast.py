"""The batched lane's steady state in a few calls per process (issue 40, "both ends leaner").

Holds :class:`FastSteps`, which :class:`~remotes.lockstep.LockstepSteps` asks first for
a vector step when every remote goes in a batch of its process (remotes.batched). The
general step calls several functions per remote (queue, take, taken, deliver, the
session's checks), about a hundred Python calls per env-step; this one keeps a plan of
the groups (each process's lead channel, its slots and their game indices), sends one
``v0.batch.step`` per group, takes each group's reply with the same
:class:`~remotes.batched.BatchCall` the general step uses (so a lost connection or a
refusal leaves the same state behind) and, when every reply is a plain step whose frame
came through the segment, fills in the slots and the infos inline.

**The general step stays the one source of truth.** The plan is made again after any
step, reset or restore that did not come this way. A step is taken here only while
every remote is connected, running its episode, with nothing out and nothing pending;
a reply that is anything else (an episode's end, a truncation due, a refusal, a lost
connection, a frame not read from the segment, a text or a shared-memory error to
report) hands the whole step, its requests already out, to
:meth:`LockstepSteps.finish`, which does what it always does with them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from rewarder.errors import ConnectionClosed, RemoteError
from rewarder.protocol import StepReply

from .batched import BatchCall
from .lane import Batch
from .lockstep_replies import POLL_SLICE, Sent
from .slot_state import Phase
from .vector_infos import SteadyRows, batch_infos, set_columns

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rewarder.blocking import BlockingRewarder

    from .batched import Batches
    from .faults import Faults
    from .lane import Lane
    from .lockstep_replies import Replies
    from .slot import Slot


class _Group:
    """One process's share of the plan: its lead channel, its slots, their games."""

    __slots__ = ("channel", "slots", "games", "members")

    def __init__(self, channel: BlockingRewarder, slots: list[Slot], games: list[int]) -> None:
        self.channel, self.slots, self.games = channel, slots, games
        #: (slot, its own channel, its VNC client, its session) per slot.
        self.members: list[tuple[Slot, Any, Any, Any]] = [
            (slot, slot.session.rewarder, slot.session.vnc, slot.session) for slot in slots]


class Stepping(Protocol):
    """What the fast step uses of :class:`~remotes.lockstep.LockstepSteps` (which holds
    it): the lane, its batches, replies and faults, and the general step's second half."""

    lane: Lane
    batches: Batches | None
    replies: Replies
    faults: Faults

    def finish(self, sent: Sent) -> Batch: ...


class FastSteps:
    """The steady-state batched step of ``steps``' lane (see the module docstring)."""

    def __init__(self, steps: Stepping) -> None:
        self.steps = steps
        #: False forces the general step (tests compare the two).
        self.enabled = True
        #: The groups of the last plan; None: make it again before the next fast step.
        self.plan: list[_Group] | None = None
        #: Steps delivered here (the rest went the general way).
        self.taken = 0

    def forget(self) -> None:
        """Something changed outside a fast step: the plan is made again."""
        self.plan = None

    def _make_plan(self) -> list[_Group] | None:
        """The groups, if every slot may step here (else None: the general step)."""
        batches = self.steps.batches
        if batches is None:
            return None
        by_token: dict[str, tuple[BlockingRewarder, list[Slot], list[int]]] = {}
        for slot in self.steps.lane.slots:
            session = slot.session
            channel = session.lockstep_channel
            if (slot.phase is not Phase.RUNNING or slot.pending is not None or slot.reply is not None
                    or slot.batch is not None or channel is None or channel.outstanding
                    or not session.connected or session.replaced or session.shared.error is not None):
                return None
            route = batches.route(slot)
            if route is None:
                return None
            token, game = route
            _, slots, games = by_token.setdefault(token, (channel, [], []))
            slots.append(slot)
            games.append(game)
        groups = [_Group(*group) for group in by_token.values()]
        if not groups or any(len(g.slots) < 2 for g in groups):
            return None  # (a lone remote steps with its own v0.env.step: the general way)
        for slot in self.steps.lane.slots:
            # Nobody looks at VNC frames while the plan holds (as Batches.taken pauses them
            # each step): only the general step resumes them (a frame over VNC, a reset's
            # first frame), and it drops the plan.
            vnc = slot.session.vnc
            if vnc is not None:
                vnc.pause_updates()
        return groups

    def step(self, actions: Sequence[Sequence[Any]]) -> Batch | None:
        """The step, or None when it must go the general way (nothing sent then)."""
        if not self.enabled:
            return None
        plan = self.plan
        if plan is None:
            plan = self.plan = self._make_plan()
            if plan is None:
                return None
        for group in plan:  # (what may change between steps: connections, seats)
            for slot, channel, vnc, session in group.members:
                if (not channel.connected or channel.outstanding or vnc is None or not vnc.connected
                        or session.replaced or slot.phase is not Phase.RUNNING or slot.pending is not None
                        or session.rewarder is not channel):
                    self.plan = None
                    return None
        steps = self.steps
        lane = steps.lane
        batches = steps.batches
        assert batches is not None
        frameskip = lane.frameskip
        rewards, terminated, truncated, infos = lane.outcome()
        lane.same_step = False
        now = time.monotonic()
        previous = lane.gate.frames
        assert previous is not None
        batch = np.empty_like(previous)  # (a new batch each step; each row written by its reply,
        # or by the general step's copies of the previous frame)
        lane.gate.frames = batch
        written: set[int] = set()
        steps.replies.written = written
        sent: list[Slot] = []
        calls: list[BatchCall] = []
        deadline = now + lane.stall_timeout
        failed = False
        try:
            for group in plan:
                lead = group.channel
                body = [(game, channel.buffer.episode_id, actions[slot.index], frameskip)
                        for (slot, channel, _, _), game in zip(group.members, group.games, strict=True)]
                try:
                    message_id = lead.send_batch_step(body)
                except (ConnectionClosed, OSError) as exc:  # as Batches.send reports it
                    failed = True
                    batches.lost_channels(group.slots, lead)
                    for slot in group.slots:
                        reason = (f"{exc}" if slot.session.lockstep_channel is lead
                                  else slot.session.error or f"{exc}")
                        infos[slot.index] = steps.faults.lose(slot, reason, rewards, truncated)
                        np.copyto(batch[slot.index], previous[slot.index])
                    continue
                call = BatchCall(lead, message_id, group.slots, batches)
                calls.append(call)
                for slot in group.slots:
                    slot.pending, slot.batch, slot.deadline = message_id, call, deadline
                sent += group.slots
        except BaseException:
            self.plan = None
            raise
        step = Sent(False, rewards, terminated, truncated, infos, sent, [], [], set(), batch, previous,
                    written, {})
        if failed:
            return self._general(step)
        try:
            return self._finish(calls, step)
        except BaseException:
            self.plan = None
            raise

    def _general(self, sent: Sent) -> Batch:
        self.plan = None
        return self.steps.finish(sent)

    def _finish(self, calls: list[BatchCall], sent: Sent) -> Batch:
        """Every group's reply in; delivered here if all are plain, else the general way."""
        steps = self.steps
        replies = steps.replies
        by_fd = {call.channel.fileno(): call for call in calls}
        if -1 in by_fd:
            return self._general(sent)
        poller = replies.poller_of(tuple(by_fd))
        firsts: dict[BatchCall, StepReply] = {}
        try:
            return self._wait(calls, sent, firsts, poller, by_fd)
        except BaseException:  # (an interrupt, a refusal: the replies in wait where the
            self._put_back(calls, firsts)  # general step's next look finds them)
            raise

    def _wait(self, calls: list[BatchCall], sent: Sent, firsts: dict[BatchCall, StepReply],
              poller: Any, by_fd: dict[int, BatchCall]) -> Batch:
        """Read each group's reply (``firsts``: its first slot's share) until all are in."""
        lane = self.steps.lane
        limit = min(c.slots[0].deadline for c in calls)
        # First look: replies read already (by the keeper), then each as its socket has bytes.
        ready = [call for call in calls if call.channel.holds_reply(call.message_id)]
        read = False
        while True:
            for call in ready:
                if call in firsts:  # bytes for a channel whose reply is in (a ping)
                    call.channel.serve_idle()
                    continue
                lead = call.slots[0]
                try:
                    taken = call.take(lead, read, read)
                except RemoteError:
                    lead.pending = lead.batch = None
                    raise
                except ConnectionClosed:  # lost: the general step reports it, for each slot
                    return self._restore(calls, firsts, sent)
                if taken is not None:
                    lead.pending, lead.batch = None, None
                    lead.reply = taken
                    firsts[call] = taken
                elif call.done:  # (the lead's step refused without a word: general)
                    return self._restore(calls, firsts, sent)
            if len(firsts) == len(calls):
                break
            now = time.monotonic()
            if now >= limit:
                return self._restore(calls, firsts, sent)
            events = poller.poll(min(limit - now, POLL_SLICE) * 1000)
            if not events:  # a quiet slice: the general wait, its looks and its grace
                return self._restore(calls, firsts, sent)
            ready, read = [by_fd[fd] for fd, _ in events], True
        # Every reply is in: plain ones only here.
        max_steps = lane.max_episode_steps
        for call in calls:
            first = firsts[call]
            if call.replies.keys() != set(call.slots[1:]) or len(call.read) != len(call.slots):
                return self._restore(calls, firsts, sent)
            for slot in call.slots:
                answer = first if slot is call.slots[0] else call.replies[slot]
                if (type(answer) is not StepReply or answer.done
                        or (max_steps is not None and slot.steps + 1 >= max_steps)):
                    return self._restore(calls, firsts, sent)
                session = slot.session
                rewarder = session.rewarder
                if (rewarder is None or not rewarder.buffer.quiet() or session.shared.error is not None):
                    return self._restore(calls, firsts, sent)
        firsts_in = dict(firsts)
        firsts.clear()  # (delivered from here on: nothing to put back)
        return self._deliver(calls, firsts_in, sent)

    def _deliver(self, calls: list[BatchCall], firsts: dict[BatchCall, StepReply], sent: Sent) -> Batch:
        """Every reply is in and plain: each slot's state moved on as the general step's
        deliver moves it, and the vector's info built a key at a time
        (:func:`~remotes.vector_infos.set_columns`), each remote's own made only if asked."""
        lane = self.steps.lane
        n = lane.num
        rewards = sent.rewards
        heads: list[dict[str, Any]] = [{}] * n  # (each row set below: the plan holds every slot)
        episodes, frames = [0] * n, [0] * n
        rtts: list[float | None] = [None] * n
        skews: list[tuple[float, float] | None] = [None] * n
        instructions: list[Any] = [None] * n
        own = False
        now = time.monotonic()
        for call in calls:
            first = firsts[call]
            for slot in call.slots:
                reply: Any = first if slot is call.slots[0] else call.replies.pop(slot)  # (plain: checked)
                slot.pending = slot.batch = slot.reply = slot.vnc_frame = None
                session = slot.session
                frame, episode = reply.frame, reply.episode_id
                shared = session.shared
                shared.last = (frame, episode)
                shared.shm_frames += 1
                i = slot.index
                rewards[i] = reply.reward
                slot.steps += 1
                slot.returned, slot.episode = frame, episode
                if slot.seen is None or frame > slot.seen:
                    slot.seen = frame
                slot.progress_at = now
                rewarder = session.rewarder
                assert rewarder is not None  # (plain: checked)
                heads[i], episodes[i], frames[i] = reply.info, episode, frame
                rtts[i], skews[i] = rewarder.rtt, rewarder.clock_skew
                instructions[i] = slot.instruction
                if "instruction" in reply.info:  # (a remote's own: kept, as instruct keeps it)
                    own = True
        columns: dict[str, list[Any]] = {
            "episode_id": episodes, "frame": frames, "remote.connected": [True] * n,
            "text": [[] for _ in range(n)], "rewarder.rtt": rtts, "rewarder.clock_skew": skews,
            "instruction": instructions}
        if own:
            columns["instruction"] = [head.get("instruction", slots_own)
                                      for head, slots_own in zip(heads, instructions, strict=True)]
        self.taken += 1
        rows = SteadyRows(heads, columns)
        if lane.annotate is not None:  # (a browser's page and last action: each info, as ever)
            return lane.finish(rewards, sent.terminated, sent.truncated, list(rows), copy=False)
        infos = batch_infos(heads, n)
        set_columns(infos, columns, n)
        frames_now = lane.gate.frames
        assert frames_now is not None
        return Batch(frames_now, rewards, sent.terminated, sent.truncated, rows, columns=infos)

    def _restore(self, calls: list[BatchCall], firsts: dict[BatchCall, StepReply], sent: Sent) -> Batch:
        """A reply that is not plain: every group goes the general way."""
        self._put_back(calls, firsts)
        return self._general(sent)

    def _put_back(self, calls: list[BatchCall], firsts: dict[BatchCall, StepReply]) -> None:
        """Each group's first slot's reply put back where the general wait finds it."""
        for call in calls:
            first = firsts.get(call)
            lead = call.slots[0]
            if first is not None:
                lead.reply = None
                lead.pending, lead.batch = call.message_id, call
                call.replies[lead] = first
        firsts.clear()
