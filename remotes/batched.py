"""Batched lockstep steps: one request per remote process per vector step (issue 40).

Holds :class:`Batches`, the part of :class:`remotes.lockstep.LockstepSteps` that groups a
step's remotes by the process serving them and sends each group one ``v0.batch.step``
(rewarder/batch_messages.py) instead of one ``v0.env.step`` per remote, and
:class:`BatchCall`, one such request in flight. A remote's describe says which process
serves it (``"batch": {"process": token, "game": i}``, only from a ``serve --games K``
process); remotes whose describes name the same token, that step through shared memory
and are nothing but single-player games, go together. The request goes on the channel of
the group's first remote; the reply's frames are read from the batch's segment straight
into the rows of the vector's batch with one ``preadv``
(:class:`rewarder.shm_slots.SlotReader`), or were written there by the remote when the
steady step asked (:attr:`Batches.bank`, rewarder/shm_bank.py), and each remote's share
becomes that remote's reply, which the lockstep lane delivers as if it had come alone.

**What does not change.** Resets, autoresets and ``same_step`` episode ends go on each
remote's own channel as before (first frames through its own segment); a remote alone in
its process steps alone; a vector whose remotes each have a process of their own never
batches. A refused step raises :class:`~rewarder.errors.RemoteError` for its remote, as
a refused ``v0.env.step`` does. When the batch's connection is lost (the process killed),
every remote of the group is lost in that step (each channel is read, so each says why,
or is closed), and an away group comes back together: a remote whose probe answers
waits for the probes of the others lost with it. When the segment cannot be read (another
user, a container's own /dev/shm), that process's remotes step one by one again and
``info["shm.error"]`` says why.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rewarder import batch_messages
from rewarder.batch_messages import DESCRIBE_KEY, BatchStepReply
from rewarder.errors import ConnectionClosed, RemoteError
from rewarder.protocol import StepReply
from rewarder.shm_bank import Bank
from rewarder.shm_slots import SlotReader

from .slot import Slot
from .slot_state import Phase

if TYPE_CHECKING:
    from rewarder.blocking import BlockingRewarder

    from .lane import Lane

log = logging.getLogger(__name__)


class BatchCall:
    """One ``v0.batch.step`` in flight: its channel, its message id, its slots in order."""

    def __init__(self, channel: BlockingRewarder, message_id: int, slots: list[Slot], owner: Batches,
                 rows: list[int] | None = None) -> None:
        self.channel, self.message_id, self.slots, self.owner = channel, message_id, slots, owner
        #: The batch's row of each slot, in order (``rows``: the caller knows them).
        self.rows = [slot.index for slot in slots] if rows is None else rows
        #: Each slot's reply (or refusal) once the batch's reply is in, until taken.
        self.replies: dict[Slot, StepReply | str] = {}
        #: Slots whose frame was read into the batch from the segment.
        self.read: set[Slot] = set()
        self.failure: ConnectionClosed | None = None
        self.done = False

    def take(self, slot: Slot, read: bool, ready: bool) -> StepReply | None:
        """``slot``'s reply if the batch's is in (reading the channel first if ``read``);
        raises ConnectionClosed when the batch's connection was lost, RemoteError when
        the remote refused this slot's step."""
        if self.failure is not None:
            raise self.failure
        if not self.done:
            if slot is not self.slots[0]:  # one read per look, by the first slot's take
                return None
            try:
                reply = self.channel.take_reply(self.message_id, read, ready)
            except ConnectionClosed as exc:
                self.failure = exc
                self.owner.lost_with(self)
                raise
            except RemoteError:  # the whole batch refused: each slot hears why
                self.done = True
                raise
            if reply is None:
                return None
            self._arrived(reply)
        answer = self.replies.pop(slot, None)
        if isinstance(answer, str):
            raise RemoteError(answer, batch_messages.BATCH_STEP)
        return answer

    @property
    def answered(self) -> bool:
        """Its reply is in (the remote is done with it), its connection not lost."""
        return self.done and self.failure is None

    def _arrived(self, reply: Any) -> None:
        self.done = True
        if not isinstance(reply, BatchStepReply) or len(reply.steps) != len(self.slots):
            raise RemoteError(f"a batch step's reply does not answer its {len(self.slots)} steps",
                              batch_messages.BATCH_STEP)
        self.replies = dict(zip(self.slots, reply.steps, strict=True))
        self.owner.read_frames(self, reply)


