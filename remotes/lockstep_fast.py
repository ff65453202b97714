"""The batched lane's steady state in a few calls per process (issue 40, "both ends leaner").

Holds :class:`FastSteps`, which :class:`~remotes.lockstep.LockstepSteps` asks first for
a vector step when every remote goes in a batch of its process (remotes.batched). The
general step calls several functions per remote (queue, take, taken, deliver, the
session's checks), about a hundred Python calls per env-step; this one keeps a plan of
the groups (each process's lead channel, its slots and their game indices, each game's
entry of the request), sends one ``v0.batch.step`` per group, takes each group's reply
as one parsed message (``take_raw`` of rewarder.blocking_socket), checks it and reads
its frames from the segment with one ``preadv`` as soon as it is in (while the other
processes still step), and, when every reply is a plain step whose frame came through
the segment, fills in the slots and the infos inline. Where it can, it has the remotes
write the frames straight into the batch it returns (a buffer of the vector's bank,
rewarder/shm_bank.py): then only the frames' headers are read. The checks and the
columns go a process or a key at a time (``map`` over the plan's lists), not a remote at
a time: on a busy machine each Python step of the agent's is paid for in cache misses.

**The general step stays the one source of truth.** The plan is made again after any
step, reset or restore that did not come this way. A step is taken here only while
every remote is connected, running its episode, with nothing out and nothing pending;
a reply that is anything else (an episode's end, a truncation due, a refusal, a lost
connection, a frame not read from the segment, a text or a shared-memory error to
report) is filed back as the channel files any reply (``untake``), and the whole step,
its requests already out, goes to :meth:`LockstepSteps.finish`, which does what it
always does with them.
"""

from __future__ import annotations

import operator
import time
from dataclasses import replace
from itertools import repeat
from operator import attrgetter, itemgetter, methodcaller
from typing import TYPE_CHECKING, Any, Final, Protocol

import numpy as np

from rewarder.batch_messages import (
    BATCH_STEP,
    HELD_KEY,
    INTO_KEY,
    REPLY_BATCH_STEP,
    read_held,
    step_entry,
    steps_json,
)
from rewarder.errors import ConnectionClosed
from rewarder.protocol import JSON_NUMBERS

from .batched import BatchCall
from .lane import Batch
from .lockstep_replies import Sent
from .slot_state import Phase
from .vector_infos import SteadyRows, column, steady_infos

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rewarder.blocking import BlockingRewarder
    from rewarder.shm_bank import BankBuffer
    from rewarder.shm_slots import SlotReader

    from .batched import Batches
    from .faults import Faults
    from .lane import Lane
    from .lockstep_replies import Replies
    from .slot import Slot

#: A plain step's fields, in the order they are read from each game's share of a reply.
_ENTRY: Final = itemgetter("reward", "done", "frame", "episode_id", "info")
#: How many keys a plain step has (those five: an "error", or anything new, is not plain).
_ENTRY_KEYS: Final = frozenset({5})
_NUMBERS: Final = frozenset(JSON_NUMBERS)
_RUNNING: Final = Phase.RUNNING
_PHASE, _PENDING, _STEPS = attrgetter("phase"), attrgetter("pending"), attrgetter("steps")
_CONNECTED, _OUTSTANDING = attrgetter("connected"), attrgetter("outstanding")
_REPLACED, _REWARDER, _ERROR = attrgetter("replaced"), attrgetter("rewarder"), attrgetter("error")
_EPISODE, _QUIET = attrgetter("episode_id"), methodcaller("quiet")
_RTT, _SKEW, _INSTRUCTION = attrgetter("rtt"), attrgetter("clock_skew"), attrgetter("instruction")
_MEASURED = attrgetter("measured")


