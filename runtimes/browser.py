"""MiniWoB++ tasks in Chromium on a TigerVNC display: ``miniwob.<Task>-v0``.

Holds :class:`MiniWoBRuntime` (one task in one browser on one Xvnc display) and
:data:`RUNTIMES`, the table ``runtimes.registry`` reads: one subclass per task page,
built at import without starting anything (where the pages and Chromium are, and how
Chromium starts: ``runtimes.chromium``). Importing this module raises
ModuleNotFoundError when the ``browser`` extra (the ``miniwob`` wheel) is missing and
:class:`~runtimes.xdisplay.ProgramMissing` (also a ModuleNotFoundError) when Xvnc or
Chromium is, naming the Debian package; the registry then lists no ``miniwob.*`` ids and
``serve`` says what to install. :class:`MiniWoBRuntime` is the composition root of the
runtime's parts, each the only writer of its state: the browser on its display
(:mod:`runtimes.browser_host`), the task's episodes and what they pay
(:mod:`runtimes.browser_episodes`), what web agents read and do
(:mod:`runtimes.browser_agents`) and lockstep snapshots (:mod:`runtimes.browser_snapshots`).
Here the parts are put together: a reset, a lockstep step, the poller and a settled action
read the page and hand what they read to the part that owns it.

**Screen.** Chromium runs in kiosk mode, no window manager, on a 640x480 Xvnc display
the remote reads over a Unix socket (``runtimes.xruntime``), so the page fills the screen
from (0, 0) with no browser chrome. The remote serves the task (:data:`TASK_AREA`: the
instruction bar and the 160x160 task, 160x210 at the top left) — what an agent needs,
with none of the grey around it; ``serve --option screen=full`` serves the whole 640x480
screen (MiniWoB's reward panel and timer to the right of the task); ``--option
reward=`` one of :data:`REWARDS`, what an ended episode pays.

**Episodes.** The page is loaded once, at start. A reset seeds the page's random number
generator (``Math.seedrandom(seed)``), calls ``core.startEpisodeReal()`` and returns once
the new page is drawn on the display and taken (:meth:`MiniWoBRuntime.areset`): the
reset's frame is the new episode's, and input from the first step applies to it. The
instruction (``core.getUtterance()``) goes out as ``v0.env.text`` before the reset's
reply (the sentence only: :data:`UTTERANCE_JS`). A background task polls the page's
``WOB_DONE_GLOBAL``/``WOB_REWARD_GLOBAL``/``WOB_EPISODE_ID`` every
:data:`POLL_INTERVAL`; when the task ends its episode (a right or wrong answer, or its
own 10 s time limit with reward -1), the next frame reports the reward once with
``done`` and the remote resets (each end once: a reset forgets the page's count first,
so a poll before the new episode cannot take the old end for its). If Chromium dies or
leaves the task page, the episode ends with ``info["browser.error"]`` and the reset
brings the browser back (and the display, if Xvnc died).

**Lockstep.** In lockstep (the remote's ``mode``, read at each reset) the page's time is
a clock in the page (:mod:`runtimes.page_clock`), paused at :data:`~runtimes.page_clock.EPOCH_MS`
at every reset: a step sends its input through DevTools (:mod:`runtimes.cdp_input`: each
event handled before the next), advances the page by its frames, and takes the served
area of the first frame the display shows after that (:mod:`runtimes.frame_witness`;
Chromium's screenshots when the whole screen is served) as the frame, then reads the
page's reward globals. The same seed and actions give the same frames and rewards;
MiniWoB's 10 s limit counts page time. A real-time reset gives the page its own clock
back.

**Input.** In real time every input — a viewer's over VNC, an agent's over VNC or the
rewarder — reaches the page as real X input, through the remote's connection to the
display.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final

import numpy as np

from rewarder.protocol import LOCKSTEP
from vncdriver import keysyms

from .base import InputEvent, PointerEvent, Runtime, StepResult
from .browser_agents import PageAgents
from .browser_episodes import REWARDS, TaskEpisodes, reading
from .browser_host import BLANK_PAGE, SCREEN_HEIGHT, SCREEN_WIDTH, BrowserHost
from .browser_snapshots import REALTIME_REFUSAL, Snapshots, fresh_seed, start_alike
from .browser_state import EpisodeLog
from .cdp import CDPClient, CDPError
from .cdp_input import CDPInput
from .chromium import (
    CHROMIUM_ENV,
    STATE_EXPRESSION,
    SWITCH_ENV,
    env_id_for,
    find_chromium,
    find_xvnc,
    html_dir,
)
from .errors import SnapshotUnsupported
from .frame_witness import agreed_screenshot
from .page_clock import FRAME_MS, PageClock
from .xdisplay import ProgramMissing, XProgram
from .xruntime import DisplayRuntime

log = logging.getLogger(__name__)

# Screen ------------------------------------------------------------------------------------

#: Where the task is on the screen: x, y, width, height (MiniWoB's ``#wrap`` is 160x210).
TASK_AREA: Final = (0, 0, 160, 210)
#: ``serve --option screen=...``: the task area (the default) or the whole screen.
SCREENS: Final = ("task", "full")
#: Seconds a real-time reset waits for the display to show the new page; past it, the
#: reset's frame is the page's screenshot and the next frame takes the whole display.
SETTLE_TIMEOUT: Final = 2.0
#: Frames per second of the remote's loop: it only forwards input and picks up results.
FPS: Final = 60.0

# Episodes ----------------------------------------------------------------------------------

#: Real time: seconds at least between two page observations an agent asked for (the
#: ``observe`` property), made when the served screen changed (an observation costs
#: several ms of the page's time: ``python -m benchmarks page_structure``).
OBSERVE_INTERVAL: Final = 0.1
#: The instruction, ``core.getUtterance()``'s sentence: some tasks (email-inbox-*nl*,
#: flight.*) return ``{utterance, fields}``, the fields being the parsed answer.
UTTERANCE_JS: Final = (
    "(u => typeof u === 'string' ? u : u != null && typeof u.utterance === 'string' "
    "? u.utterance : String(u))(core.getUtterance())"
)
#: Seconds between polls of the page's reward globals (20 Hz: a reward reaches the
#: rewarder within ~50 ms plus a frame).
POLL_INTERVAL: Final = 0.05
# Input -------------------------------------------------------------------------------------

#: Keys the rewarder accepts: printable ASCII (typing tasks), editing and arrow keys,
#: and the modifiers copy-paste tasks need. Over VNC an agent may send any key.
KEYS: Final = tuple(
    dict.fromkeys(
        [keysyms.canonical(chr(c)) for c in range(0x20, 0x7F)]
        + ["Return", "BackSpace", "Tab", "Delete", "Escape", "Left", "Right", "Up", "Down",
           "Home", "End", "Prior", "Next", "Shift_L", "Shift_R", "Control_L", "Control_R"]
    )
)
#: Left button and the wheel (bits 3 and 4): what MiniWoB tasks use. The right button
#: would open Chromium's context menu.
BUTTONS: Final = 0b11001


class MiniWoBRuntime(DisplayRuntime):
    """One MiniWoB++ task in Chromium on an X display that the remote serves.

    The composition root of its parts, each the only writer of its state: the display
    (:class:`~runtimes.xruntime.DisplayRuntime`, what X programs share), :attr:`host`
    (the browser on it: :class:`~runtimes.browser_host.BrowserHost`), :attr:`episodes`
    (the task's episodes: :class:`~runtimes.browser_episodes.TaskEpisodes`),
    :attr:`agents` (what web agents read and do: :class:`~runtimes.browser_agents.PageAgents`)
    and :attr:`snapshots` (lockstep snapshots: :class:`~runtimes.browser_snapshots.Snapshots`).
    """

    width: ClassVar[int] = TASK_AREA[2]
    height: ClassVar[int] = TASK_AREA[3]
    display_size: ClassVar[tuple[int, int]] = (SCREEN_WIDTH, SCREEN_HEIGHT)
    fps: ClassVar[float] = FPS
    keys: ClassVar[tuple[str, ...]] = KEYS
    buttons: ClassVar[int] = BUTTONS
    any_vnc_key: ClassVar[bool] = False  # a page takes what KEYS lists
    lockstep: ClassVar[bool] = True  # the page's clock (runtimes.page_clock)
    async_advance: ClassVar[bool] = True
    action_strings: ClassVar[bool] = True  # runtimes.web_actor, docs/browser.md
    options: ClassVar[tuple[str, ...]] = ("screen", "marks", "reward")
    #: Which screen this class serves (one of :data:`SCREENS`).
    screen_kind: ClassVar[str] = "task"
    #: The task page's file name (``click-test.html``); set per task's class.
    page: ClassVar[str]

    def __new__(cls, screen: str = "task", marks: bool = False, reward: str = "discounted") -> MiniWoBRuntime:
        """``screen="full"`` makes the whole-screen form of the task's class (every
        class attribute, the size included, stays true of the instance)."""
        if screen not in SCREENS:
            raise ValueError(f"screen must be one of {', '.join(SCREENS)}, not {screen!r}")
        if screen != cls.screen_kind:
            cls = _screen_form(cls, screen)
        return super().__new__(cls)

    def __init__(self, screen: str = "task", marks: bool = False, reward: str = "discounted") -> None:
        """``marks``: draw set-of-marks (a box and its bid on each clickable element) on
        every frame, for agents that read bids off pixels and for people watching.
        ``reward``: which reward an episode pays (one of :data:`REWARDS`)."""
        super().__init__()
        if not isinstance(marks, bool | int):
            raise ValueError(f"marks must be true or false, not {marks!r}")
        #: The browser on the display.
        self.host = BrowserHost()
        #: The task's episodes: ours, the instruction, the outcome.
        self.episodes = TaskEpisodes(reward)
        #: The lockstep episode's log, and the snapshots made of it.
        self.snapshots = Snapshots()
        #: What web agents read and do on the page.
        self.agents = PageAgents(self.host, self.snapshots, (*self.origin, self.width, self.height),
                                 bool(marks))
        #: Seconds the last :meth:`astart` (or :meth:`atake_over`) took.
        self.startup_seconds: float | None = None
        self._poller: asyncio.Task[None] | None = None  # the page's reward poller
        # describe on an instance says whether it can snapshot in its mode, now
        self.describe = self._describe_now  # type: ignore[method-assign]

    @classmethod
    def url(cls) -> str:
        """``file://`` URL of the task page in the installed wheel."""
        return (html_dir() / cls.page).as_uri()

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {**super().describe(), "task_area": list(TASK_AREA), "screen": cls.screen_kind,
                "snapshots": REALTIME_REFUSAL}

    def _describe_now(self) -> dict[str, Any]:
        """:meth:`describe` of this instance (the remote asks the runtime it serves):
        whether it can snapshot depends on its mode."""
        return {**type(self).describe(), "snapshots": self.snapshot_refusal}

    # The parts' state, read here (each part writes its own) --------------------------------

    @property
    def marks(self) -> bool:
        """Set-of-marks are drawn on every frame."""
        return self.agents.marks

    @property
    def reward(self) -> str:
        """Which reward an ended episode pays (one of :data:`REWARDS`)."""
        return self.episodes.reward

    @property
    def browser(self) -> XProgram | None:
        return self.host.browser

    @property
    def cdp(self) -> CDPClient | None:
        return self.host.cdp

    @property
    def clock(self) -> PageClock | None:
        return self.host.clock

    @property
    def page_input(self) -> CDPInput | None:
        return self.host.page_input

    @property
    def episode_log(self) -> EpisodeLog | None:
        return self.snapshots.log

    # Lifecycle (the browser's: runtimes.browser_host) --------------------------------------

    async def astart(self) -> None:
        """Start the display, Chromium on it, and load the task."""
        started = time.monotonic()
        self.host.find_chromium()  # fail before starting anything if it is missing
        await super().astart()
        self.startup_seconds = time.monotonic() - started
        log.info("%s started in %.2f s on %s", self.env_id, self.startup_seconds, self.display)

    async def _on_display(self) -> None:
        await self._start_browser()

    async def _start_display(self) -> None:
        """The display, the X pointer moved by our connection to the screen's corner:
        TigerVNC draws the pointer into the frames of a client whose last pointer event
        was elsewhere (the Cursor encoding notwithstanding), and the whole screen's
        first frame kept it at the centre, where nothing draws again."""
        self.host.key_guard.forget()  # a new X server holds nothing
        await super()._start_display()
        x0, y0 = self.origin
        self.inject([PointerEvent(SCREEN_WIDTH - 1 - x0, SCREEN_HEIGHT - 1 - y0, 0)])

    async def _start_browser(self) -> None:
        assert self.display is not None
        await self.host.start(self.display, self.fence, self.url(), self.page)
        self.page_idle = self.host.page_idle

    async def _stop_browser(self) -> None:
        self.page_idle = None
        await self.host.stop(self._stop_program)

    async def _stop_programs(self) -> None:
        await self._stop_browser()

    async def atake_over(self, old: Runtime) -> bool:
        """An env switch from another task: keep ``old``'s display and browser and load
        this task's page in it (a page load, where starting Xvnc and Chromium again
        took seconds: ``python -m benchmarks browser_switch``)."""
        if not (
            os.environ.get(SWITCH_ENV) != "restart"
            and isinstance(old, MiniWoBRuntime) and old.display_size == self.display_size
            and old.display is not None and old.screen is not None and old.screen.connected
            and old.host.ready
        ):
            return False
        started = time.monotonic()
        await old._stop_poller()
        # All of it at once (no await between): from here this runtime holds it all, and
        # a failure below is this runtime's to recover (its reset loads the page again).
        self.display, self.screen, old.display, old.screen = old.display, old.screen, None, None
        self.host.take_from(old.host)
        self.page_idle, old.page_idle = self.host.page_idle, None
        self.screen.on_update = self._damaged
        self._pending = self._damage = None  # a new page: take all of it
        await self.host.switch(self.url(), self.page)
        self.fence.restart()  # the new page counts its input from nought
        self.capture()
        self.startup_seconds = time.monotonic() - started
        log.info("%s took over %s's browser in %.2f s", self.env_id, old.env_id,
                 self.startup_seconds)
        return True

    def inject(self, events: Sequence[InputEvent]) -> None:
        """Real X input without the browser's shortcuts (the host's key guard): whoever
        sends it (a viewer, an agent, an action string), no key opens, closes, zooms,
        reloads or leaves the page."""
        super().inject(self.host.key_guard.filter(events))

    async def _stop_poller(self) -> None:
        """Stop the page's reward poller, if one runs."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None

    async def aclose(self) -> None:
        """Stop the poller, the browser and Xvnc; remove their files. Idempotent."""
        await self._stop_poller()
        await super().aclose()

    def close(self) -> None:
        """Synchronous last resort (no event loop): kill the browser and Xvnc."""
        super().close()
        self.host.close()

    # Episodes ------------------------------------------------------------------------------

    async def areset(self, seed: int | None = None, *, draw: bool = True) -> None:
        """Seed the page and start a new episode, and take its first frame (not with
        ``draw`` false: a restore's replay draws only its last); bring the browser (and
        the display) back if it is lost."""
        self.episodes.resetting()
        await self._revive_display()
        if self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(
                self._poll(), name=f"{self.env_id} reward poller"
            )
        host = self.host
        if host.cdp is None or not host.cdp.connected or host.browser is None or not host.browser.running:
            log.warning("%s: the browser is gone; starting it again", self.env_id)
            await self._stop_browser()
            await self._start_browser()
        elif not await host.restore():
            log.warning("%s: the zoom did not go back to 100 %%; starting the browser again",
                        self.env_id)
            await self._stop_browser()
            await self._start_browser()
        cdp = host.cdp
        assert cdp is not None and host.page_input is not None
        if await host.keep_task(self.url()):
            log.warning("%s: the page was not the task any more; loaded it again", self.env_id)
        lockstep = self.mode == LOCKSTEP
        self.snapshots.forget()
        if lockstep:  # the same page time, date and input state at every episode's start
            await host.pause()
            await start_alike(cdp, host.page_input)  # pointer parked, nothing focused
            seed = fresh_seed() if seed is None else seed  # every lockstep episode can be saved
        elif await host.resume():
            self._pending = None  # the display went on meanwhile: take all of it again
        seed_call = f"Math.seedrandom({int(seed)})" if seed is not None else "Math.seedrandom()"
        utterance, episode = await cdp.evaluate(
            f"(() => {{ {seed_call}; core.startEpisodeReal(); "
            f"return [{UTTERANCE_JS}, WOB_EPISODE_ID]; }})()"
        )
        self.episodes.began(int(episode), str(utterance))
        if lockstep:
            assert seed is not None
            await self.snapshots.begin(cdp, seed)
            if draw:
                await self.take_screenshot()
        else:
            await self._take_drawn_page()
        # Numbered afresh from a0 at every episode (the same seed, the same bids) by the
        # episode's first walk, whoever asks for it: this reset's, or a front end's page().
        self.agents.new_episode(lockstep)
        self.agents.keep_observation(await self.agents.observe(self.observe) if self.observe else None)
        if self.marks and not self.observe:
            await self.agents.structure()
        if self.marks and not lockstep:
            self._draw_marks()

    async def take_screenshot(self) -> None:
        """Lockstep's frame, a function of the page alone: the first frame the display
        shows after the step (:mod:`runtimes.frame_witness`), else screenshots."""
        assert self.host.clock is not None
        x0, y0 = self.origin
        area = (x0, y0, self.width, self.height)
        shot = await self.host.display_frame(self.screen, self.display_size, area, self.env_id)
        if shot is None:
            shot = await agreed_screenshot(self.host.clock, area, self.agents.clean)
        self.agents.keep_clean(shot)
        self.framebuffer[...] = shot
        self._damage = None  # all of it may have changed: the VNC server compares
        if self.marks:
            await self.agents.structure()
            self._draw_marks()

    async def aadvance(self, events: Sequence[InputEvent], frames: int) -> StepResult:
        """A lockstep step: the input through DevTools (each event handled before the
        next), ``frames`` frames of page time, the new frame, and the outcome if the
        episode ended in them."""
        host = self.host
        if not host.paused:  # (the remote steps only in lockstep)
            return self.advance(events, frames)
        assert host.cdp is not None and host.clock is not None and host.page_input is not None
        if self.episodes.reported:  # the episode already ended: it stays done until reset
            return StepResult(frames=0)
        self.snapshots.step(events, frames)
        x0, y0 = self.origin
        await host.page_input.send([
            e._replace(x=e.x + x0, y=e.y + y0) if isinstance(e, PointerEvent) else e
            for e in events
        ])
        await host.clock.advance(frames * FRAME_MS)
        await self.take_screenshot()
        ended = self.episodes.step_end(reading(await host.cdp.evaluate(STATE_EXPRESSION)))
        result = StepResult(frames=frames, text=self.episodes.take_text())
        if ended is not None:
            result.reward, result.info = ended
            result.done = True
        observation = await self.agents.observe(self.observe) if self.observe else {}
        report = self.agents.take_step_report()
        if report is not None:  # the step's action string: its outcome
            observation.update(report)
            result.info.update({f"web.{k}": v for k, v in report.items()})
        result.observation = observation or None
        return result

    # Snapshots: lockstep only (runtimes.browser_snapshots, docs/snapshots.md, "Browser tasks") ----

    @property
    def snapshot_refusal(self) -> str | None:  # type: ignore[override]
        """Per instance: it depends on the mode (lockstep can, real time cannot)."""
        return None if self.mode == LOCKSTEP else REALTIME_REFUSAL

    def snapshot(self) -> bytes:
        return self.snapshots.save(self)

    async def arestore(self, state: bytes) -> None:
        await self.snapshots.restore(self, state)

    async def astate_digest(self) -> bytes:
        return await self.snapshots.digest(self)

    def restore(self, state: bytes) -> None:
        raise SnapshotUnsupported(f"{self.env_id} restores through its page: await arestore()")

    def state_digest(self) -> bytes:
        raise SnapshotUnsupported(f"{self.env_id} reads its digest from its page: await astate_digest()")

    # Frames, marks, the instruction and the outcome ----------------------------------------

    async def _take_drawn_page(self) -> None:
        """Take the frame once the display shows the new page: what a reset returns is
        the new episode, not the old one.

        The page's screenshot says what the new page looks like; the display's updates
        are taken until the display's task area equals it (unmarked; the whole screen's
        reward panel has a timer that may tick meanwhile). (Waiting for "the next update" was
        measured wrong both ways: an update of the reward panel alone came first, and
        the page's own update had often arrived before the wait began.)
        """
        assert self.host.clock is not None and self.screen is not None
        await self.host.hide_witness()  # lockstep's witness is no part of real time
        x0, y0 = self.origin
        page = await self.host.clock.screenshot((x0, y0, self.width, self.height))
        tx, ty, tw, th = TASK_AREA
        task = page[ty - y0 : ty - y0 + th, tx - x0 : tx - x0 + tw]
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            seen = self.screen.updates
            self.capture()
            if np.array_equal(self.screen.framebuffer[ty : ty + th, tx : tx + tw], task):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await self.screen.wait_update(seen, remaining)
        log.warning(
            "%s: the display did not show the new page within %g s; serving its screenshot",
            self.env_id, SETTLE_TIMEOUT,
        )
        self.framebuffer[...] = page
        self._pending = self._damage = None  # the next frame takes the whole display

    def capture(self) -> bool:
        """The display's changes, and the marks drawn anew over the served area."""
        changed = super().capture()
        if self.marks and (changed or self.agents.marks_stale):
            self._draw_marks()
        return changed

    def _draw_marks(self) -> None:
        """Redraw the served area from the display (or lockstep's screenshot) with marks."""
        if self.screen is None:
            return
        x0, y0 = self.origin
        frame = self.agents.marked_frame(self.screen.framebuffer[y0 : y0 + self.height, x0 : x0 + self.width])
        if frame is not None:
            self.framebuffer[...] = frame
            self._damage = None  # marks move: the server compares

    def _damaged(self, screen: Any, update: Any) -> None:
        """Note the display's change, and the first one since an action string began."""
        before = self.changed_at
        super()._damaged(screen, update)
        if self.changed_at != before:
            self.agents.on_change(self.changed_at)

    def instruction(self) -> str | None:
        return self.episodes.take_text()

    def outcome(self) -> StepResult:
        """The instruction once, the episode's outcome once, and a page observation the
        poller made since the last frame."""
        result = StepResult(text=self.episodes.take_text(), observation=self.agents.take_observation())
        self.episodes.outcome(result)
        return result

    async def asettle(self) -> dict[str, Any]:
        """Settled, counted from when the action string's input began (a change it made
        while the actor waited for the page to take it is the screen reacting), and an
        episode the action ended already reported: the page is read at once (the poller's
        next read may be :data:`POLL_INTERVAL` away) and the answer waits for the
        remote's frame that reports the end, so it says done, not the next call with the
        next episode's page."""
        acted, started = self.agents.acted_at, time.monotonic()
        settled = await super().asettle()
        self.agents.settled(settled, acted, started)
        if self.host.paused or self.host.cdp is None or self.episodes.lost:
            return settled
        await self.episodes.wait_reported(self.host.cdp)
        return settled

    async def aobservation(self, parts: frozenset[str] | None = None) -> dict[str, Any]:
        self.agents.act_over()
        wanted = self.observe if parts is None else parts
        return await self.agents.observe(wanted) if wanted and self.host.cdp is not None else {}

    def take_observation(self) -> dict[str, Any] | None:
        return self.agents.take_observation()

    async def arun_action(
        self, text: str, send: Callable[[Sequence[InputEvent]], object]
    ) -> dict[str, Any]:
        """Run an action string (:meth:`PageAgents.run_action`)."""
        return await self.agents.run_action(text, send)

    async def _poll(self) -> None:
        """Read the page's reward globals every POLL_INTERVAL; note an ended episode."""
        episodes, host = self.episodes, self.host
        while True:
            await asyncio.sleep(POLL_INTERVAL)
            generation, cdp = episodes.generation, host.cdp
            if cdp is None or host.paused or not episodes.waiting:
                continue  # (in lockstep each step reads the outcome itself)
            try:
                now_read = reading(await cdp.evaluate(STATE_EXPRESSION))
            except (CDPError, TypeError, ValueError) as exc:
                if episodes.note_lost(generation, f"lost the task page: {exc}"):
                    log.warning("%s: lost the task page: %s", self.env_id, exc)
                continue
            if generation != episodes.generation:  # a reset ran meanwhile: this is stale
                continue
            now = time.monotonic()
            observed_at = self.agents.observed_at
            if ((self.observe or self.marks) and self.changed_at > observed_at
                    and now - observed_at >= OBSERVE_INTERVAL):
                with contextlib.suppress(CDPError):  # (a lost page is the next poll's news)
                    if not self.observe:
                        await self.agents.structure()  # the marks' elements only
                    else:
                        observation = await self.agents.observe(self.observe)
                        if generation == episodes.generation and not host.paused:
                            self.agents.keep_observation(observation)
            episodes.note_end(generation, now_read)


def _runtime_class(page: str) -> type[MiniWoBRuntime]:
    env_id = env_id_for(page)
    name = env_id.split(".", 1)[1].split("-", 1)[0]
    return type(
        f"MiniWoB{name}",
        (MiniWoBRuntime,),
        {
            "env_id": env_id,
            "page": page,
            "description": f"MiniWoB++ {page.removesuffix('.html')} in Chromium on Xvnc",
            "__module__": __name__,
        },
    )


@functools.cache
def _screen_form(cls: type[MiniWoBRuntime], screen: str) -> type[MiniWoBRuntime]:
    """``cls`` serving ``screen``: the whole display (``full``) or the task area."""
    width, height = (SCREEN_WIDTH, SCREEN_HEIGHT) if screen == "full" else TASK_AREA[2:]
    base = cls.__mro__[1] if cls.screen_kind != "task" else cls
    return type(f"{base.__name__}_{screen}", (base,), {
        "width": width, "height": height, "screen_kind": screen, "__module__": __name__,
    })


def _check_programs() -> None:
    """Fail the import (the registry then explains) when Xvnc or Chromium is missing."""
    find_xvnc()
    find_chromium()


_check_programs()
#: env id -> runtime class, one per task page of the installed wheel.
RUNTIMES: dict[str, type[MiniWoBRuntime]] = {
    cls.env_id: cls
    for cls in map(_runtime_class, sorted(page.name for page in html_dir().glob("*.html")))
}

__all__ = [
    "BLANK_PAGE",
    "CHROMIUM_ENV",
    "KEYS",
    "REWARDS",
    "RUNTIMES",
    "SCREEN_HEIGHT",
    "SCREEN_WIDTH",
    "TASK_AREA",
    "MiniWoBRuntime",
    "ProgramMissing",
    "env_id_for",
    "find_chromium",
    "html_dir",
]
