"""send/recv's steady state in a few calls per process (issue 40: the batched lane's
``send``/``recv`` at the plain step's cost).

Holds :class:`FastArrivals`, which :class:`~remotes.arrivals.Arrivals` asks first. The
general ``send`` and ``recv`` go a remote at a time through the lane's queue, the
batches' calls and the replies' poll (about 670 Python calls a ``recv`` of 4 remotes
against 264 for a whole plain step of 8, ``benchmarks/RESULTS.md``, session ten); this
one takes the common shape whole, a process at a time: a ``send`` whose remotes are
exactly the games of one process (``batch_size`` = the games a process serves, as
``start_local`` packs a lockstep vector) sends that process its ``v0.batch.step`` with
the steady step's plan (:class:`~remotes.lockstep_fast.Group`), and a ``recv`` waits on
the processes' connections for the first whole reply, checks it as the steady step does
(:func:`~remotes.lockstep_fast.take_plain`: no end, no refusal, its frames read from the
segment) and files each remote's result as the general ``recv`` files it.

**The general path stays the one source of truth.** Each request sent here leaves the
state the general ``send`` leaves (each slot's ``pending``, ``batch`` and ``deadline``),
so the general ``recv`` takes it when this one declines, and this one takes a batch the
general ``send`` sent; a reply that is not plain is filed back as the channel files any
(``untake``) and read again the general way, which does what it always does (an
episode's end and its autoreset, a refusal, a lost process, a frame over VNC).
"""

from __future__ import annotations

import time
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

from rewarder.batch_messages import BATCH_STEP, REPLY_BATCH_STEP
from rewarder.errors import ConnectionClosed

from .batched import BatchCall
from .lockstep_fast import Group, moved_on, plan_groups, take_plain
from .lockstep_replies import POLL_SLICE
from .slot_state import Phase

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .lane import Lane
    from .lockstep import LockstepSteps
    from .slot import Slot

_CONNECTED = attrgetter("connected")


def _sent_at(entry: tuple[Group, BatchCall]) -> float:
    """When a batch out was sent (its remotes' deadline, a stall timeout after it)."""
    return entry[0].slots[0].deadline


class Arriving(Protocol):
    """What the steady way uses of :class:`~remotes.arrivals.Arrivals` (which holds it):
    its lane and steps, ``batch_size``, and each remote's state (ready, out, in)."""

    steps: LockstepSteps
    lane: Lane
    batch_size: int
    ready: list[int]
    out: list[Slot]
    results: dict[int, tuple[float, bool, bool, dict[str, Any]]]


