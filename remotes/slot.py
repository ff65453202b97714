"""One remote's place in the stepping core, and the frame clock that paces a step.

Holds :class:`Slot` (a remote's stepping state; its phase, where it is between two
steps, moves only by the table of :mod:`remotes.slot_state`) and :class:`FrameGate`
(waits until each remote shows the frame a step wants, by the frame tags our VNC server
sends, and copies each in as it comes). One thread writes a slot: the loop thread in
real time; in lockstep the thread that steps (remotes.lockstep), which the loop thread
only hands VNC frames and probe results to, through futures.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from vncdriver.client_protocol import FramebufferUpdated
from vncdriver.messages import FrameTag, RectangleHeader

from .session import RemoteSession
from .slot_state import Phase, SlotEvent, fire

#: Rectangles VNC may write into a framebuffer before the batch row that mirrors it is
#: copied whole again instead of rectangle by rectangle (a few a frame is the usual).
MAX_DIRTY_RECTS: Final = 64


@dataclass(slots=True, eq=False)
class Slot:
    """One remote's stepping state (one thread's: see the module docstring)."""

    index: int
    session: RemoteSession
    phase: Phase = Phase.RUNNING
    #: Steps into the current episode (for ``max_episode_steps``).
    steps: int = 0
    #: What the remote's describe said at the last (re)connect or reset: its VNC updates
    #: carry frame tags; it sends heartbeats (so a silent one is stalled).
    tags: bool = False
    heartbeats: bool = False
    #: The episode that ended (ENDED): the next frame must belong to a later one.
    ended_episode: int | None = None
    #: The frame number last returned (and its episode, by its tag), and the newest
    #: frame number VNC showed.
    returned: int | None = None
    episode: int | None = None
    seen: int | None = None
    #: Loop time the frames (or, without tags, the messages) last advanced.
    progress_at: float = 0.0
    #: Without tags: VNC updates + rewarder messages at the last check.
    activity: int = -1
    #: The frame a step waits for (None: not waiting).
    target: int | None = None
    #: Whether the step waits for ``target`` (not for a remote that is behind or stalled).
    required: bool = True
    #: Whether reaching ``target`` copies the frame into the batch there and then, and the
    #: frame (and its episode) so captured: a step returns each remote's target frame
    #: even when the remote draws the next one before the slowest remote is in.
    capture: bool = False
    captured: int | None = None
    captured_episode: int | None = None
    #: Missed its target frame at the last deadline and has not moved since.
    behind: bool = False
    #: Real time: VNC sends a frame only when a step asks for one (:class:`FrameGate`),
    #: once the remote's describe says it tags its frames (a tagless one streams).
    demand: bool = False
    #: Why the slot is away, and what brings it back: real time, the loop's task that
    #: reconnects it; lockstep, the future of the loop's probe (True once the remote
    #: answers: the step that sees it connects). False for a replaced session.
    error: str | None = None
    reconnect: asyncio.Task[bool] | Future[bool] | None = None
    #: Steps returned while away since the loss (or since the idle stretch ended).
    away_steps: int = 0
    #: Lockstep: the message id of the step request still out, its deadline (monotonic),
    #: and a reply taken but not yet returned (after an interrupted step).
    pending: int | None = None
    deadline: float = 0.0
    reply: Any = None
    #: Lockstep: the frame number of ``reply`` whose pixels must still come over VNC
    #: (shared memory failed; None once copied into the batch).
    vnc_frame: int | None = None
    #: Lockstep: the batch request (remotes.batched.BatchCall) ``pending`` belongs to, if
    #: the step went in its process's batch.
    batch: Any = None
    #: Draws the seeds of the episodes this slot starts by itself, from the reset seed.
    rng: np.random.Generator | None = None
    #: The current episode's latest text (``v0.env.text``: a task's instruction), None
    #: before its first; and whether this remote has sent any (a new episode's text is
    #: then worth waiting for).
    instruction: str | None = None
    instructs: bool = False
    #: Real time: the framebuffer and the batch whose row of this slot shows that
    #: framebuffer but for ``dirty``, the rectangles VNC updates wrote into it since
    #: (:meth:`FrameGate.mirror`); None: not known, the next copy is whole.
    mirror: tuple[np.ndarray, np.ndarray] | None = None
    dirty: list[RectangleHeader] = field(default_factory=list)

    def next_seed(self) -> int | None:
        """The seed of the next episode the slot starts by itself (None: unseeded)."""
        return None if self.rng is None else int(self.rng.integers(2**31))

    def baseline(self, episode: int | None = None, event: SlotEvent = SlotEvent.RESET) -> None:
        """A (re)connection or reset (of ``episode``, if known; ``event`` says which): the
        frame clock starts over from what VNC shows, the instruction from what the
        rewarder holds."""
        session = self.session
        rewarder = session.rewarder
        held = rewarder.peek() if rewarder is not None else None
        texts = held.text if held is not None and episode in (None, held.episode_id) else ()
        self.instruction = None
        self.heard(texts)
        self.tags, self.heartbeats = session.frame_tags, session.heartbeats
        if self.demand:  # (frames on demand need tags: a step knows the one it asked for)
            session.on_demand = self.tags
            if session.vnc is not None:
                session.vnc.on_demand = self.tags
        tag = session.tag
        self.seen = self.returned = tag.frame if tag is not None else None
        self.episode = tag.episode_id if tag is not None else None
        self.progress_at = time.monotonic()
        self.activity = -1
        self.behind = False
        self.target = None
        self.steps = 0
        fire(self, event)
        self.ended_episode = None
        self.pending = self.reply = self.vnc_frame = self.batch = None

    def take_texts(self) -> list[str]:
        """Lockstep: the texts that came before this step's reply (heard). Nothing else
        reads the rewarder's buffer in lockstep (rewards come in the replies), so this
        pop also keeps a long episode's texts from piling up there."""
        rewarder = self.session.rewarder
        if rewarder is None or not rewarder.connected:
            return []  # a dropped channel's last episode is the loss's to report
        if rewarder.buffer.quiet():  # nothing came (most steps): no result to build
            return []
        texts = list(rewarder.pop().text)
        self.heard(texts)
        return texts

    def heard(self, texts: Sequence[str]) -> None:
        """Texts of the current episode came in: the latest is its instruction now."""
        if texts:
            self.instruction = texts[-1]
            self.instructs = True