class Group:
    """One process's share of the plan: its lead channel, its slots, their games, each
    slot's session parts, and what each step's request reuses (each game's entry, the
    episode it names); a step's plain results once its reply is in."""

    __slots__ = ("channel", "slots", "games", "rows", "token", "channels", "sessions", "shareds",
                 "buffers", "frameskip", "entries", "episodes", "sent", "numbers", "shm", "reader",
                 "rewards", "frames", "infos", "types")

    def __init__(self, channel: BlockingRewarder, slots: list[Slot], games: list[int], token: str) -> None:
        self.channel, self.slots, self.games, self.token = channel, slots, games, token
        #: The batch's row of each slot, in order.
        self.rows = tuple(slot.index for slot in slots)
        self.sessions = [slot.session for slot in slots]
        #: Each slot's own channel (its session's rewarder), shared frames and reward buffer.
        self.channels: list[Any] = [session.rewarder for session in self.sessions]
        self.shareds = [session.shared for session in self.sessions]
        self.buffers = [channel.buffer for channel in self.channels]
        #: The types of a plain reply's dones, frames and infos, in that order.
        self.types = (bool,) * len(slots) + (int,) * len(slots) + (dict,) * len(slots)
        #: Each game's step in the request (its action set each step), and the episode it
        #: names: as the buffer said it, as sent, as the remote reads it.
        self.frameskip = -1
        self.entries: list[dict[str, Any]] = []
        self.episodes: list[int | None] = []
        self.sent: tuple[str, ...] = ()
        self.numbers: tuple[int, ...] = ()
        #: The segment the last reply named (as it names it) and its reader.
        self.shm: Any = None
        self.reader: SlotReader | None = None
        #: This step's plain results (:meth:`FastSteps._take`), in slot order.
        self.rewards: tuple[float, ...] = ()
        self.frames: tuple[int, ...] = ()
        self.infos: tuple[dict[str, Any], ...] = ()

    def request(self, actions: Sequence[Any], frameskip: int) -> bytes:
        """The steps of this step's request (rewarder.batch_messages.steps_json)."""
        entries = self.entries
        episodes = list(map(_EPISODE, self.buffers))
        if episodes != self.episodes or frameskip != self.frameskip:  # (a new plan's first step)
            entries[:] = [step_entry(game, episode, frameskip)
                          for game, episode in zip(self.games, episodes, strict=True)]
            self.episodes, self.frameskip = episodes, frameskip
            self.sent = tuple(entry["episode_id"] for entry in entries)
            self.numbers = tuple(episode or 0 for episode in episodes)
        for entry, row in zip(entries, self.rows, strict=True):
            entry["action"] = actions[row]
        return steps_json(entries)


class _Out:
    """A fast step's requests out: each group's and its message id, in send order, and
    the :class:`~remotes.batched.BatchCall` of each, made only when the step leaves the
    fast way (:meth:`calls`): a plain step, taken whole here, never needs them."""

    __slots__ = ("groups", "ids", "made", "batches", "deadline", "buffer")

    def __init__(self, batches: Batches, deadline: float, buffer: BankBuffer | None) -> None:
        self.groups: list[Group] = []
        self.ids: list[int] = []
        self.made: list[BatchCall] = []
        self.batches, self.deadline = batches, deadline
        #: The bank's buffer the remotes write the frames into (None: their segments).
        self.buffer = buffer

    def answered(self) -> bool:
        """Whether every request out has its reply in (no remote writes into
        :attr:`buffer` any more)."""
        return len(self.made) == len(self.ids) and all(call.answered for call in self.made)

    def calls(self) -> list[BatchCall]:
        """Each request's call, its slots' request noted on them (``pending``, ``batch``,
        ``deadline``) as the general step notes it, for the general step (once each)."""
        made, deadline = self.made, self.deadline
        for group, message_id in zip(self.groups[len(made):], self.ids[len(made):], strict=True):
            call = BatchCall(group.channel, message_id, group.slots, self.batches, list(group.rows))
            for slot in group.slots:
                slot.pending, slot.batch, slot.deadline = message_id, call, deadline
            made.append(call)
        return made


class Stepping(Protocol):
    """What the fast step uses of :class:`~remotes.lockstep.LockstepSteps` (which holds
    it): the lane, its batches, replies and faults, and the general step's second half."""

    lane: Lane
    batches: Batches | None
    replies: Replies
    faults: Faults

    def finish(self, sent: Sent) -> Batch: ...


