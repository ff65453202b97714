"""What web agents read and do in a browser on a display (docs/browser.md).

Holds :class:`BrowserForAgents`, between :class:`~runtimes.browser_host.BrowserOnDisplay`
(the browser's lifecycle) and :class:`~runtimes.browser.MiniWoBRuntime` (the task's
episodes): the page's structure and the observations an agent asked for
(:mod:`runtimes.page_structure`), set-of-marks drawn over the served frames
(:mod:`runtimes.marks`), the display's damage and settling after an action string, and
action strings themselves (:mod:`runtimes.web_actor`): in real time as X input, in
lockstep through DevTools before the step's frames.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .base import InputEvent, PointerEvent
from .browser_host import BrowserOnDisplay
from .browser_snapshots import EpisodeLog
from .marks import draw_marks
from .page_structure import Element, PageStructure, observe
from .web_actor import WebActor


class BrowserForAgents(BrowserOnDisplay):
    """A browser on a display, with what web agents read and do on its page."""

    def __init__(self) -> None:
        super().__init__()
        #: Draw set-of-marks on every frame (the subclass's ``marks`` option).
        self.marks = False
        self._marked: list[Element] | None = None  # the elements the marks show
        self._marks_stale = False  # new elements since the marks were drawn
        self._clean: np.ndarray | None = None  # lockstep's last screenshot, unmarked
        self._observation: dict[str, Any] | None = None  # made, not yet taken
        self._observed_at = 0.0  # time.monotonic() of the last page observation
        self._renumber = False  # the next walk numbers the page afresh (a new episode)
        self._last_action: dict[str, Any] | None = None  # a lockstep step's action string
        self._input_tasks: set[asyncio.Task[None]] = set()  # lockstep actions' DevTools input
        #: Where the last action string left the pointer (screen pixels): the next one's
        #: ``scroll`` happens there, and its witness move starts from there.
        self._action_pointer: tuple[int, int] | None = None
        #: Real time, for one act (arun_action, asettle, aobservation): when the action
        #: string's input began, and when the screen first changed after that.
        self._acted_at: float | None = None
        self._first_change: float | None = None
        #: The lockstep episode's seed and inputs: its snapshot (runtimes.browser_snapshots).
        self.episode_log: EpisodeLog | None = None

    async def _structure(self, reset: bool = False) -> PageStructure:
        """The page's structure now; what the marks show."""
        assert self.cdp is not None
        reset, self._renumber = reset or self._renumber, False
        if self._paused and self.episode_log is not None:  # it numbers elements: a snapshot's
            self.episode_log.walk(reset)
        structure = await observe(self.cdp, (0, 0), reset=reset)
        self._observed_at = time.monotonic()
        if self.marks:
            self._marked, self._marks_stale = structure.elements, True
        return structure

    async def _observe(
        self, reset: bool = False, parts: frozenset[str] | None = None
    ) -> dict[str, Any]:
        """The page observation the agent asked for (``page``; or ``parts`` of it), now."""
        parts = self.observe if parts is None else parts
        structure = await self._structure(reset)
        return {"page": structure.observation(tree="tree" in parts, elements="elements" in parts)}

    def capture(self) -> bool:
        """The display's changes, and the marks drawn anew over the served area."""
        changed = super().capture()
        if self.marks and (changed or self._marks_stale):
            self._draw_marks()
        return changed

    def _draw_marks(self) -> None:
        """Redraw the served area from the display (or lockstep's screenshot) with marks."""
        if self._marked is None or self.screen is None:
            return
        x0, y0 = self.origin
        clean = (
            self._clean if self._paused and self._clean is not None
            else self.screen.framebuffer[y0 : y0 + self.height, x0 : x0 + self.width]
        )
        self.framebuffer[...] = draw_marks(clean, self._marked, frame_origin=(x0, y0))
        self._damage, self._marks_stale = None, False  # marks move: the server compares

    def _damaged(self, screen: Any, update: Any) -> None:
        """Note the display's change, and the first one since an action string began."""
        before = self.changed_at
        super()._damaged(screen, update)
        if self._acted_at is not None and self._first_change is None and self.changed_at != before:
            self._first_change = self.changed_at

    async def asettle(self) -> dict[str, Any]:
        """After an action string, counted from when its input began: a change it made
        while the actor waited for the page to take it is the screen reacting."""
        acted, started = self._acted_at, time.monotonic()
        settled = await super().asettle()
        if acted is not None:
            first, self._acted_at = self._first_change, None
            settled["react_s"] = None if first is None else first - acted
            settled["settled_s"] += started - acted
        return settled

    async def aobservation(self, parts: frozenset[str] | None = None) -> dict[str, Any]:
        self._acted_at = None  # the act is over (acting: action, settle, observation)
        wanted = self.observe if parts is None else parts
        return await self._observe(parts=wanted) if wanted and self.cdp is not None else {}

    def take_observation(self) -> dict[str, Any] | None:
        observation, self._observation = self._observation, None
        return observation

    async def arun_action(
        self, text: str, send: Callable[[Sequence[InputEvent]], object]
    ) -> dict[str, Any]:
        """Run an action string: in real time as X input ``send`` queues (recorded, seen
        by viewers); in lockstep through DevTools, before the step's frames (and then
        the step reports it, and ``noop`` moves page time instead of waiting)."""
        assert self.cdp is not None and self.page_input is not None and self.clock is not None
        x0, y0 = self.origin
        wait = None
        if not self._paused:
            self._acted_at, self._first_change = time.monotonic(), None  # (asettle)
        else:
            if self.episode_log is not None:
                self.episode_log.action(text)
            page_input, clock = self.page_input, self.clock

            async def wait(seconds: float) -> None:
                """``noop`` in lockstep: page time, at once (the wall clock is not it)."""
                await clock.advance(seconds * 1000)

            def send_now(events: Sequence[InputEvent]) -> asyncio.Task[None]:
                """DevTools input, in a task the actor awaits (its error is the action's)."""
                moved = [
                    e._replace(x=e.x + x0, y=e.y + y0) if isinstance(e, PointerEvent) else e
                    for e in events
                ]
                task = asyncio.get_running_loop().create_task(page_input.send(moved))
                self._input_tasks.add(task)
                task.add_done_callback(self._input_tasks.discard)
                return task

            send = send_now
        actor = WebActor(
            self.cdp, send, origin=(0, 0), frame_origin=(x0, y0),
            viewport=(x0, y0, self.width, self.height), wait=wait,
        )
        actor.planner.pointer = self._action_pointer
        result = await actor.run(text)
        self._action_pointer = actor.planner.pointer
        report: dict[str, Any] = {"last_action": result.action, "last_action_error": result.error}
        if result.messages:
            report["messages"] = result.messages
        if result.devtools:
            report["devtools"] = result.devtools  # what did not go as X input
        if self._paused:
            self._last_action = report
        return report
