"""What runtimes living on an X display share (the browser, any X program).

Holds :class:`DisplayRuntime`. Its program draws on an Xvnc display that listens on a
Unix socket only (``runtimes.xdisplay``, ``unix_socket=True``); the runtime keeps one
RFB connection to it (:attr:`DisplayRuntime.screen`, our own ``VNCClient``, Raw
encoding). Xvnc tracks what the program damaged and sends only that; the connection
writes it into its framebuffer, and each frame the remote draws copies the served area
of it (:meth:`DisplayRuntime.capture`) into :attr:`~runtimes.base.Runtime.framebuffer`.
So the remote's own VNC server serves these screens like any game's — frame tags, TLS,
recording, shared-memory lockstep frames, viewer slots, passwords, dm_env_rpc — and
every input, a viewer's or an agent's, reaches the program as real X input through the
same connection (:meth:`DisplayRuntime.inject`). A settling action
(:meth:`DisplayRuntime.asettle`) is answered once the screen has settled, judged by
``runtimes.settle`` from the page's reports (a browser's :attr:`DisplayRuntime.page_idle`)
or the program's damage timing.

Why RFB over the socket and not an XShm grab of the screen: ``benchmarks/display_capture``
measures both; a grab copies and compares the whole screen every frame, where Xvnc
already knows what changed and sends nothing while the screen stands still.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any, ClassVar, Final

from vncdriver import keysyms
from vncdriver.client import VNCClient
from vncdriver.client_protocol import FramebufferUpdated
from vncdriver.errors import UnknownKey
from vncdriver.messages import Encoding

from .base import InputEvent, KeyEvent, PointerEvent, Runtime, StepResult
from .errors import RuntimeFailure
from .settle import BY_DEADLINE, SETTLE_DEADLINE, DamageTiming, DisplayLag, InputFence, Settling
from .settle_page import PageIdle
from .xdisplay import XProgram, XvncDisplay

log = logging.getLogger(__name__)

Rect = tuple[int, int, int, int]

#: Seconds the display may take to send its first frame once its program started.
FIRST_FRAME_TIMEOUT: Final = 10.0
#: Xvnc options of a captured display: up to 60 updates a second to our one client (the
#: remote's frame rate), and Xvnc's own pixel comparison left on: X programs redraw
#: more than they change (XEyes repaints whole eyes), and without it every redraw
#: crossed the socket, at more than twice the remote's CPU per frame
#: (``python -m benchmarks display_capture``; benchmarks/RESULTS.md).
CAPTURE_ARGS: Final = ("-FrameRate", "240")
#: Damaged rectangles past which a capture copies their bounding box in one piece
#: (Xvnc sends a redraw as many small rectangles; one copy is cheaper than a hundred).
MAX_DAMAGE_RECTS: Final = 16


class DisplayLost(RuntimeFailure):
    """The X display (Xvnc) or our connection to it is gone; a reset starts it again."""


class DisplayRuntime(Runtime):
    """A runtime whose program draws on an Xvnc display the remote reads and serves.

    :attr:`display_size` is the X screen; the remote serves the area of it at
    :attr:`origin` of size ``width`` x ``height`` (the whole screen unless a subclass
    crops, as MiniWoB does to its task). Subclasses start their program in
    :meth:`_on_display` (or on reset), stop it in :meth:`_stop_programs`, and say what a
    frame earned in :meth:`outcome`.
    """

    lockstep: ClassVar[bool] = False
    settles: ClassVar[bool] = True  # Xvnc's damage says when the screen changes
    #: Real-time input goes into X as it arrives (:meth:`forward`), not at the next frame.
    forwards_input: ClassVar[bool] = True
    #: A desktop takes any key a viewer sends over VNC (function keys, accents), not only
    #: :attr:`keys`, the keys the rewarder accepts.
    any_vnc_key: ClassVar[bool] = True
    #: The X screen's size, (width, height).
    display_size: ClassVar[tuple[int, int]]
    #: Where the served area starts on the X screen, (x, y).
    origin: ClassVar[tuple[int, int]] = (0, 0)
    #: More Xvnc options of this runtime's display (after :data:`CAPTURE_ARGS`).
    display_args: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        super().__init__()
        self.display: XvncDisplay | None = None
        #: Our RFB connection to the display: frames in, input out.
        self.screen: VNCClient | None = None
        self._pending: list[Rect] | None = None  # display damage not copied (None: all)
        self._damage: list[Rect] | None = None  # copied since take_damage (None: all)
        #: When the served area last changed on the display (time.monotonic()).
        self.changed_at = 0.0
        self._changed = asyncio.Event()  # set at each change, for asettle
        #: The page's tracker, when the program is a page that can say it is idle (the
        #: browser sets it); None: the screen's damage timing alone decides.
        self.page_idle: PageIdle | None = None
        #: The input sent into X, for the page to catch up with (runtimes.settle).
        self.fence = InputFence()
        #: How the program's screen reacts and redraws (the quiet windows of X programs).
        self.timing = DamageTiming()
        #: How late the page's frames reach the display (browsers: the idle page's window).
        self.lag = DisplayLag()
        self._settle_since: float | None = None  # a settling wait's start
        self._settle_first: float | None = None  # the served area's first change since

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "display_size" not in vars(cls) and "width" in vars(cls):
            cls.display_size = (cls.width, cls.height)

    # Lifecycle -----------------------------------------------------------------------------

    async def astart(self) -> None:
        """Start the display and what runs on it; the remote serves it on its own ports."""
        try:
            await self._start_display()
        except BaseException:
            await self.aclose()
            raise

    async def _start_display(self) -> None:
        width, height = self.display_size
        self.display = XvncDisplay(
            width, height, unix_socket=True, args=(*CAPTURE_ARGS, *self.display_args)
        )
        await self.display.start()
        await self._on_display()
        self.screen = VNCClient(
            self.display.address, encoding="raw", name=f"{self.env_id} display",
            start_timeout=FIRST_FRAME_TIMEOUT, on_update=self._damaged,
        )
        # The pointer's shape travels apart (Cursor pseudo-encoding), so Xvnc does not draw
        # the X cursor into the frames: a frame is the program's pixels alone.
        self.screen.encodings.append(Encoding.CURSOR)
        self._pending = self._damage = None  # a new display: everything is new
        await self.screen.start()
        await self.screen.wait_update(0, FIRST_FRAME_TIMEOUT)
        self.capture()

    async def _revive_display(self) -> None:
        """Start the display again if Xvnc or our connection to it is gone (a reset
        calls this first, so a lost display ends one episode, not the remote)."""
        self.lag.forget()  # what the reset draws is not a late frame of the last page
        alive = self.display is not None and self.display.process is not None
        alive = alive and self.display.process.poll() is None  # type: ignore[union-attr]
        if alive and self.screen is not None and self.screen.connected:
            return
        log.warning("%s: the X display is gone; starting it again", self.env_id)
        await self.aclose()
        await self._start_display()

    async def _on_display(self) -> None:
        """Start what runs on the display (the display is up); nothing by default."""

    async def _stop_programs(self) -> None:
        """Stop what :meth:`_on_display` and the resets started; nothing by default."""

    async def _stop_program(self, program: XProgram) -> None:
        """Stop one program of the display (and forget it)."""
        if self.display is not None and program in self.display.programs:
            self.display.programs.remove(program)
        await asyncio.to_thread(program.stop)

    async def aclose(self) -> None:
        """Stop the programs, our connection and Xvnc. Idempotent."""
        await self._stop_programs()
        if self.screen is not None:
            screen, self.screen = self.screen, None
            with contextlib.suppress(Exception):
                await screen.close()
        if self.display is not None:
            display, self.display = self.display, None
            await display.aclose()

    def close(self) -> None:
        """Synchronous last resort (no event loop): kill Xvnc and what runs on it."""
        if self.display is not None:
            self.display.stop()
            self.display = None

    def pids(self) -> list[int]:
        """Process ids of Xvnc and of everything running on it."""
        return self.display.pids() if self.display is not None else []

    # Frames and input ----------------------------------------------------------------------

    def _damaged(self, screen: VNCClient, update: FramebufferUpdated) -> None:
        """Note what the display changed (its pixel rectangles; not pseudo-encodings)."""
        x0, y0 = self.origin
        x1, y1 = x0 + self.width, y0 + self.height
        if any(r.encoding >= 0 and r.x < x1 and r.x + r.width > x0 and r.y < y1
               and r.y + r.height > y0 for r in update.rects):
            now = self.changed_at = time.monotonic()
            self.timing.on_change(now)
            self.lag.on_change(now)
            if self._settle_first is None and self._settle_since is not None:
                self._settle_first = now
            self._changed.set()
        if self._pending is not None:
            self._pending.extend(
                (r.x, r.y, r.width, r.height) for r in update.rects if r.encoding >= 0
            )
            if len(self._pending) > MAX_DAMAGE_RECTS:  # (bounded while nobody captures)
                self._pending = [_bounds(self._pending)]

    def capture(self) -> bool:
        """Copy what the display changed in the served area into :attr:`framebuffer`
        since the last capture; whether anything was."""
        screen, pending = self.screen, self._pending
        if screen is None or pending == []:
            return False
        self._pending = []
        x0, y0 = self.origin
        area = (x0, y0, x0 + self.width, y0 + self.height)
        if pending is None:
            rects = [(x0, y0, self.width, self.height)]
        elif len(pending) > MAX_DAMAGE_RECTS:
            rects = [_bounds(pending)]
        else:
            rects = pending
        copied = []
        for x, y, w, h in rects:
            left, top = max(x, area[0]), max(y, area[1])
            right, bottom = min(x + w, area[2]), min(y + h, area[3])
            if left < right and top < bottom:
                self.framebuffer[top - y0 : bottom - y0, left - x0 : right - x0] = (
                    screen.framebuffer[top:bottom, left:right]
                )
                copied.append((left - x0, top - y0, right - left, bottom - top))
        if pending is None:
            self._damage = None  # the whole area: the server compares it
        elif self._damage is not None:
            self._damage.extend(copied)
            if len(self._damage) > MAX_DAMAGE_RECTS:  # nobody takes it: the server compares
                self._damage = None
        return bool(copied)

    def take_damage(self) -> list[Rect] | None:
        damage, self._damage = self._damage, []
        return damage

    async def take_next_frame(self, after: int, timeout: float) -> None:
        """Take the display's first frame past update ``after`` (a reset's new screen),
        or the screen as it is if nothing changed on it within ``timeout`` s."""
        assert self.screen is not None
        with contextlib.suppress(TimeoutError):
            await self.screen.wait_update(after, timeout)
        self.capture()

    def settle_watch(self) -> float:
        """Start watching the served screen for a settling action (before its input is
        sent: a change that comes quickly still counts); the next :meth:`asettle` counts
        from here. The time.monotonic() it started."""
        self._settle_since, self._settle_first = time.monotonic(), None
        return self._settle_since

    async def asettle(self) -> dict[str, Any]:
        """Wait until the served screen has settled (``runtimes.settle``): a page that
        handled the input and has nothing pending, with the screen still for a frame or
        two (``by: "page-idle"``); else still for the quiet window (``"quiet"``: fixed
        for a page that cannot say, learned from an X program's damage); at most
        :data:`~runtimes.settle.SETTLE_DEADLINE` (``"deadline"``). Seconds until the
        screen first changed (None: it never did), until it settled, whether the deadline
        cut it short, and why it ended."""
        started = self._settle_since
        if started is None or time.monotonic() - started > SETTLE_DEADLINE:  # none, or stale
            started = self.settle_watch()
        page, timing = self.page_idle, self.timing
        if page is None:
            watch = Settling(started, page=False, react_window=timing.react_window(),
                             quiet_window=timing.quiet_window())
        else:
            watch = Settling(started, page=True, fast_quiet=self.lag.window())
        first = True
        while True:
            self._changed.clear()
            now = time.monotonic()
            verdict = watch.decide(now, self.changed_at, timing.input_at)
            if verdict.settled:
                break
            if verdict.wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), verdict.wait)
            if verdict.probe and page is not None:
                sent = self.fence.sent
                report = await page.probe(first, sent)
                first = False
                caught_up = report is not None and self.fence.caught_up(report)
                at = time.monotonic()
                watch.on_report(report, at, caught_up)
                if caught_up and report is not None and report.idle:
                    self.lag.on_idle(at)
        if watch.report is not None:
            self.fence.sync(watch.report)
        self.capture()
        first_change = self._settle_first
        if first_change is None and self.changed_at > started:
            first_change = self.changed_at
        self._settle_since = None
        return {
            "react_s": None if first_change is None else first_change - started,
            "settled_s": time.monotonic() - started,
            "deadline_hit": verdict.by == BY_DEADLINE,
            "by": verdict.by,
        }

    def inject(self, events: Sequence[InputEvent]) -> None:
        """Send input to the program as real X input (Xvnc's XTest), in one write;
        pointer positions move from the served area to the screen."""
        screen = self.screen
        if screen is None or not screen.connected:
            raise DisplayLost(f"{self.env_id}: the X display is gone; the next reset restarts it")
        x0, y0 = self.origin
        out: list[tuple[object, ...]] = []
        sent: list[InputEvent] = []
        for event in events:
            if isinstance(event, KeyEvent):
                try:
                    out.append(("KeyEvent", key_number(event.key), event.down))
                except UnknownKey:
                    log.debug("%s: no keysym for %r; dropped", self.env_id, event.key)
                    continue
                sent.append(event)
            else:
                moved = PointerEvent(event.x + x0, event.y + y0, event.buttonmask)
                out.append(("PointerEvent", *moved))
                sent.append(moved)
        if out:
            screen.send_events(out)
            self.fence.on_sent(sent)
            self.timing.on_input(time.monotonic())
            self.lag.forget()

    def forward(self, events: Sequence[InputEvent]) -> None:
        self.inject(events)

    def step(self, events: Sequence[InputEvent]) -> StepResult:
        """Send the input into X, take the newest frame, say what the program earned."""
        if events:
            self.inject(events)
        elif self.screen is None or not self.screen.connected:
            raise DisplayLost(f"{self.env_id}: the X display is gone; the next reset restarts it")
        self.capture()
        return self.outcome()

    def outcome(self) -> StepResult:
        """What this frame earned (a reward, the end of the episode); nothing by default."""
        return StepResult()

    def reset(self, seed: int | None = None) -> None:
        raise RuntimeError(f"{self.env_id} resets asynchronously; the remote awaits areset()")


def _bounds(rects: list[Rect]) -> Rect:
    """The bounding box of ``rects``."""
    left = min(x for x, _, _, _ in rects)
    top = min(y for _, y, _, _ in rects)
    right = max(x + w for x, _, w, _ in rects)
    bottom = max(y + h for _, y, _, h in rects)
    return left, top, right - left, bottom - top


def key_number(name: str) -> int:
    """The keysym of a key name as :mod:`envserver.inputs` passes it on: an X name, or
    ``U+XXXX`` / ``0x...`` for keys a viewer sent that have no X name."""
    if name.startswith("U+"):
        return 0x01000000 + int(name[2:], 16)
    if name.startswith("0x"):
        return int(name, 16)
    return keysyms.keysym(name)
