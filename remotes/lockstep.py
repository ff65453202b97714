"""Lockstep steps in the agent's own thread: the stepping lane's fast path.

Holds :class:`LockstepSteps`, the stepping core's lane that runs a lockstep step (its
replies are read by :mod:`remotes.lockstep_replies`). A lockstep step is a request and
a reply per remote, back to back: each remote's
:class:`~rewarder.blocking.BlockingRewarder` sends its step, then the replies are read
as they come (one blocking read for a single remote; ``poll`` over all of them for a
vector) and each frame goes from shared memory straight into the batch.
No event loop is involved, so it works the same in a script, a thread of its own, a
Jupyter kernel (whose loop runs in this thread) and a forked worker.

**Across episodes too.** Resets, autoresets (sent with the step's requests, read after
its replies) and ``same_step`` episode ends run here the same way, and a new episode's
first frame comes through shared memory as a step's does (``obs="shm"`` on the reset).
Connecting and closing a lockstep session run here too (its VNC half on the loop thread,
where VNC lives). The loop thread is asked for only what lives there: frames over VNC
when shared memory cannot be used, and probing a lost remote until it answers (the step
that finds it answering connects and resets it here; remotes.faults).

**The steady state first.** A vector step whose remotes all go in batches of their
processes, nothing unusual about any of them, is taken by :mod:`remotes.lockstep_fast`
(a few calls per process); anything else, and every step it hands back, comes here.

**Per remote, not per step.** Each remote's step request has its own deadline
(``stall_timeout``): a remote that misses it is lost (truncated, reconnected in the
background). A vector step does not wait on one slow remote for the rest: once a reply
came in, those still out get :data:`~remotes.lockstep_replies.STRAGGLER_GRACE` more; a
remote still out then returns its previous frame with reward 0 and ``info["remote.waiting"] = True``, gets no
new action, and its reply is delivered by a later step (or its deadline passes). A step
interrupted by Ctrl-C leaves the same state behind: the replies not yet returned are
returned by the next step (whose actions are not sent to those remotes), so nothing is
lost and the env stays usable.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from rewarder.errors import ConnectionClosed, RewarderError
from rewarder.protocol import ResetReply
from vncdriver.errors import VNCError

from .batched import Batches
from .faults import RECONNECT_ATTEMPT_TIMEOUT, Faults, error_text, relocate
from .lockstep_fast import FastSteps
from .lockstep_one import FastOne
from .lockstep_replies import Replies, Sent, rewarder_of
from .lockstep_vnc import LOOP_SLACK, MIN_FRAME_WAIT, frames_over_vnc, vnc_frame
from .session import RESET_TIMEOUT, RemoteUnavailable
from .slot import Slot
from .slot_state import Phase
from .web import work_seconds

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .lane import Batch, Lane
    from .web import WebSteps

class LockstepSteps:
    """Runs lockstep connects, resets and steps of ``lane``'s slots, all in the calling
    thread, with ``faults`` deciding losses and ``web`` the page side (if the env has one)."""

    def __init__(self, lane: Lane, faults: Faults, web: WebSteps | None) -> None:
        self.lane, self.faults, self.web = lane, faults, web
        #: One request per remote process per step (remotes.batched); not for web envs.
        self.batches = Batches(lane) if web is None else None
        #: Reads and delivers the replies (remotes.lockstep_replies).
        self.replies = Replies(lane, self.batches)
        #: The steady step in a few calls: the batched lane's, a plan per process
        #: (remotes.lockstep_fast); a lone remote's, its own v0.env.step (remotes.lockstep_one).
        self.fast: FastSteps | FastOne | None = (
            FastOne(self) if lane.num == 1 and web is None
            else FastSteps(self) if self.batches is not None else None)

    # Connecting ----------------------------------------------------------------------------

    def connect(self) -> None:
        """Connect every session from this thread (each one's VNC meanwhile on the loop);
        raise :class:`RemoteUnavailable` naming those that did not answer (after closing
        the others)."""
        lane = self.lane
        failed: list[RemoteUnavailable] = []
        try:
            for session in lane.sessions:
                try:
                    session.connect_here(lane.loop)
                except RemoteUnavailable as exc:
                    failed.append(exc)
        except BaseException:
            self.close()
            raise
        if failed:
            self.close()
            if len(failed) == 1 and lane.num == 1:
                raise failed[0]
            raise RemoteUnavailable.several(failed, lane.num)

    def close(self) -> None:
        """Close every session from this thread (their VNC clients together, on the loop)."""
        lane = self.lane
        if self.batches is not None:
            self.batches.close()
        closing = [s.close_here(lane.loop, wait=False) for s in lane.sessions]
        waits = [f for f in closing if f is not None]
        if waits and not lane.loop.forked:
            try:
                lane.loop.run(_all(waits))
            except (RuntimeError, TimeoutError):
                pass

    def come_back(self, slot: Slot) -> None:
        """An explicit reset of an away slot: stop probing and connect it now (dialling
        for up to ``start_timeout``)."""
        lane = self.lane
        probe, slot.reconnect = slot.reconnect, None
        if probe is not None:
            probe.cancel()
        session = slot.session
        if session.locate is not None and not lane.loop.run(relocate(session)):
            raise RemoteUnavailable(session.name, f"has no remote to connect to ({slot.error})")
        session.connect_here(lane.loop)

    def _back(self, slot: Slot, same_step: bool) -> bool:
        """Whether an away slot is back in this step: its remote answers the probe, no
        idle stretch must end first (remotes.stepper, "Faults"), and it connects."""
        faults = self.faults
        return (faults.answering(slot) and slot.away_steps == 0 and not same_step
                and (self.batches is None or self.batches.together(slot, faults.answering))
                and self._reconnect(slot))

    def _away(self, slot: Slot, truncated: np.ndarray | None) -> dict[str, Any]:
        """A step of an away slot that is not back in it: idle (also while it waits for the
        others lost with its process: remotes.batched), or its idle stretch ends."""
        faults = self.faults
        if (self.batches is not None and faults.answering(slot)
                and not self.batches.together(slot, faults.answering)):
            slot.away_steps += 1  # (an idle step: its stretch ends with the others')
            return {"remote.connected": False, "remote.error": slot.error}
        return faults.away(slot, truncated)

    def _reconnect(self, slot: Slot) -> bool:
        """The step that finds a lost remote answering connects it here; False (probing
        again, the slot idles) if that fails."""
        lane, session = self.lane, slot.session
        try:
            if session.locate is not None and not lane.loop.run(relocate(session)):
                raise RemoteUnavailable(session.name, "has no remote to connect to yet")
            session.connect_here(lane.loop, RECONNECT_ATTEMPT_TIMEOUT)
            self.faults.check_size(session)
        except (RemoteUnavailable, ValueError) as exc:
            slot.error = f"reconnecting: {error_text(exc)}"
            self.faults.reconnect_later(slot)
            return False
        slot.reconnect = None
        return True

    # Resets --------------------------------------------------------------------------------

    def reset(self, seeds: Sequence[int | None], env_id: str | None) -> list[dict[str, Any]]:
        """Start a new episode on every remote (switching to ``env_id`` if given),
        reconnecting those that are away first; each first frame into a new
        :attr:`Lane.frames`; the infos. Raises :class:`RemoteUnavailable`."""
        lane = self.lane
        for slot, seed in zip(lane.slots, seeds, strict=True):
            self._drop_step(slot)
            slot.rng = None if seed is None else np.random.default_rng(seed)
            session = slot.session
            if slot.phase is Phase.AWAY or not session.connected or session.replaced:
                self.come_back(slot)
        sent = {}
        for slot, seed in zip(lane.slots, seeds, strict=True):
            if self.web is not None:
                self.web.before_reset_here(slot, True)
            sent[slot] = self._send_reset(slot, seed, env_id)
        deadline = time.monotonic() + RESET_TIMEOUT
        replies = {slot: self._reset_reply(slot, sent[slot], seed, env_id, deadline)
                   for slot, seed in zip(lane.slots, seeds, strict=True)}
        # A reset may switch the env (env_id here or the stepper's): the replies' segments
        # say the new screen's size before VNC may have heard of it.
        lane.configure({slot.session: (reply.shm[2], reply.shm[1])
                        for slot, reply in replies.items() if reply.shm is not None})
        previous = lane.frames
        assert previous is not None
        lane.frames = np.empty_like(previous)
        infos = []
        for slot, reply in replies.items():
            self._begin(slot, reply, deadline)
            info: dict[str, Any] = {"episode_id": reply.episode_id}
            if slot.returned is not None:
                info["frame"] = slot.returned
            info["text"] = list(rewarder_of(slot).peek().text)  # the instruction a task sent with its reset
            infos.append(info)
        return infos

    def restore(self, states: dict[int, tuple[str | None, bytes | None]]) -> dict[int, dict[str, Any]]:
        """Restore remotes by index, each to a snapshot's token or bytes (docs/snapshots.md):
        a new episode each, its restored frame into :attr:`Lane.frames`; their infos.
        :class:`~rewarder.errors.RemoteError` says why a remote refused."""
        slots = [self.lane.slots[i] for i in states]
        sent = {}
        deadline = time.monotonic() + RESET_TIMEOUT  # (the sends' too: a state may be megabytes)
        for slot in slots:  # all sent first: the remotes restore at the same time
            self._drop_step(slot)
            slot.session.shared.new_episode()
            sent[slot] = rewarder_of(slot).send_restore(*states[slot.index], obs=slot.session.shared.obs,
                                                      timeout=max(deadline - time.monotonic(), 0.0))
        previous = self.lane.frames
        assert previous is not None
        self.lane.frames = previous.copy()  # the last step's observations stay as returned
        infos = {}
        for slot in slots:
            rewarder = rewarder_of(slot)
            reply: ResetReply = rewarder.wait_reply(sent[slot], deadline)
            rewarder.wait_for_state("running", reply.episode_id, max(deadline - time.monotonic(), 0.0))
            self._begin(slot, reply, deadline)
            infos[slot.index] = {"episode_id": reply.episode_id, "frame": slot.returned}
        return infos

    def _drop_step(self, slot: Slot) -> None:
        """An interrupted step's reply is of no use once a reset is under way."""
        rewarder = slot.session.lockstep_channel
        if rewarder is not None:
            rewarder.drop_outstanding()
        slot.pending = slot.reply = slot.batch = None
        if self.fast is not None:
            self.fast.forget()

    def _send_reset(self, slot: Slot, seed: int | None, env_id: str | None) -> int:
        """Send the slot's reset (its first frame into shared memory if it can)."""
        lane, session = self.lane, slot.session
        session.shared.new_episode()
        try:
            return rewarder_of(slot).send_reset(
                env_id=env_id or lane.env_id, seed=seed, fps=lane.requested_fps,
                mode=session.mode_request(lane.mode), obs=session.shared.obs,
            )
        except (RewarderError, OSError, AssertionError) as exc:
            raise RemoteUnavailable(session.name, "reset failed", exc) from exc

    def _reset_reply(
        self, slot: Slot, message_id: int, seed: int | None, env_id: str | None, deadline: float,
    ) -> ResetReply:
        """The reply of the slot's reset, once the remote runs the new episode (a reset
        that switched to an env whose page nobody asked for yet is done again: web)."""
        session = slot.session
        rewarder = rewarder_of(slot)
        try:
            reply: ResetReply = rewarder.wait_reply(message_id, deadline)
            rewarder.wait_for_state("running", reply.episode_id, max(deadline - time.monotonic(), 0.0))
            web = self.web
            if web is not None and web.after_reset_here(slot, reply.episode_id):
                return self._reset_reply(slot, self._send_reset(slot, seed, env_id), seed, env_id, deadline)
        except (RewarderError, OSError) as exc:
            raise RemoteUnavailable(session.name, "reset failed", exc) from exc
        except TimeoutError as exc:
            raise RemoteUnavailable(session.name, f"reset took over {RESET_TIMEOUT:g} s", exc) from exc
        return reply

    def _begin(self, slot: Slot, reply: ResetReply, deadline: float) -> None:
        """The slot's new episode begins: its first frame into the batch, from shared
        memory (or, if it cannot be used, over VNC from the loop thread)."""
        lane, session = self.lane, slot.session
        frames = lane.frames
        assert frames is not None
        slot.baseline(reply.episode_id)
        slot.error = None
        if session.shared.take(reply, frames[slot.index]):
            slot.returned = slot.seen = reply.frame
            slot.episode = reply.episode_id
            if session.vnc is not None:
                session.vnc.pause_updates()  # nobody looks at VNC frames meanwhile
        elif session.vnc is not None:
            session.shared.vnc_frames += 1
            timeout = max(deadline - time.monotonic(), MIN_FRAME_WAIT)
            shown = asyncio.wait_for(session.show_episode(reply.episode_id), timeout)
            try:
                pixels, tag = lane.loop.run(vnc_frame(session.vnc, shown), timeout + LOOP_SLACK)
            except (VNCError, OSError, TimeoutError) as exc:
                raise RemoteUnavailable(session.name, "the new episode's first frame did not come "
                                        "over VNC", exc) from exc
            if pixels.shape == frames.shape[1:]:
                np.copyto(frames[slot.index], pixels)
            if tag is not None:
                slot.returned = slot.seen = tag.frame
                slot.episode = tag.episode_id
        else:
            frames[slot.index] = 0
        slot.progress_at = time.monotonic()
        self.replies.written.add(slot.index)

    def autoresets(
        self, starting: Sequence[Slot], sent: dict[Slot, tuple[int, int | None]],
        truncated: np.ndarray | None, reconnected: set[Slot],
    ) -> dict[int, dict[str, Any]]:
        """The autoresets ``sent`` (slot -> message id, seed) of ``starting`` slots: each new
        episode's first frame into the batch and its info; a slot whose reset fails is
        lost (and ``truncated`` if given)."""
        out: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + RESET_TIMEOUT
        for slot in starting:
            try:
                if slot not in sent:
                    raise RemoteUnavailable(slot.session.name, "its reset could not be sent")
                message_id, seed = sent[slot]
                reply = self._reset_reply(slot, message_id, seed, None, deadline)
                self._begin(slot, reply, deadline)
            except RemoteUnavailable as exc:
                out[slot.index] = self.faults.lose(slot, error_text(exc), None, truncated)
                continue
            info: dict[str, Any] = {"episode_id": reply.episode_id, "remote.connected": True}
            if slot in reconnected:
                info.update({"remote.reconnected": True, "remote.name": slot.session.name})
            if slot.returned is not None:
                info["frame"] = slot.returned
            out[slot.index] = info
        return out

    def _send_autoresets(self, starting: Sequence[Slot]) -> dict[Slot, tuple[int, int | None]]:
        """Send the reset of each slot that starts an episode in this step (before any
        reply is read, so remotes reset while others step); a slot whose send fails has
        no entry (its autoreset reports the loss)."""
        sent = {}
        for slot in starting:
            self._drop_step(slot)
            if self.web is not None:
                self.web.before_reset_here(slot, False)
            seed = slot.next_seed()
            try:
                sent[slot] = (self._send_reset(slot, seed, None), seed)
            except RemoteUnavailable:
                continue
        return sent

    def step(
        self, actions: Sequence[Sequence[Any]], same_step: bool, active: Sequence[bool] | None
    ) -> Batch:
        fast = self.fast
        if fast is not None and not same_step and active is None:
            batch = fast.step(actions)
            if batch is not None:
                return batch
        return self.finish(self.send(actions, same_step, active))

    def send(
        self, actions: Sequence[Sequence[Any]], same_step: bool, active: Sequence[bool] | None,
        in_place: bool = False,
    ) -> Sent:
        """A step's first half: every request sent (the remotes step meanwhile); what
        :meth:`finish` needs to read the replies and make the batch. ``in_place``: the
        frames go into :attr:`Lane.frames` as it is, each row keeping its remote's newest
        frame (send/recv, remotes.arrivals), not into a new batch."""
        lane = self.lane
        if self.fast is not None:
            self.fast.forget()
        slots = lane.slots
        rewards, terminated, truncated, infos = lane.outcome()
        lane.same_step = same_step
        now = time.monotonic()
        sent: list[Slot] = []
        carried: list[Slot] = []
        starting: list[Slot] = []
        reconnected: set[Slot] = set()
        # A new batch each step, handed to the agent as it is (no copy at the end): rows of
        # remotes that send no step now keep their previous frame, copied in before anyone
        # else writes; the others are written by their reply (or copied at the end).
        gate = lane.gate  # (lane.frames, without the property: every step)
        previous = gate.frames
        assert previous is not None
        batch = previous if in_place else np.empty_like(previous)
        for slot in () if in_place else slots:
            i = slot.index
            if slot.phase is not Phase.RUNNING or slot.pending is not None or slot.reply is not None or (
                active is not None and not active[i]
            ):
                np.copyto(batch[i], previous[i])
        gate.frames = batch  # (after the copies: an interrupt before leaves the old batch)
        written: set[int] = set()
        self.replies.written = written
        web = self.web
        for slot in slots:
            i = slot.index
            if active is not None and not active[i]:
                continue
            if slot.phase is Phase.AWAY:
                if self._back(slot, same_step):  # this step is its autoreset step
                    reconnected.add(slot)
                    starting.append(slot)
                else:
                    infos[i] = self._away(slot, truncated)
                continue
            session = slot.session
            rewarder = session.lockstep_channel
            if slot.pending is None and slot.reply is None and rewarder is not None and rewarder.outstanding:
                self.replies.adopt(slot, rewarder, now)  # (most steps have nothing out: no call)
            if slot.pending is not None or slot.reply is not None:
                carried.append(slot)  # a step still out (a straggler, an interrupted step)
                continue
            # (lost_reason's lockstep answer is None for these: asked only for the others)
            healthy = session.connected and not session.replaced
            reason = None if healthy else self.faults.lost_reason(slot, now)
            if reason is not None:
                infos[i] = self.faults.lose(slot, reason, rewards, truncated)
                np.copyto(batch[i], previous[i])  # (lost: its last frame, as while away)
                continue
            if slot.phase is not Phase.RUNNING:
                starting.append(slot)
                continue
            if rewarder is None:
                raise RuntimeError("a lockstep session needs a blocking rewarder channel")
            if self.batches is not None and self.batches.queue(slot, actions[i]):
                continue  # (sent with its process's batch, below)
            try:
                if web is not None:  # an action string goes the web way (remotes.web)
                    slot.pending = web.lockstep_send(
                        slot, rewarder, actions[i], lane.frameskip, session.shared.obs
                    )
                else:
                    slot.pending = rewarder.send_step(
                        actions[i], lane.frameskip, session.shared.obs, timeout=lane.stall_timeout
                    )
            except (ConnectionClosed, OSError) as exc:
                infos[i] = self.faults.lose(slot, error_text(exc), rewards, truncated)
                np.copyto(batch[i], previous[i])
                continue
            # A step still running its action string is working, not stalled.
            slot.deadline = now + lane.stall_timeout + (work_seconds(actions[i]) if web is not None else 0.0)
            sent.append(slot)
        if self.batches is not None:
            batched, unsent = self.batches.send(now)
            sent += batched
            for slot, reason in unsent:
                infos[slot.index] = self.faults.lose(slot, reason, rewards, truncated)
                np.copyto(batch[slot.index], previous[slot.index])
        resets = self._send_autoresets(starting) if starting else {}
        return Sent(same_step, rewards, terminated, truncated, infos, sent, carried, starting,
                    reconnected, batch, previous, written, resets)

    def finish(self, step: Sent) -> Batch:
        """A step's second half: the replies read, the batch made."""
        lane = self.lane
        same_step, rewards, terminated, truncated, infos = (
            step.same_step, step.rewards, step.terminated, step.truncated, step.infos)
        sent, carried, starting, reconnected = step.sent, step.carried, step.starting, step.reconnected
        batch, previous, written, resets = step.batch, step.previous, step.written, step.resets
        lane.same_step = same_step
        failed: dict[Slot, str] = {}
        over_vnc = self.replies.wait(sent, carried)
        if carried:
            over_vnc += [(s, s.reply) for s in carried  # an interrupted wait for VNC
                         if s.reply is not None and s.vnc_frame is not None
                         and all(s is not t for t, _ in over_vnc)]
        if over_vnc:
            failed = frames_over_vnc(self.lane, over_vnc, self.replies.written)
        for slot in (*sent, *carried) if carried else sent:
            i = slot.index
            if slot in failed:  # the step happened, its frame did not come
                reply, slot.reply, slot.vnc_frame = slot.reply, None, None
                infos[i] = self.faults.lose(slot, failed[slot], rewards, truncated)
                rewards[i] += reply.reward  # what the step earned is not lost with the frame
            elif slot.reply is not None:
                infos[i] = self.replies.deliver(slot, rewards, terminated, truncated)
            elif not slot.session.connected:
                reason = slot.session.error or "connection lost"
                infos[i] = self.faults.lose(slot, reason, rewards, truncated)
            elif time.monotonic() >= slot.deadline:
                reason = f"stalled: no reply within stall_timeout={lane.stall_timeout:g} s; reconnecting"
                infos[i] = self.faults.lose(slot, reason, rewards, truncated)
            else:
                infos[i] = {
                    "remote.connected": True, "remote.waiting": True,
                    "episode_id": slot.episode, "frame": slot.returned,
                }
        if starting:
            infos_of = self.autoresets(starting, resets, truncated, reconnected)
            for slot in starting:
                infos[slot.index] = infos_of[slot.index]
        for slot in (*sent, *starting) if starting else sent:
            if slot.index not in written:  # lost, or waiting: its previous frame
                np.copyto(batch[slot.index], previous[slot.index])
        if same_step and (terminated.any() or truncated.any()):
            return self._same_step(rewards, terminated, truncated, infos)
        return lane.finish(rewards, terminated, truncated, infos, copy=False)

    def _same_step(
        self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> Batch:
        """``SAME_STEP``: each episode that ended in this step keeps its final frame and
        info, and its next one starts now, here."""
        lane = self.lane
        frames = lane.frames
        assert frames is not None
        lane.instruct(infos)  # the ended episodes' final infos get theirs
        ended = [s for s in lane.slots if terminated[s.index] or truncated[s.index]]
        final = {s.index: (frames[s.index].copy(), infos[s.index]) for s in ended}
        lane.same_step = False  # the autoresets below start the new episodes
        starting = []
        reconnected = set()
        for slot in ended:
            if slot.phase is not Phase.AWAY:
                starting.append(slot)
            elif self._back(slot, False):
                reconnected.add(slot)
                starting.append(slot)
            else:
                infos[slot.index] = self._away(slot, None)
        resets = self.autoresets(starting, self._send_autoresets(starting), None, reconnected)
        for slot in starting:
            infos[slot.index] = resets[slot.index]
        return lane.finish(rewards, terminated, truncated, infos, final, copy=False)


async def _all(futures: list[Future[Any]]) -> None:
    await asyncio.gather(*(asyncio.wrap_future(f) for f in futures), return_exceptions=True)

