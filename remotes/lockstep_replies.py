"""A lockstep step's replies: waited for, taken, delivered (:class:`Replies`).

The second half of :class:`~remotes.lockstep.LockstepSteps`' step, and of
:class:`~remotes.arrivals.Arrivals`' ``recv``: the replies of the requests a step sent
are read as they come (one blocking read for a single remote; ``poll`` over all of them
for a vector, a batch's channel once for all of its games), each frame goes from shared
memory straight into the batch (a batch's with one ``preadv``, remotes.batched), and
each reply becomes its remote's reward, ends and info. See :mod:`remotes.lockstep` for
the per-remote deadlines and the stragglers' grace.
"""

from __future__ import annotations

import select
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from rewarder.blocking import BlockingRewarder
from rewarder.errors import ConnectionClosed, RemoteError
from rewarder.protocol import StepReply

from .slot import Slot
from .slot_state import SlotEvent, fire

if TYPE_CHECKING:
    from .batched import Batches
    from .lane import Lane

#: Seconds a vector step waits, after the latest reply of this step came in, for the
#: remotes whose replies are still out before it returns without them (they are
#: ``remote.waiting``): one stopped or slow remote does not hold up the others for its
#: whole deadline. Far above a healthy remote's step on a loaded machine.
STRAGGLER_GRACE: Final = 1.0
#: Longest single wait for replies: each slice ends with a look at every channel, so the
#: keepalive thread never takes a channel this step is reading.
POLL_SLICE: Final = 0.1




@dataclass(slots=True)
class Sent:
    """A lockstep step between its two halves (:meth:`LockstepSteps.send`, ``finish``)."""

    same_step: bool
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: list[dict[str, Any]]
    sent: list[Slot]
    carried: list[Slot]
    starting: list[Slot]
    reconnected: set[Slot]
    batch: np.ndarray
    previous: np.ndarray
    written: set[int]
    resets: dict[Slot, tuple[int, int | None]]

    @classmethod
    def out(cls, outcome: tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]],
            sent: list[Slot], batch: np.ndarray, previous: np.ndarray, written: set[int]) -> Sent:
        """A steady step's (remotes.lockstep_fast, remotes.lockstep_one) handed to the
        general second half: ``sent``'s requests out, no step carried, started or reset."""
        rewards, terminated, truncated, infos = outcome
        return cls(False, rewards, terminated, truncated, infos, sent, [], [], set(), batch, previous,
                   written, {})


