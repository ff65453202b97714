"""What web agents read and do in a browser on a display (docs/browser.md): a part of
``runtimes.browser``'s runtime.

Holds :class:`PageAgents`: the page's structure and the observations an agent asked for
(:mod:`runtimes.page_structure`), set-of-marks drawn over the served frames
(:mod:`runtimes.marks`), when the screen first reacted to an action string, and action
strings themselves (:mod:`runtimes.web_actor`): in real time as X input, in lockstep
through DevTools before the step's frames. It reads the page through the runtime's
:class:`~runtimes.browser_host.BrowserHost` and tells a :class:`Recorder` (the snapshot
part) what numbers elements and what acts, so that a lockstep episode can be replayed.
The runtime writes the frames: :meth:`PageAgents.marked_frame` only draws them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from .base import InputEvent, PointerEvent
from .browser_host import BrowserHost, Rect
from .marks import draw_marks
from .page_structure import Element, PageStructure, observe
from .web_actor import WebActor


class Recorder(Protocol):
    """What the agents' part tells of a lockstep episode (the snapshot part keeps it)."""

    def walk(self, reset: bool) -> None: ...

    def action(self, text: str) -> None: ...


class PageAgents:
    """What web agents read and do on the host's page, served at ``area`` (x, y, width,
    height on the screen)."""

    def __init__(self, host: BrowserHost, recorder: Recorder, area: Rect, marks: bool = False) -> None:
        self.host, self.recorder, self.area = host, recorder, area
        #: Draw set-of-marks on every frame (the runtime's ``marks`` option).
        self.marks = marks
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

    # A new episode -------------------------------------------------------------------------

    def new_episode(self, lockstep: bool) -> None:
        """Elements numbered afresh from a0 by the episode's first walk, whoever asks for
        it (the reset's, or a front end's ``page()``); no step's action string left; in
        lockstep, no pointer left from the last episode (the reset parked it)."""
        self._renumber, self._last_action = True, None
        if lockstep:
            self._action_pointer = None

    # The page's structure and observations -------------------------------------------------

    @property
    def observed_at(self) -> float:
        """time.monotonic() of the last walk of the page."""
        return self._observed_at

    async def structure(self, reset: bool = False) -> PageStructure:
        """The page's structure now; what the marks show."""
        cdp = self.host.cdp
        assert cdp is not None
        reset, self._renumber = reset or self._renumber, False
        if self.host.paused:  # it numbers elements: a snapshot's
            self.recorder.walk(reset)
        structure = await observe(cdp, (0, 0), reset=reset)
        self._observed_at = time.monotonic()
        if self.marks:
            self._marked, self._marks_stale = structure.elements, True
        return structure

    async def observe(self, parts: frozenset[str], reset: bool = False) -> dict[str, Any]:
        """The page observation of ``parts`` (``tree``, ``elements``), now."""
        structure = await self.structure(reset)
        return {"page": structure.observation(tree="tree" in parts, elements="elements" in parts)}

    def keep_observation(self, observation: dict[str, Any] | None) -> None:
        """An observation made for the next frame (None: none)."""
        self._observation = observation

    def take_observation(self) -> dict[str, Any] | None:
        """The observation made since the last frame, once."""
        observation, self._observation = self._observation, None
        return observation

    # Marks ---------------------------------------------------------------------------------

    @property
    def marks_stale(self) -> bool:
        """Elements were walked since the marks were last drawn."""
        return self._marks_stale

    def keep_clean(self, shot: np.ndarray) -> None:
        """Lockstep's frame before marks: what they are drawn over."""
        self._clean = shot

    @property
    def clean(self) -> np.ndarray | None:
        """Lockstep's last frame before marks (None: none yet)."""
        return self._clean

    def marked_frame(self, display: np.ndarray) -> np.ndarray | None:
        """The served area with marks over it: drawn on lockstep's screenshot, else on
        ``display`` (the display's served area); None before any walk."""
        if self._marked is None:
            return None
        clean = self._clean if self.host.paused and self._clean is not None else display
        self._marks_stale = False
        return draw_marks(clean, self._marked, frame_origin=self.area[:2])

    # Acting --------------------------------------------------------------------------------

    def on_change(self, at: float) -> None:
        """The served area changed at ``at``: the first change since an action string
        began is the screen's reaction to it."""
        if self._acted_at is not None and self._first_change is None:
            self._first_change = at

    @property
    def acted_at(self) -> float | None:
        """When the real-time action string being settled began its input."""
        return self._acted_at

    def settled(self, settled: dict[str, Any], acted: float | None, started: float) -> None:
        """The settling's figures counted from ``acted`` (the action's input), not from
        ``started`` (the wait): a change it made while the actor waited for the page to
        take it is the screen reacting."""
        if acted is not None:
            first, self._acted_at = self._first_change, None
            settled["react_s"] = None if first is None else first - acted
            settled["settled_s"] += started - acted

    def act_over(self) -> None:
        """The act (action, settle, observation) is over."""
        self._acted_at = None

    def take_step_report(self) -> dict[str, Any] | None:
        """A lockstep step's action string's report, once."""
        report, self._last_action = self._last_action, None
        return report

    async def run_action(
        self, text: str, send: Callable[[Sequence[InputEvent]], object]
    ) -> dict[str, Any]:
        """Run an action string: in real time as X input ``send`` queues (recorded, seen
        by viewers); in lockstep through DevTools, before the step's frames (and then
        the step reports it, and ``noop`` moves page time instead of waiting)."""
        host = self.host
        assert host.cdp is not None and host.page_input is not None and host.clock is not None
        x0, y0, width, height = self.area
        wait = None
        if not host.paused:
            self._acted_at, self._first_change = time.monotonic(), None  # (settled)
        else:
            self.recorder.action(text)
            page_input, clock = host.page_input, host.clock

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
            host.cdp, send, origin=(0, 0), frame_origin=(x0, y0),
            viewport=(x0, y0, width, height), wait=wait,
        )
        actor.planner.pointer = self._action_pointer
        result = await actor.run(text)
        self._action_pointer = actor.planner.pointer
        report: dict[str, Any] = {"last_action": result.action, "last_action_error": result.error}
        if result.messages:
            report["messages"] = result.messages
        if result.devtools:
            report["devtools"] = result.devtools  # what did not go as X input
        if host.paused:
            self._last_action = report
        return report