class _Plan:
    """The groups, and every slot's parts over all of them (in the groups' order)."""

    __slots__ = ("groups", "slots", "channels", "vncs", "sessions", "shareds", "inverse", "fresh",
                 "measured", "rtts", "skews", "trues", "fixed")

    def __init__(self, groups: list[Group], n: int) -> None:
        self.groups = groups
        self.slots = [slot for group in groups for slot in group.slots]
        self.channels = [channel for group in groups for channel in group.channels]
        self.sessions = [session for group in groups for session in group.sessions]
        self.vncs = [session.vnc for session in self.sessions]
        self.shareds = [shared for group in groups for shared in group.shareds]
        #: Each row's place in the groups' order (None: the same, row i at place i).
        order = [slot.index for slot in self.slots]
        self.inverse = None if order == list(range(n)) else [order.index(i) for i in range(n)]
        #: No step delivered yet (the first clears what the general step left).
        self.fresh = True
        #: Each channel's ``measured`` count, round trip and clock skew when last read (in
        #: row order), every remote connected, and those three batched (copied each step).
        self.measured: list[int] = []
        self.rtts: list[float | None] = []
        self.skews: list[tuple[float, float] | None] = []
        self.trues = [True] * n
        self.fixed: dict[str, np.ndarray] = {}

    def remeasure(self, measured: list[int]) -> None:
        """Each channel's round trip and clock skew read again (a ping set them: its
        ``measured`` count moved), and the columns that do not change between pings made."""
        rtts, skews = list(map(_RTT, self.channels)), list(map(_SKEW, self.channels))
        if self.inverse is not None:
            rtts, skews = [rtts[k] for k in self.inverse], [skews[k] for k in self.inverse]
        self.measured, self.rtts, self.skews = measured, rtts, skews
        n = len(self.trues)
        self.fixed = {key: column(key, values, n) for key, values in (
            ("remote.connected", self.trues), ("rewarder.rtt", rtts), ("rewarder.clock_skew", skews))}


def plan_groups(batches: Batches, slots: Sequence[Slot]) -> list[Group] | None:
    """``slots`` by the process that steps them, each group's lead channel its first
    slot's; None unless every slot goes in a batch of two or more (a lone remote steps
    with its own v0.env.step: the general way). Nobody looks at the slots' VNC frames
    while a plan made of these holds (as Batches.taken pauses them each step): only the
    general step resumes them (a frame over VNC, a reset's first frame), and it drops
    the plan."""
    by_token: dict[str, tuple[BlockingRewarder, list[Slot], list[int], str]] = {}
    for slot in slots:
        channel = slot.session.lockstep_channel
        route = batches.route(slot)
        if route is None or channel is None:
            return None
        token, game = route
        _, members, games, _ = by_token.setdefault(token, (channel, [], [], token))
        members.append(slot)
        games.append(game)
    groups = [Group(*group) for group in by_token.values()]
    if not groups or any(len(g.slots) < 2 for g in groups):
        return None
    for slot in slots:
        vnc = slot.session.vnc
        if vnc is not None:
            vnc.pause_updates()
    return groups