class Batches:
    """Groups a lockstep step's remotes by process (:meth:`queue`), sends one request per
    group (:meth:`send`), and hands each remote its share (:meth:`taken`)."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self._queued: dict[str, list[tuple[Slot, int, Sequence[Any]]]] = {}
        #: The segment reader of each process token (opened once), and the one before it:
        #: a batch goes on the first held game's connection, each connection has its own
        #: segment, and around an autoreset the lead moves to another game and back.
        self._readers: dict[str, SlotReader] = {}
        self._spares: dict[str, SlotReader] = {}
        #: Tokens whose segment failed: their remotes step one by one until they reconnect.
        self._off: set[str] = set()
        #: Each slot's process token as last seen (kept while the slot is away, so the
        #: remotes lost with one process come back together).
        self.token_of: dict[Slot, str] = {}
        #: Each slot's (describe, client id, token, game) as last read from its describe
        #: (read again when either changes: a reconnect, a lease).
        self._routes: dict[Slot, tuple[Any, str | None, str | None, int]] = {}
        #: The vector's own buffers the steady step has its remotes write frames into.
        self.bank = Bank()

    def route(self, slot: Slot) -> tuple[str, int] | None:
        """``slot``'s batch token (its process's, noted in :attr:`token_of`) and its game
        there; None when it steps alone."""
        session = slot.session
        channel = session.rewarder
        describe = channel.describe if channel is not None else None
        if describe is None or session.player or not session.shared.enabled:
            return None
        route = self._routes.get(slot)
        if route is None or route[0] is not describe or route[1] is not session.client_id:
            route = self._routes[slot] = (describe, session.client_id, *_route(describe, session.client_id))
        token, game = route[2], route[3]
        if token is None or token in self._off:
            return None
        self.token_of[slot] = token
        return token, game

    def queue(self, slot: Slot, action: Sequence[Any]) -> bool:
        """Hold ``slot``'s step for its process's batch; False when it steps alone."""
        route = self.route(slot)
        if route is None:
            return False
        token, game = route
        queued = self._queued.get(token)
        if queued is None:
            self._queued[token] = [(slot, game, action)]
        else:
            queued.append((slot, game, action))
        return True

    def send(self, now: float) -> tuple[list[Slot], list[tuple[Slot, str]]]:
        """Send the queued steps, one request per process (a lone remote's as its own
        ``v0.env.step``); the slots sent, and those whose send failed with why."""
        lane = self.lane
        sent: list[Slot] = []
        failed: list[tuple[Slot, str]] = []
        queued, self._queued = self._queued, {}
        for token, group in queued.items():
            slots = [slot for slot, _, _ in group]
            lead = slots[0].session.lockstep_channel
            assert lead is not None
            try:
                if len(group) == 1:
                    slot, _, action = group[0]
                    slot.pending = lead.send_step(action, lane.frameskip, slot.session.shared.obs)
                else:
                    steps = [(game, _episode(slot), action, lane.frameskip)
                             for slot, game, action in group]
                    message_id = lead.send_batch_step(steps, self.asks_memfd(token))
                    call = BatchCall(lead, message_id, slots, self)
                    for slot in slots:
                        slot.pending, slot.batch = message_id, call
            except (ConnectionClosed, OSError) as exc:
                self.lost_channels(slots, lead)
                failed += [(slot, f"{exc}" if slot.session.lockstep_channel is lead else
                            slot.session.error or f"{exc}") for slot in slots]
                continue
            for slot in slots:
                slot.deadline = now + lane.stall_timeout
            sent += slots
        return sent, failed

    def read_frames(self, call: BatchCall, reply: BatchStepReply) -> None:
        """The batch's frames from its segment into the vector's batch, in one read."""
        frames = self.lane.gate.frames
        assert frames is not None
        if reply.into_error is not None:
            self.bank.stop(reply.into_error)
        buffer = None if reply.into is None else self.bank.named(reply.into)
        if reply.shm is None and buffer is None:
            return
        token = self.token_of.get(call.slots[0])
        try:
            if buffer is not None:
                held = buffer.read_rows(frames, call.rows)
            else:
                assert reply.shm is not None
                held = self.reader(token, reply.shm, reply.shm_fd).read_rows(frames, call.rows)
        except (OSError, ValueError) as exc:
            self._failed(call, token, exc)
            return
        read = call.read
        for slot, frame, answer in zip(call.slots, held, reply.steps, strict=True):
            if (type(answer) is StepReply and frame is not None and answer.frame == frame[0]
                    and answer.episode_id == frame[1]):
                read.add(slot)

    def asks_memfd(self, token: str) -> bool:
        """Whether process ``token``'s requests ask for a sealed memfd: its segment was
        reached through ``/proc`` (:attr:`SlotReader.reachable`)."""
        reader = self._readers.get(token)
        return reader is not None and reader.reachable

    def reader(self, token: str | None, shm: tuple[str, int, int, int],
               held: tuple[int, int] | None = None) -> SlotReader:
        """The reader of the segment ``shm`` (a reply's ``(name, height, width, stride)``;
        ``held``: its ``shm_fd``) of process ``token``: opened once, again when the
        process names another segment; OSError or ValueError when it cannot be
        (:class:`SlotReader` says why)."""
        reader = self._readers.get(token or "")
        if reader is None or reader.key != shm:
            spare = self._spares.pop(token or "", None)
            if spare is not None and spare.key == shm:
                was, reader = reader, spare
            else:
                if spare is not None:
                    spare.close()
                was, reader = reader, SlotReader(*shm, held=held)
            if token is not None:
                self._readers[token] = reader
                if was is not None:
                    self._spares[token] = was
        return reader

    def _failed(self, call: BatchCall, token: str | None, exc: OSError | ValueError) -> None:
        """The segment cannot be read: this step's frames come over VNC, and the process's
        remotes step one by one (each with its own segment) until they reconnect."""
        if token is not None:
            self._off.add(token)
        for slot in call.slots:
            slot.session.shared.error = f"batch frames: {exc}; stepping each remote on its own"
        log.warning("batch frames of %s unusable: %s", call.slots[0].session.name, exc)

    def taken(self, slot: Slot, reply: StepReply, written: set[int]) -> bool:
        """A batched slot's reply is in: whether its frame is in the batch already (else
        it must come over VNC); False for a slot that was not batched."""
        call, slot.batch = slot.batch, None
        if call is None:
            return False
        if slot not in call.read:
            return False
        session = slot.session
        session.shared.last = (reply.frame, reply.episode_id)
        session.shared.shm_frames += 1
        written.add(slot.index)
        if session.vnc is not None:
            session.vnc.pause_updates()
        return True

    def lost_with(self, call: BatchCall) -> None:
        """The batch's connection was lost: read each other remote's own channel (a
        killed process's say so at once); one still open is closed, since the step it
        was sent may or may not have happened."""
        token = self.token_of.get(call.slots[0])
        for reader in (self._readers.pop(token or "", None), self._spares.pop(token or "", None)):
            if reader is not None:
                reader.remove_if_abandoned()
                reader.close()
        self.lost_channels(call.slots, call.channel)

    def lost_channels(self, slots: list[Slot], lead: BlockingRewarder) -> None:
        """Each channel of ``slots`` but ``lead``'s, read (or closed) after the lead's loss."""
        for slot in slots:
            channel = slot.session.lockstep_channel
            if channel is None or channel is lead:
                continue
            try:
                channel.take_reply(-1, True)
            except (ConnectionClosed, OSError, RemoteError):
                pass
            if channel.connected:
                channel.close()

    def together(self, slot: Slot, answering: Any) -> bool:
        """Whether an away slot may come back now: every other away slot lost with the
        same process answers its probe too (or is coming back in this step already: its
        probe is done)."""
        token = self.token_of.get(slot)
        if token is None:
            return True
        return all(other.reconnect is None or answering(other) for other, t in self.token_of.items()
                   if t == token and other is not slot and other.phase is Phase.AWAY)

    def close(self) -> None:
        self.bank.close()
        for reader in (*self._readers.values(), *self._spares.values()):
            reader.close()
        self._spares.clear()
        self._readers.clear()


def _route(describe: Any, client_id: str | None) -> tuple[str | None, int]:
    """The batch token (process token and client id) and game index a describe names;
    None: the game is not batched."""
    batch = describe.body.get(DESCRIBE_KEY)
    if type(batch) is not dict:
        return None, 0
    token, game = batch.get("process"), batch.get("game")
    if type(token) is not str or type(game) is not int:
        return None, 0
    # A process steps in one request only the games one agent holds there: remotes
    # leased from a pool are held under each lease's own client id (remotes.pool).
    return f"{token}#{client_id or ''}", game


def _episode(slot: Slot) -> int | None:
    channel = slot.session.rewarder  # (a lockstep session's: its blocking channel)
    return channel.episode_id if channel is not None else None