class Replies:
    """Reads and delivers the replies of ``lane``'s lockstep steps (``batches``: the
    lane's batched requests, if any)."""

    def __init__(self, lane: Lane, batches: Batches | None) -> None:
        self.lane, self.batches = lane, batches
        #: Rows of this step's batch that a frame was written into.
        self.written: set[int] = set()
        #: The poll object of the last vector step's wait, and the descriptors it watches.
        self._poller: Any = None
        self._polled_fds: tuple[int, ...] = ()

    def wait(
        self, sent: list[Slot], carried: list[Slot], enough: int | None = None,
    ) -> list[tuple[Slot, StepReply]]:
        """Read replies until every remote sent this step answered (carried ones are taken
        if in), a remote's deadline passes, or the stragglers' grace ends; ``enough``:
        until that many of ``sent`` are no longer out (no grace: send/recv's ``recv``).
        Frames go from shared memory into the batch as replies are taken; the (slot,
        reply) pairs whose frame must come over VNC are returned."""
        over_vnc: list[tuple[Slot, StepReply]] = []
        out = [s for s in ((*sent, *carried) if carried else sent) if s.pending is not None]
        if enough is not None:
            enough -= len(sent) - len(out)  # (those already in count)
            if not out:
                return over_vnc
        look = enough is not None and enough <= 0  # one look at what came, no wait
        if len(out) == 1 and sent and out[0].batch is None and not look:  # one remote: a blocking read
            slot = out[0]
            self.taken(slot, self._wait_one(slot), over_vnc)
            return over_vnc
        hold = set(sent) if sent else set(out)
        by_fd: dict[int, list[Slot]] = {}
        for slot in out:
            fd = (slot.batch.channel if slot.batch is not None else rewarder_of(slot)).fileno()
            if fd >= 0:
                by_fd.setdefault(fd, []).append(slot)
        poller = self.poller_of(tuple(by_fd))
        last_reply: float | None = None
        ready: list[Slot] = out  # first look: replies already read (the keeper's, a carried one)
        read = look  # (then that look reads what the sockets hold)
        polled = False
        while True:
            for slot in ready:
                if slot.pending is None:
                    continue
                try:
                    call = slot.batch
                    if call is None:
                        reply = rewarder_of(slot).take_reply(slot.pending, read, polled)
                    else:
                        reply = call.take(slot, read, polled)
                except ConnectionClosed:
                    slot.pending = None
                    continue
                except RemoteError:  # the remote refused the step: the agent hears why
                    slot.pending = slot.batch = None
                    raise
                if reply is not None:
                    self.taken(slot, reply, over_vnc)
                    last_reply = time.monotonic()
            missing = [s for s in out if s.pending is not None and s in hold]
            if not missing or (enough is not None and len(out) - len(missing) >= enough):
                break
            now = time.monotonic()
            limit = min(s.deadline for s in missing)
            if last_reply is not None and len(hold) > 1 and enough is None:
                limit = min(limit, last_reply + STRAGGLER_GRACE)
            if now >= limit:
                break
            events = poller.poll(min(limit - now, POLL_SLICE) * 1000)
            if events:
                ready, read, polled = [s for fd, _ in events for s in by_fd[fd]], True, True
                for fd, _ in events:  # bytes for a channel whose replies are all in (a
                    # batch's, a ping): read them, or every poll returns at once until
                    # the others' replies come
                    if all(s.pending is None for s in by_fd[fd]):
                        rewarder_of(by_fd[fd][0]).serve_idle()
            else:  # a quiet slice: look at every channel (so the keeper leaves them alone)
                ready, read, polled = out, True, False
        return over_vnc

    def poller_of(self, fds: tuple[int, ...]) -> Any:
        """A poll object watching ``fds`` for input: the last step's when it watched the
        same descriptors (a vector's steady steps), else a new one."""
        if fds != self._polled_fds:
            self._poller = select.poll()
            for fd in fds:
                self._poller.register(fd, select.POLLIN)
            self._polled_fds = fds
        return self._poller

    def adopt(self, slot: Slot, rewarder: BlockingRewarder, now: float) -> None:
        """A step request sent by an interrupted step before the slot noted it (Ctrl-C
        between the send and the bookkeeping) is the slot's step still out."""
        sent = rewarder.outstanding_step()
        if sent is not None:
            slot.pending, slot.deadline = sent, now + self.lane.stall_timeout

    def _wait_one(self, slot: Slot) -> StepReply | None:
        """The lone remote's reply (None: its deadline passed or the connection ended)."""
        try:
            reply: StepReply = rewarder_of(slot).wait_reply(slot.pending, slot.deadline)
        except TimeoutError:
            return None
        except (ConnectionClosed, RemoteError):
            slot.pending = None
            if not rewarder_of(slot).connected:
                return None
            raise
        return reply

    def taken(self, slot: Slot, reply: StepReply | None, over_vnc: list[tuple[Slot, StepReply]]) -> None:
        """A reply is in: keep it for delivery, its frame read into the batch."""
        if reply is None:
            return
        slot.pending = None
        slot.reply = reply
        frames = self.lane.gate.frames
        assert frames is not None
        session = slot.session
        slot.vnc_frame = None
        batches = self.batches
        if slot.batch is not None and batches is not None and batches.taken(slot, reply, self.written):
            return  # (its frame came with its process's batch)
        if session.shared.take(reply, frames[slot.index]):
            self.written.add(slot.index)
            if session.vnc is not None:
                # Nobody looks at VNC frames meanwhile: the remote need not encode them, nor
                # the loop thread decode them (a flag the loop thread reads; resumed when a
                # frame must come over VNC, and at every reset).
                session.vnc.pause_updates()
        else:
            slot.vnc_frame = reply.frame
            over_vnc.append((slot, reply))

    def deliver(
        self, slot: Slot, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> dict[str, Any]:
        """The info of a remote whose reply this step returns (its frame is in the batch)."""
        reply, slot.reply = slot.reply, None
        assert reply is not None
        i, session = slot.index, slot.session
        rewards[i], terminated[i] = reply.reward, reply.done
        slot.steps += 1
        limit = self.lane.max_episode_steps
        truncated[i] = limit is not None and slot.steps >= limit and not reply.done
        slot.returned, slot.episode = reply.frame, reply.episode_id
        if slot.seen is None or reply.frame > slot.seen:
            slot.seen = reply.frame
        slot.progress_at = time.monotonic()  # a reply is progress, whatever VNC shows
        info = {**reply.info, "episode_id": reply.episode_id, "frame": reply.frame,
                "remote.connected": True, "text": slot.take_texts()}
        rewarder = session.rewarder
        if session.shared.last is None or rewarder is None:
            info.update(session.info())  # its frame came over VNC: the VNC stats too
        else:  # session.info(vnc=False), without building a dict to merge
            info["rewarder.rtt"], info["rewarder.clock_skew"] = rewarder.rtt, rewarder.clock_skew
        if session.shared.error is not None:
            info["shm.error"] = session.shared.pop_error()
        if reply.done or truncated[i]:
            fire(slot, SlotEvent.NEED_RESET)
        return info


def rewarder_of(slot: Slot) -> BlockingRewarder:
    """The slot's blocking channel; ConnectionClosed when it has none."""
    rewarder = slot.session.lockstep_channel
    if rewarder is None:
        raise ConnectionClosed(f"{slot.session.name}: its rewarder channel is not connected")
    return rewarder