class FastSteps:
    """The steady-state batched step of ``steps``' lane (see the module docstring)."""

    def __init__(self, steps: Stepping) -> None:
        self.steps = steps
        #: False forces the general step (tests compare the two).
        self.enabled = True
        #: The last plan; None: make it again before the next fast step.
        self.plan: _Plan | None = None
        #: Steps delivered here (the rest went the general way).
        self.taken = 0

    def forget(self) -> None:
        """Something changed outside a fast step: the plan is made again."""
        self.plan = None

    def _make_plan(self) -> _Plan | None:
        """The groups, if every slot may step here (else None: the general step)."""
        batches = self.steps.batches
        if batches is None:
            return None
        lane = self.steps.lane
        for slot in lane.slots:
            session = slot.session
            channel = session.lockstep_channel
            if (slot.phase is not Phase.RUNNING or slot.pending is not None or slot.reply is not None
                    or slot.batch is not None or channel is None or channel.outstanding
                    or not session.connected or session.replaced or session.shared.error is not None):
                return None
        groups = plan_groups(batches, lane.slots)
        if groups is None:
            return None
        batches.bank.settle()  # (nothing is out: no remote writes into a buffer now)
        return _Plan(groups, lane.num)

    def step(self, actions: Sequence[Sequence[Any]]) -> Batch | None:
        """The step, or None when it must go the general way (nothing sent then)."""
        if not self.enabled:
            return None
        plan = self.plan
        if plan is None:
            plan = self.plan = self._make_plan()
            if plan is None:
                return None
        steps = self.steps
        lane = steps.lane
        n = lane.num
        slots, channels, sessions, vncs = plan.slots, plan.channels, plan.sessions, plan.vncs
        max_steps = lane.max_episode_steps
        # What may change between steps (connections, seats), and a truncation due.
        if (None in vncs or not all(map(_CONNECTED, channels)) or any(map(_OUTSTANDING, channels))
                or not all(map(_CONNECTED, vncs)) or any(map(_REPLACED, sessions))
                or list(map(_PHASE, slots)).count(_RUNNING) != n
                or list(map(_PENDING, slots)).count(None) != n or list(map(_REWARDER, sessions)) != channels
                or (max_steps is not None and max(map(_STEPS, slots)) + 1 >= max_steps)):
            self.plan = None
            return None
        batches = steps.batches
        assert batches is not None
        frameskip = lane.frameskip
        lane.same_step = False
        previous = lane.gate.frames
        assert previous is not None
        buffer = self._buffer(plan, previous)
        # A new batch each step (the bank's buffer nobody holds, else a fresh array); each
        # row written by its reply, or by the general step's copies of the previous frame.
        batch = np.empty_like(previous) if buffer is None else buffer.batch()
        lane.gate.frames = batch
        written: set[int] = set()
        steps.replies.written = written
        out = _Out(batches, time.monotonic() + lane.stall_timeout, buffer)
        lost: tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]] | None = None
        sent: list[Slot] = []
        try:
            for group in plan.groups:
                lead = group.channel
                try:
                    message_id = lead.send_batch_steps(
                        group.request(actions, frameskip), batches.asks_memfd(group.token),
                        None if buffer is None else buffer.ask(group.rows))
                except (ConnectionClosed, OSError) as exc:  # as Batches.send reports it
                    out.calls()
                    if lost is None:
                        lost = lane.outcome()
                    rewards, _, truncated, infos = lost
                    batches.lost_channels(group.slots, lead)
                    for slot in group.slots:
                        reason = (f"{exc}" if slot.session.lockstep_channel is lead
                                  else slot.session.error or f"{exc}")
                        infos[slot.index] = steps.faults.lose(slot, reason, rewards, truncated)
                        np.copyto(batch[slot.index], previous[slot.index])
                    continue
                out.groups.append(group)
                out.ids.append(message_id)
                sent += group.slots
        except BaseException:
            out.calls()
            self.plan = None
            raise
        if lost is not None:
            out.calls()
            return self._general(out, sent, batch, previous, written, lost)
        try:
            return self._wait(plan, out, sent, batch, previous, written)
        except BaseException:
            self.plan = None
            raise

    def _buffer(self, plan: _Plan, previous: np.ndarray) -> BankBuffer | None:
        """The bank's buffer this step's frames go into, where every process's remote can
        reach it (its own segment was reached through ``/proc``); None: a fresh array."""
        batches = self.steps.batches
        assert batches is not None
        bank = batches.bank
        if bank.off is not None or not all(batches.asks_memfd(group.token) for group in plan.groups):
            return None
        n, height, width = previous.shape[:3]
        return bank.take(n, height, width)

    def _general(self, out: _Out, sent: list[Slot], batch: np.ndarray, previous: np.ndarray,
                 written: set[int],
                 outcome: tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]] | None = None,
                 ) -> Batch:
        """The step's second half the general way (its requests are out). A bank buffer
        a remote may still write into (its reply never came) is not handed out: the
        caller gets a copy, and the buffer is retired (dropped once nothing is out)."""
        self.plan = None
        done = self.steps.finish(Sent.out(outcome or self.steps.lane.outcome(), sent, batch, previous,
                                          written))
        buffer = out.buffer
        if buffer is None:
            return done
        if out.answered():
            out.batches.bank.handed(buffer)
            return done
        buffer.retired = True
        kept = self.steps.lane.gate.frames = done.obs.copy()  # (the next step's previous frames too)
        for call in out.made:  # (a late write may have landed in those rows: their frames again)
            if not call.answered:
                kept[call.rows] = previous[call.rows]
        return replace(done, obs=kept)

    def _wait(self, plan: _Plan, out: _Out, sent: list[Slot], batch: np.ndarray,
              previous: np.ndarray, written: set[int]) -> Batch:
        """Each group's reply taken in turn (every one is needed: one blocking read each,
        rewarder.blocking_socket's ``take_raw``) and checked as it comes (:meth:`_take`),
        while the later groups' processes still step; delivered here if all are plain,
        else every one goes the general way. A reply read already (by the keeper) makes
        ``take_raw`` return None at once: the general way."""
        taken: list[bytes | None] = [None] * len(out.ids)
        limit = out.deadline
        plain = True
        try:
            for j, (group, message_id) in enumerate(zip(out.groups, out.ids, strict=True)):
                channel = group.channel
                got = None
                while got is None and time.monotonic() < limit:
                    try:
                        got = channel.take_raw(message_id, REPLY_BATCH_STEP, wait=True)
                    except ConnectionClosed as exc:  # lost: the general step reports it (as BatchCall.take)
                        call = out.calls()[j]
                        call.failure = exc
                        call.owner.lost_with(call)
                        break
                    except TimeoutError:  # a quiet slice: the general wait, its looks and its grace
                        break
                    if got is None and channel.holds_reply(message_id):  # filed: not plain
                        break
                if got is None:
                    plain = False
                    break
                taken[j] = got[1]
                if not take_plain(self.steps.batches, group, got[0]["body"], batch, out.buffer):
                    plain = False
                    break
        except BaseException:  # (an interrupt: the replies wait where the general step looks)
            out.calls()
            self._untake(out, taken)
            raise
        if plain:
            if out.buffer is not None:
                out.batches.bank.handed(out.buffer)
            return self._deliver(plan, batch)  # (taken for good)
        out.calls()
        self._untake(out, taken)
        return self._general(out, sent, batch, previous, written)

    @staticmethod
    def _untake(out: _Out, taken: list[bytes | None]) -> None:
        """Replies taken here filed where the general step takes them."""
        for group, message_id, text in zip(out.groups, out.ids, taken, strict=True):
            if text is not None:
                group.channel.untake(message_id, BATCH_STEP, text)
        taken[:] = [None] * len(taken)

    def _deliver(self, plan: _Plan, batch: np.ndarray) -> Batch:
        """Each slot's state moved on as the general step's deliver moves it, and the
        vector's info built (:func:`~remotes.vector_infos.steady_infos`; each remote's
        own made only if asked)."""
        lane = self.steps.lane
        n = len(slots := plan.slots)
        frames: Any = ()
        episodes: Any = ()
        heads: Any = ()
        rewards: Any = ()
        for group in plan.groups:
            frames += group.frames
            episodes += group.numbers
            heads += group.infos
            rewards += group.rewards
        if plan.fresh:  # (the plan's first step: what the general step left cleared, as its
            plan.fresh = False  # deliver clears it; nothing sets these while the plan holds)
            for slot in slots:
                slot.reply = slot.vnc_frame = None
        # (``pending``, ``batch`` and ``deadline`` were never set: see _Out)
        moved_on(slots, plan.shareds, frames, episodes)
        measured = list(map(_MEASURED, plan.channels))
        if measured != plan.measured:  # (a ping since: each channel's read again)
            plan.remeasure(measured)
        instructions = list(map(_INSTRUCTION, slots))
        inverse = plan.inverse
        if inverse is None:
            frames, episodes, heads, rewards = list(frames), list(episodes), list(heads), list(rewards)
        else:  # (rows in the groups' order: each list put in row order)
            frames, episodes, heads, rewards, instructions = (
                [values[k] for k in inverse] for values in (frames, episodes, heads, rewards, instructions))
        columns: dict[str, list[Any]] = {  # (the plan's lists: nobody changes them)
            "episode_id": episodes, "frame": frames, "remote.connected": plan.trues,
            "text": [[] for _ in range(n)], "rewarder.rtt": plan.rtts, "rewarder.clock_skew": plan.skews,
            "instruction": instructions}
        if any(map(operator.contains, heads, repeat("instruction"))):  # (a remote's own: kept,
            columns["instruction"] = [head.get("instruction", slots_own)  # as instruct keeps it)
                                      for head, slots_own in zip(heads, instructions, strict=True)]
        self.taken += 1
        rows = SteadyRows(heads, columns)
        rewards_out = np.array(rewards, dtype=np.float64)
        terminated, truncated = np.zeros(n, bool), np.zeros(n, bool)
        if lane.annotate is not None:  # (a browser's page and last action: each info, as ever)
            return lane.finish(rewards_out, terminated, truncated, list(rows), copy=False)
        fixed = {key: array.copy() for key, array in plan.fixed.items()}  # (fresh: the agent's own)
        return Batch(batch, rewards_out, terminated, truncated, rows,
                     columns=steady_infos(heads, columns, n, fixed))


