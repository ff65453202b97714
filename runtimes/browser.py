"""MiniWoB++ tasks in Chromium on a TigerVNC display: ``miniwob.<Task>-v0``.

Holds :class:`MiniWoBRuntime` (one task in one browser on one Xvnc display) and
:data:`RUNTIMES`, the table ``runtimes.registry`` reads: one subclass per task page,
built at import without starting anything (where the pages and Chromium are, and how
Chromium starts: ``runtimes.chromium``). Importing this module raises
ModuleNotFoundError when the ``browser`` extra (the ``miniwob`` wheel) is missing and
:class:`~runtimes.xdisplay.ProgramMissing` (also a ModuleNotFoundError) when Xvnc or
Chromium is, naming the Debian package; the registry then lists no ``miniwob.*`` ids and
``serve`` says what to install. Here are the task's episodes (reset, lockstep steps, the
poller, the outcome, rewards, snapshots); the browser's lifecycle on its display is
:mod:`runtimes.browser_host`'s, what web agents read and do :mod:`runtimes.browser_agents`'s.

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
import time
from collections.abc import Sequence
from typing import Any, ClassVar, Final

import numpy as np

from rewarder.protocol import LOCKSTEP
from vncdriver import keysyms

from . import browser_snapshots
from .base import InputEvent, PointerEvent, StepResult
from .browser_agents import BrowserForAgents
from .browser_host import BLANK_PAGE, SCREEN_HEIGHT, SCREEN_WIDTH
from .browser_snapshots import begin_log, fresh_seed, start_alike
from .cdp import CDPError
from .chromium import (
    CHROMIUM_ENV,
    PAGE_TIMEOUT,
    READY_EXPRESSION,
    STATE_EXPRESSION,
    env_id_for,
    find_chromium,
    find_xvnc,
    html_dir,
)
from .errors import SnapshotUnsupported
from .frame_witness import WITNESS_TIMEOUT, FrameWitness, agreed_screenshot, capture_way
from .page_clock import EPOCH_MS, FRAME_MS
from .xdisplay import ProgramMissing

log = logging.getLogger(__name__)

# Screen ------------------------------------------------------------------------------------

#: Where the task is on the screen: x, y, width, height (MiniWoB's ``#wrap`` is 160x210).
TASK_AREA: Final = (0, 0, 160, 210)
#: ``serve --option screen=...``: the task area (the default) or the whole screen.
SCREENS: Final = ("task", "full")
#: ``serve --option reward=...``: what an ended episode pays (docs/browser.md): MiniWoB's
#: reward discounted by the time taken (default), its raw one, or BrowserGym's 1.0 or 0.0.
REWARDS: Final = ("discounted", "raw", "success")
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
#: Seconds a settled action waits for the episode it ended to be reported (the remote's
#: next frame takes it): its answer then says done.
OUTCOME_WAIT: Final = 0.25
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


class MiniWoBRuntime(BrowserForAgents):
    """One MiniWoB++ task in Chromium on an X display that the remote serves."""

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
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, not {reward!r}")
        self.marks, self.reward = bool(marks), reward
        self._generation = 0  # bumped by every reset: the poller drops older readings
        #: WOB_EPISODE_ID when our episode started; None while a reset starts one.
        self._wob_episode: int | None = 0
        self._text: str | None = None  # the instruction, sent at the episode's first frame
        self._outcome: tuple[float, dict[str, Any]] | None = None  # set by the poller
        self._reported = False
        self._taken: asyncio.Event | None = None  # set when outcome() reports an end (asettle)
        self._failure: str | None = None  # set by the poller when the browser is lost
        # describe on an instance says whether it can snapshot in its mode, now
        self.describe = self._describe_now  # type: ignore[method-assign]

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {**super().describe(), "task_area": list(TASK_AREA), "screen": cls.screen_kind,
                "snapshots": browser_snapshots.REALTIME_REFUSAL}

    def _describe_now(self) -> dict[str, Any]:
        """:meth:`describe` of this instance (the remote asks the runtime it serves):
        whether it can snapshot depends on its mode."""
        return {**type(self).describe(), "snapshots": self.snapshot_refusal}

    # Episodes ------------------------------------------------------------------------------

    async def areset(self, seed: int | None = None, *, draw: bool = True) -> None:
        """Seed the page and start a new episode, and take its first frame (not with
        ``draw`` false: a restore's replay draws only its last); bring the browser (and
        the display) back if it is lost."""
        self._wob_episode = None  # before the bump: no poll may take the last end for ours
        self._generation += 1
        self._outcome, self._reported, self._failure = None, False, None
        await self._revive_display()
        if self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(
                self._poll(), name=f"{self.env_id} reward poller"
            )
        browser_alive = self.browser is not None and self.browser.running
        if self.cdp is None or not self.cdp.connected or not browser_alive:
            log.warning("%s: the browser is gone; starting it again", self.env_id)
            await self._stop_browser()
            await self._start_browser()
        elif self.one_page is not None and not await self.one_page.restore():
            log.warning("%s: the zoom did not go back to 100 %%; starting the browser again",
                        self.env_id)
            await self._stop_browser()
            await self._start_browser()
        assert self.cdp is not None and self.clock is not None and self.page_input is not None
        if not await self.cdp.evaluate(
            f"(() => {{ try {{ return {READY_EXPRESSION}; }} catch (e) {{ return false; }} }})()"
        ):
            log.warning("%s: the page is not the task any more; loading it again", self.env_id)
            await self.cdp.navigate(self.url(), PAGE_TIMEOUT)
            await self.cdp.wait_for(READY_EXPRESSION, PAGE_TIMEOUT)
            self._paused = False  # a new document: its clock starts in real time
        lockstep = self.mode == LOCKSTEP
        self.episode_log = None
        if lockstep:  # the same page time, date and input state at every episode's start
            await self.clock.pause(at_ms=EPOCH_MS, restart=True)
            await self.page_input.release()
            await start_alike(self.cdp, self.page_input)  # pointer parked, nothing focused
            self._action_pointer = None
            seed = fresh_seed() if seed is None else seed  # every lockstep episode can be saved
        elif self._paused:
            await self.clock.resume()
            self._pending = None  # the display went on meanwhile: take all of it again
        self._paused = lockstep
        seed_call = f"Math.seedrandom({int(seed)})" if seed is not None else "Math.seedrandom()"
        utterance, episode = await self.cdp.evaluate(
            f"(() => {{ {seed_call}; core.startEpisodeReal(); "
            f"return [{UTTERANCE_JS}, WOB_EPISODE_ID]; }})()"
        )
        self._wob_episode = int(episode)
        self._text = str(utterance)
        self._last_action = None
        if lockstep:
            assert seed is not None
            self.episode_log = await begin_log(self.cdp, seed)
            if draw:
                await self._take_screenshot()
        else:
            await self._take_drawn_page()
        # Numbered afresh from a0 at every episode (the same seed, the same bids) by the
        # episode's first walk, whoever asks for it: this reset's, or a front end's page().
        self._renumber = True
        self._observation = await self._observe() if self.observe else None
        if self.marks and not self.observe:
            await self._structure()
        if self.marks and not lockstep:
            self._draw_marks()

    async def _take_screenshot(self) -> None:
        """Lockstep's frame, a function of the page alone: the first frame the display
        shows after the step (:mod:`runtimes.frame_witness`), else screenshots."""
        assert self.clock is not None
        x0, y0 = self.origin
        area = (x0, y0, self.width, self.height)
        shot = await self._display_frame(area)
        if shot is None:
            shot = await agreed_screenshot(self.clock, area, self._clean)
        self._clean = shot
        self.framebuffer[...] = shot
        self._damage = None  # all of it may have changed: the VNC server compares
        if self.marks:
            await self._structure()
            self._draw_marks()

    async def _display_frame(self, area: tuple[int, int, int, int]) -> np.ndarray | None:
        """The step's frame from the display, once it shows the page as it is now
        (:mod:`runtimes.frame_witness`); None when it cannot (the whole screen served,
        the old way asked for, the display stalled)."""
        assert self.cdp is not None
        witness, screen = self._witness, self.screen
        if screen is None or capture_way() != "display":
            return None
        if witness is None or witness.cdp is not self.cdp or witness.screen is not screen:
            witness = self._witness = FrameWitness(self.cdp, screen, self.display_size)
        if not witness.usable_for(area):
            return None
        shot = await witness.capture(area)
        if shot is None:
            log.warning("%s: the display did not show the step's frame within %g s; taking "
                        "screenshots", self.env_id, WITNESS_TIMEOUT)
        return shot

    async def aadvance(self, events: Sequence[InputEvent], frames: int) -> StepResult:
        """A lockstep step: the input through DevTools (each event handled before the
        next), ``frames`` frames of page time, the new frame, and the outcome if the
        episode ended in them."""
        if not self._paused:  # (the remote steps only in lockstep)
            return self.advance(events, frames)
        assert self.cdp is not None and self.clock is not None and self.page_input is not None
        if self._reported:  # the episode already ended: it stays done until reset
            return StepResult(frames=0)
        if self.episode_log is not None:
            self.episode_log.step(events, frames)
        x0, y0 = self.origin
        await self.page_input.send([
            e._replace(x=e.x + x0, y=e.y + y0) if isinstance(e, PointerEvent) else e
            for e in events
        ])
        await self.clock.advance(frames * FRAME_MS)
        await self._take_screenshot()
        done, reward, raw, episode, reason = await self.cdp.evaluate(STATE_EXPRESSION)
        result = StepResult(frames=frames, text=self._text)
        self._text = None
        if done and self._wob_episode is not None and int(episode) > self._wob_episode:
            self._reported = True
            result.reward, result.info = self._payment(reward, raw, reason, episode)
            result.done = True
        observation = await self._observe() if self.observe else {}
        if self._last_action is not None:  # the step's action string: its outcome
            observation.update(self._last_action)
            result.info.update({f"web.{k}": v for k, v in self._last_action.items()})
            self._last_action = None
        result.observation = observation or None
        return result

    # Snapshots: lockstep only (runtimes.browser_snapshots, docs/snapshots.md, "Browser tasks") ----

    @property
    def snapshot_refusal(self) -> str | None:  # type: ignore[override]
        """Per instance: it depends on the mode (lockstep can, real time cannot)."""
        return None if self.mode == LOCKSTEP else browser_snapshots.REALTIME_REFUSAL

    def snapshot(self) -> bytes:
        return browser_snapshots.snapshot(self)

    async def arestore(self, state: bytes) -> None:
        await browser_snapshots.restore(self, state)

    async def astate_digest(self) -> bytes:
        return await browser_snapshots.digest(self)

    def restore(self, state: bytes) -> None:
        raise SnapshotUnsupported(f"{self.env_id} restores through its page: await arestore()")

    def state_digest(self) -> bytes:
        raise SnapshotUnsupported(f"{self.env_id} reads its digest from its page: await astate_digest()")

    # Frames, the instruction and the outcome ---------------------------------------------

    async def _take_drawn_page(self) -> None:
        """Take the frame once the display shows the new page: what a reset returns is
        the new episode, not the old one.

        The page's screenshot says what the new page looks like; the display's updates
        are taken until the display's task area equals it (unmarked; the whole screen's
        reward panel has a timer that may tick meanwhile). (Waiting for "the next update" was
        measured wrong both ways: an update of the reward panel alone came first, and
        the page's own update had often arrived before the wait began.)
        """
        assert self.clock is not None and self.screen is not None
        if self._witness is not None:  # lockstep's witness is no part of real time
            await self._witness.hide()
        x0, y0 = self.origin
        page = await self.clock.screenshot((x0, y0, self.width, self.height))
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

    def instruction(self) -> str | None:
        text, self._text = self._text, None
        return text

    def outcome(self) -> StepResult:
        """The instruction once, the episode's outcome once, and a page observation the
        poller made since the last frame."""
        result = StepResult(text=self._text, observation=self.take_observation())
        self._text = None
        if self._outcome is not None and not self._reported:
            self._reported = True
            result.reward, result.info = self._outcome
            result.done = True
            if self._taken is not None:
                self._taken.set()
        elif self._failure is not None and not self._reported:
            self._reported = True
            result.done = True
            result.info = {"browser.error": self._failure}
        return result

    async def asettle(self) -> dict[str, Any]:
        """Settled, and an episode the action ended already reported: the page is read at
        once (the poller's next read may be :data:`POLL_INTERVAL` away) and the answer
        waits for the remote's frame that reports the end, so it says done, not the next
        call with the next episode's page."""
        settled = await super().asettle()
        if self._paused or self.cdp is None or self._failure is not None:
            return settled
        generation, self._taken = self._generation, asyncio.Event()
        if self._outcome is None and self._wob_episode is not None:
            with contextlib.suppress(CDPError, TypeError, ValueError):  # (the poller's news)
                self._note_end(generation, *await self.cdp.evaluate(STATE_EXPRESSION))
        if self._outcome is not None and not self._reported and generation == self._generation:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(OUTCOME_WAIT):
                    await self._taken.wait()
        return settled

    async def _poll(self) -> None:
        """Read the page's reward globals every POLL_INTERVAL; note an ended episode."""
        while True:
            await asyncio.sleep(POLL_INTERVAL)
            generation, cdp = self._generation, self.cdp
            if cdp is None or self._paused or self._outcome is not None or self._failure is not None:
                continue  # (in lockstep each step reads the outcome itself)
            try:
                done, reward, raw, episode, reason = await cdp.evaluate(STATE_EXPRESSION)
            except (CDPError, TypeError, ValueError) as exc:
                if generation == self._generation and self._failure is None:
                    self._failure = f"lost the task page: {exc}"
                    log.warning("%s: %s", self.env_id, self._failure)
                continue
            if generation != self._generation:  # a reset ran meanwhile: this is stale
                continue
            now = time.monotonic()
            if ((self.observe or self.marks) and self.changed_at > self._observed_at
                    and now - self._observed_at >= OBSERVE_INTERVAL):
                with contextlib.suppress(CDPError):  # (a lost page is the next poll's news)
                    if not self.observe:
                        await self._structure()  # the marks' elements only
                    else:
                        observation = await self._observe()
                        if generation == self._generation and not self._paused:
                            self._observation = observation
            self._note_end(generation, done, reward, raw, episode, reason)

    def _note_end(self, generation: int, done: Any, reward: float, raw: float, episode: Any,
                  reason: Any) -> None:
        """Keep the page's ended episode as ours to report, if it is ours (a reading from
        before a reset, or of the episode before ours, is not)."""
        if (generation == self._generation and done and self._outcome is None
                and self._wob_episode is not None and int(episode) > self._wob_episode):
            self._outcome = self._payment(reward, raw, reason, episode)

    def _payment(self, reward: float, raw: float, reason: Any, episode: int) -> tuple[float, dict[str, Any]]:
        """The reward an ended episode pays (:attr:`reward`'s kind) and its info."""
        paid = {"discounted": float(reward), "raw": float(raw), "success": float(raw > 0)}
        info = {"wob.reward": float(reward), "wob.raw_reward": float(raw),
                "wob.reason": reason, "wob.episodes": int(episode)}
        return paid[self.reward], info


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