class FastArrivals:
    """The steady ``send``/``recv`` of ``arrivals`` (see the module docstring)."""

    def __init__(self, arrivals: Arriving) -> None:
        self.arrivals = arrivals
        self.steps, self.lane = arrivals.steps, arrivals.lane
        #: False forces the general path (tests compare the two).
        self.enabled = True
        #: The groups (None: make them again first) and each one by its rows.
        self.groups: list[Group] | None = None
        self._by_rows: dict[frozenset[int], Group] = {}
        #: Requests sent and replies taken here (the rest went the general way).
        self.sent = self.taken = 0

    def forget(self) -> None:
        """Something changed outside (a reset, a connection): the groups are made again."""
        self.groups = None

    def _groups(self) -> list[Group] | None:
        """The groups, made again after :meth:`forget`; a group whose process, games and
        channels did not change is kept: what it sent last is what its reply is checked
        against, and the other process's batch is out across every general step."""
        groups = self.groups
        if groups is None and self.steps.batches is not None:
            made = plan_groups(self.steps.batches, self.lane.slots)
            if made is not None:
                made = [self._kept(group) for group in made]
            groups = self.groups = made
            self._by_rows = {} if made is None else {frozenset(g.rows): g for g in made}
        return groups

    def _kept(self, group: Group) -> Group:
        """The group as it was made before, if nothing of it changed; else ``group``."""
        old = self._by_rows.get(frozenset(group.rows))
        if (old is None or old.token != group.token or old.channel is not group.channel
                or any(a is not b for a, b in zip(old.slots, group.slots, strict=True))
                or any(a is not b for a, b in zip(old.channels, group.channels, strict=True))):
            return group
        return old

    # send ---------------------------------------------------------------------------------

    def send(self, actions: Sequence[Any], ids: list[int]) -> bool:
        """Send ``actions[j]`` to remote ``ids[j]`` (each ready: the caller checked) as one
        process's batch, if they are all of one process's games and each steps plainly;
        False (nothing sent) otherwise."""
        if not self.enabled or self._groups() is None:
            return False
        group = self._by_rows.get(frozenset(ids))
        if group is None or not self._steady(group):  # (ids: no remote twice, the caller checked)
            return False
        lane, batches = self.lane, self.steps.batches
        assert batches is not None
        full: list[Any] = [None] * lane.num
        for i, action in zip(ids, actions, strict=True):
            full[i] = action
        lane.same_step = False
        lead = group.channel
        try:
            message_id = lead.send_batch_steps(group.request(full, lane.frameskip),
                                               batches.asks_memfd(group.token))
        except (ConnectionClosed, OSError):
            self.groups = None  # (the general send sends them again, and reports the loss)
            return False
        call = BatchCall(lead, message_id, list(group.slots), batches, list(group.rows))
        deadline = time.monotonic() + lane.stall_timeout
        for slot in group.slots:
            slot.pending, slot.batch, slot.deadline = message_id, call, deadline
        arrivals = self.arrivals
        going = set(ids)
        arrivals.ready = [i for i in arrivals.ready if i not in going]
        arrivals.out += group.slots
        self.sent += 1
        return True

    def _steady(self, group: Group) -> bool:
        """Whether each remote of ``group`` may step here: running its episode, nothing out
        or in, connected on the channels the plan holds, no truncation due."""
        limit = self.lane.max_episode_steps
        for slot, session, channel in zip(group.slots, group.sessions, group.channels, strict=True):
            if (slot.phase is not Phase.RUNNING or slot.pending is not None or slot.reply is not None
                    or slot.batch is not None or session.replaced or not session.connected
                    or session.rewarder is not channel or session.shared.error is not None
                    or (limit is not None and slot.steps + 1 >= limit)):
                return False
            vnc = session.vnc
            if vnc is None or not vnc.connected:
                return False
        lead = group.channel
        return lead.connected and not lead.outstanding and all(map(_CONNECTED, group.channels))

    # recv ---------------------------------------------------------------------------------

    def read(self) -> bool:
        """The first whole process's reply among the batches out, its remotes' results
        filed (``arrivals.results``), when nothing is in yet and every remote out is one of
        those batches of ``batch_size`` remotes; False (nothing taken) otherwise."""
        arrivals = self.arrivals
        if not self.enabled or arrivals.results or self._groups() is None:
            return False
        out = self._out()
        if out is None:
            return False
        by_fd: dict[int, tuple[Group, BatchCall]] = {}
        for group, call in out:
            if call.channel.holds_reply(call.message_id):  # read already (the keeper): the general way
                return False
            by_fd[call.channel.fileno()] = (group, call)
        if any(fd < 0 for fd in by_fd):
            return False
        poller = self.steps.replies.poller_of(tuple(by_fd))  # (the general wait's)
        limit = min(slot.deadline for group, _ in out for slot in group.slots)
        while True:
            now = time.monotonic()
            if now >= limit:
                return False  # (a stall: the general wait loses the remote, and says why)
            events = poller.poll(min(limit - now, POLL_SLICE) * 1000)
            if not events and any(call.channel.holds_reply(call.message_id) for _, call in out):
                return False  # (the keeper read one meanwhile: the general way takes it)
            # The batch sent first goes first when several replies are in (poll lists them
            # in the order it watches them): one quick process never starves a slower one.
            for group, call in sorted((by_fd[fd] for fd, _ in events), key=_sent_at):
                taken = self._take(group, call)
                if taken is not None:
                    return taken

    def _out(self) -> list[tuple[Group, BatchCall]] | None:
        """Each process's batch out, if every remote out is in one of them, each of
        ``batch_size`` remotes, none in yet (else None: the general way)."""
        k, seen, limit = self.arrivals.batch_size, 0, self.lane.max_episode_steps
        out: list[tuple[Group, BatchCall]] = []
        for group in self.groups or ():
            call = group.slots[0].batch
            if call is None:
                continue
            slots = group.slots
            if (len(slots) != k or call.done or call.failure is not None or len(call.slots) != k
                    or any(a is not b for a, b in zip(call.slots, slots, strict=True))
                    or any(s.batch is not call or s.pending != call.message_id or s.reply is not None
                           or s.session.shared.last is None for s in slots)
                    or (limit is not None and max(s.steps for s in slots) + 1 >= limit)):
                return None  # (a truncation due among them: the general deliver says so)
            out.append((group, call))
            seen += k
        if not out or seen != len(self.arrivals.out):
            return None
        return out

    def _take(self, group: Group, call: BatchCall) -> bool | None:
        """``call``'s reply, if the bytes that came are it: True when plain (its results
        filed), False when not (filed back for the general way); None: not it (read)."""
        channel = call.channel
        try:
            got = channel.take_raw(call.message_id, REPLY_BATCH_STEP)
        except ConnectionClosed as exc:  # lost: the general wait reports it (as BatchCall.take)
            call.failure = exc
            call.owner.lost_with(call)
            return False
        if got is None:
            return False if channel.holds_reply(call.message_id) else None
        message, text = got
        frames = self.lane.gate.frames
        assert frames is not None
        try:
            plain = take_plain(self.steps.batches, group, message["body"], frames)
        except BaseException:  # (an interrupt: the reply waits where the general recv looks)
            channel.untake(call.message_id, BATCH_STEP, text)
            raise
        if not plain:
            channel.untake(call.message_id, BATCH_STEP, text)
            return False
        self._deliver(group)
        self.taken += 1
        return True

    def _deliver(self, group: Group) -> None:
        """Each remote's state moved on and its result filed, as the general deliver does."""
        arrivals = self.arrivals
        taken = set(group.slots)
        arrivals.out = [slot for slot in arrivals.out if slot not in taken]
        moved_on(group.slots, group.shareds, group.frames, group.numbers)
        for slot, channel, reward, frame, episode, head in zip(
                group.slots, group.channels, group.rewards, group.frames, group.numbers, group.infos,
                strict=True):
            slot.pending = slot.batch = slot.reply = slot.vnc_frame = None
            info = {**head, "episode_id": episode, "frame": frame, "remote.connected": True,
                    "text": slot.take_texts(), "rewarder.rtt": channel.rtt,
                    "rewarder.clock_skew": channel.clock_skew}
            arrivals.results[slot.index] = (float(reward), False, False, info)