class FrameGate:
    """Waits until every remote a step expects shows its frame (or a deadline passes),
    woken by the sessions' ``on_frame`` hooks; copies target frames into :attr:`frames`
    as they come in."""

    def __init__(self, slots: Sequence[Slot], hooks: bool = True) -> None:
        """``hooks``: hear the sessions' VNC updates (real time; a lockstep step reads
        its frames itself, and its slots are the stepping thread's alone)."""
        self.slots = slots
        #: The batch the stepper returns copies of (``[n, H, W, 3]``).
        self.frames: np.ndarray | None = None
        self._gate: asyncio.Future[None] | None = None
        self._waiting = 0
        self.hooks = hooks
        for slot in slots:
            slot.session.on_frame = self._hook(slot) if hooks else None
            slot.demand = hooks

    def _hook(self, slot: Slot) -> Callable[[FramebufferUpdated], None]:
        def on_frame(update: FramebufferUpdated) -> None:
            """A VNC update was applied for ``slot`` (loop thread): note what it wrote and
            the progress, capture a target frame, open the gate when the last remote a step
            waits for is in."""
            if slot.mirror is not None:
                if len(slot.dirty) + len(update.rects) > MAX_DIRTY_RECTS:
                    slot.mirror = None
                else:
                    slot.dirty += update.rects
            tag = update.tag
            if tag is None:
                return
            if tag.frame != slot.seen:
                slot.seen = tag.frame
                slot.progress_at = time.monotonic()
                slot.behind = False
            target = slot.target
            if target is not None and tag.frame >= target:
                slot.target = None
                if slot.capture:
                    self.capture(slot, tag)
                if slot.required:
                    self._waiting -= 1
                    gate = self._gate
                    if self._waiting <= 0 and gate is not None and not gate.done():
                        gate.set_result(None)
            elif target is not None:
                slot.session.want_frame()  # (on demand: not there yet, ask again)

        return on_frame

    def capture(self, slot: Slot, tag: FrameTag) -> None:
        """Copy ``slot``'s frame into the batch now (its target frame just came in)."""
        frames, vnc = self.frames, slot.session.vnc
        if frames is None or vnc is None or tag.episode_id != slot.episode:
            return  # a frame of the next episode: the step decides (see Stepper._pair)
        buffer = vnc.framebuffer
        if buffer.shape == frames.shape[1:]:
            self.mirror(slot, buffer, frames)
            slot.captured, slot.captured_episode = tag.frame, tag.episode_id

    def mirror(self, slot: Slot, buffer: np.ndarray, frames: np.ndarray) -> None:
        """Make ``frames``' row of ``slot`` show ``buffer`` (its VNC framebuffer, of the
        row's shape). When the row showed that framebuffer before, only the rectangles
        updates wrote since are copied (a Catch frame: ~400 of its 33,600 pixels), else
        all of it. Only with hooks (real time): they hear every write."""
        row = frames[slot.index]
        mirror = slot.mirror
        if mirror is not None and mirror[0] is buffer and mirror[1] is frames:
            height, width = buffer.shape[0], buffer.shape[1]
            for rect in slot.dirty:
                x, y = rect.x, rect.y
                right, bottom = min(x + rect.width, width), min(y + rect.height, height)
                if x < right and y < bottom:
                    row[y:bottom, x:right] = buffer[y:bottom, x:right]
        else:
            np.copyto(row, buffer)
        slot.dirty.clear()
        slot.mirror = (buffer, frames) if self.hooks else None

    def expect(
        self, slot: Slot, frame: int, required: bool = True, capture: bool = False
    ) -> None:
        """Make the next :meth:`wait` wait until ``slot`` shows ``frame`` — or, unless
        ``required`` (a remote that is behind or stalled), only while it waits for others;
        with ``capture``, the frame is copied into the batch as it comes in."""
        slot.capture = capture
        if slot.seen is not None and slot.seen >= frame:
            return
        if slot.target is None:
            slot.required = required
            if required:
                self._waiting += 1
        elif required and not slot.required:
            slot.required = True
            self._waiting += 1
        slot.target = frame
        slot.session.want_frame()  # (on demand; else one is always asked for)

    async def wait(self, deadline: float) -> None:
        """Wait until every required expected frame is in (every expected one, when none
        is required: a lone slow remote still paces the step), or until ``deadline``
        (monotonic time); slots still short then are marked behind."""
        if self._waiting <= 0:
            for slot in self.slots:
                if slot.target is not None:
                    slot.required = True
                    self._waiting += 1
        try:
            if self._waiting > 0:
                loop = asyncio.get_running_loop()
                gate = self._gate = loop.create_future()
                timer = loop.call_later(max(0.0, deadline - time.monotonic()), _resolve, gate)
                try:
                    await gate
                finally:
                    timer.cancel()
                    self._gate = None
        finally:  # also when the step is cancelled (an interrupt): the next starts clean
            self._waiting = 0
            for slot in self.slots:
                if slot.target is not None:
                    slot.target = None
                    slot.behind = True


def instruct(slots: Sequence[Slot], infos: Sequence[dict[str, Any]]) -> None:
    """Give each info its slot's instruction (``info["instruction"]``, kept where one is
    set already). A slot lost in this step gives its ended episode's, then has none
    until it is back: its idle steps belong to no episode."""
    for slot, info in zip(slots, infos, strict=True):
        info.setdefault("instruction", slot.instruction)
        if slot.phase is Phase.AWAY:
            slot.instruction = None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