def moved_on(slots: Sequence[Slot], shareds: Sequence[Any], frames: Sequence[int],
             episodes: Sequence[int]) -> None:
    """Each slot one plain step on, its frame (of its episode) read from the segment: the
    state the general deliver moves on (the steady step's, send/recv's steady recv)."""
    now = time.monotonic()
    for slot, shared, frame, episode in zip(slots, shareds, frames, episodes, strict=True):
        slot.steps += 1
        slot.returned, slot.episode, slot.progress_at = frame, episode, now
        seen = slot.seen  # (the newest frame seen: this one, unless one was newer)
        if seen is None or seen < frame:
            slot.seen = frame
        shared.last = (frame, episode)
        shared.shm_frames += 1


def take_plain(batches: Batches | None, group: Group, body: dict[str, Any], batch: np.ndarray,
               buffer: BankBuffer | None = None) -> bool:
    """Whether ``group``'s reply is plain (each game's step as the general step reads
    it: no end, no refusal, the episode it was sent for, nothing else heard since,
    its frame read from the segment into ``batch``, or written by the remote into
    ``buffer``, whose rows ``batch`` is); its results kept in ``group``.
    False: nothing changed but rows of ``batch`` (the general way)."""
    entries = body.get("steps")
    if type(entries) is not list or len(entries) != len(group.slots):
        return False
    try:
        fields = list(map(_ENTRY, entries))
    except (KeyError, TypeError):
        return False
    rewards, dones, frames, episodes, infos = zip(*fields, strict=True)
    if (episodes != group.sent or any(dones) or tuple(map(type, dones + frames + infos)) != group.types
            or not _NUMBERS.issuperset(map(type, rewards)) or set(map(len, entries)) != _ENTRY_KEYS
            or not all(map(_QUIET, group.buffers))
            or list(map(_ERROR, group.shareds)).count(None) != len(entries)):
        return False
    if buffer is not None:  # (written in place: its headers say so, else the general step
        if body.get(INTO_KEY) != buffer.name or not buffer.holds(group.rows, frames, group.numbers):
            return False  # reads them where the reply says, and says why not)
    elif not _read_segment(batches, group, body, batch, frames):
        return False
    group.rewards, group.frames, group.infos = rewards, frames, infos
    return True


def _read_segment(batches: Batches | None, group: Group, body: dict[str, Any], batch: np.ndarray,
                  frames: tuple[int, ...]) -> bool:
    """``group``'s frames read from the segment its reply names into ``batch``: whether
    each slot held the frame its reply says (else the general step reads them again)."""
    shm = body.get("shm")
    reader = group.reader
    if shm != group.shm or reader is None:
        if type(shm) is not list or len(shm) != 4 or batches is None:
            return False
        try:
            reader = group.reader = batches.reader(group.token, (shm[0], shm[1], shm[2], shm[3]),
                                                   read_held(body.get(HELD_KEY)))
        except (OSError, ValueError, TypeError):  # (the general step says why)
            return False
        group.shm = shm
    try:
        return reader.read_plain(batch, group.rows, frames, group.numbers)
    except (OSError, ValueError):  # (the general step reads it again, and says why)
        group.shm = group.reader = None
        return False
