"""Runs BrowserGym-style action strings on a page: real X input, checked just before.

Holds :class:`WebActor` (``await actor.run("fill('a12', 'hello')")`` -> an
:class:`ActionResult` whose ``error`` is BrowserGym's ``last_action_error``: an unknown
bid, a hidden or covered element, a malformed string — never an exception) and the
limits.

For each call of the string it locates the elements the call names as they are *now*
(:func:`runtimes.page_structure.locate`: one ``Runtime.evaluate``), scrolls an element
outside the viewport into view (DevTools ``scrollIntoView``, when ``scroll_into_view``),
plans the call (:class:`runtimes.web_actions.Planner`), runs its DevTools part if any,
and sends its events through ``send`` — the runtime's ``inject``, so they reach the page
as real X input (text no key types goes in through DevTools ``Input.insertText``
between them). Then it waits until the page has seen them: the events end with a
pointer move of one pixel (:data:`WITNESS_GLOBAL` listens for it in the page), and X
delivers input in order, so once the page sees that move it has handled every event
before it. The next call of the string is planned on the page as that left it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from .base import InputEvent, PointerEvent
from .cdp import CDPClient, CDPError
from .page_structure import Element, locate
from .web_actions import BATCH_GAP, Action, ActionError, Batch, Planner, element_script, parse
from .web_keys import InsertText

#: Seconds the page may take to see an action's input (X delivery, a busy page)...
SEEN_TIMEOUT: Final = 5.0
#: ...and more per event sent: a 2,000-character fill is 4,000-8,000 key events, which
#: the page takes in 1-2 s on a quiet machine here (0.2-0.3 ms each); 5 ms each allows
#: for a loaded one, so a long text that arrives is never reported as not taken.
SEEN_SECONDS_PER_EVENT: Final = 0.005
#: The page's global that notes the pointer's last move (not enumerable).
WITNESS_GLOBAL: Final = "__universeInputWitness"
#: What DevTools says when the document an evaluation ran in went away.
NAVIGATED: Final = ("Execution context was destroyed", "Inspected target navigated", "Cannot find context")
#: Parameters that name elements, in the order an action uses them.
BID_PARAMS: Final = ("bid", "from_bid", "to_bid")

_ARM_JS: Final = """(() => {
  const K = %s; let w = window[K];
  if (w === undefined) {
    w = {seq: 0, x: null, y: null, waiters: []};
    Object.defineProperty(window, K, {value: w});
    window.addEventListener('mousemove', (e) => {
      w.seq++; w.x = e.screenX; w.y = e.screenY;
      for (const wake of w.waiters.splice(0)) wake();
    }, true);
  }
  return w.seq;
})()"""
_SEEN_JS: Final = """new Promise((resolve) => {
  const w = window[%s], seq = %d, x = %d, y = %d;
  const check = () => {
    if (w !== undefined && w.seq > seq && w.x === x && w.y === y) resolve(true);
    else if (w !== undefined) w.waiters.push(check);
    else resolve(false);
  };
  check();
})"""
_SCROLL_INTO_VIEW: Final = (
    "el.scrollIntoView({block: 'center', inline: 'center', behavior: 'instant'}); return null;"
)


@dataclass(slots=True)
class ActionResult:
    """What running an action string did."""

    #: The calls run, one per line, as parsed (the string itself when it did not parse).
    action: str
    #: BrowserGym's ``last_action_error``: None when every call ran.
    error: str | None = None
    #: Texts of ``send_msg_to_user``.
    messages: list[str] = field(default_factory=list)
    #: X input events sent (the witness move included).
    events: int = 0
    #: What went through DevTools instead of X input, e.g. ``"select_option a12"``.
    devtools: list[str] = field(default_factory=list)
    seconds: float = 0.0


class WebActor:
    """Runs action strings on the page behind ``cdp``, sending X input through ``send``
    (``DisplayRuntime.inject``). ``origin``: where the page's (0, 0) is on the screen;
    ``frame_origin``: where the served frame starts (events are in its pixels);
    ``viewport``: the screen area a ``scroll`` starts at before any pointer action;
    ``wait``: how ``noop`` waits (default: the wall clock). Calls must not overlap."""

    def __init__(
        self,
        cdp: CDPClient,
        send: Callable[[Sequence[InputEvent]], object],
        *,
        origin: tuple[int, int] = (0, 0),
        frame_origin: tuple[int, int] = (0, 0),
        viewport: tuple[int, int, int, int] = (0, 0, 160, 210),
        shift_letters: bool = True,
        scroll_into_view: bool = True,
        seen_timeout: float = SEEN_TIMEOUT,
        wait: Callable[[float], Awaitable[object]] | None = None,
    ) -> None:
        self.cdp, self.send, self.origin = cdp, send, origin
        #: How ``noop(wait_ms)`` waits its seconds: the wall clock (real time), or the
        #: runtime's page clock advanced that far (lockstep, where the wall clock is not
        #: the page's time).
        self.wait: Callable[[float], Awaitable[object]] = wait if wait is not None else asyncio.sleep
        self.planner = Planner(frame_origin=frame_origin, shift_letters=shift_letters, viewport=viewport)
        self.scroll_into_view, self.seen_timeout = scroll_into_view, seen_timeout

    async def run(self, text: str) -> ActionResult:
        """Parse ``text`` and run its calls in order; stop at the first that fails."""
        started = time.perf_counter()
        try:
            actions = parse(text)
        except ActionError as exc:
            return ActionResult(text if isinstance(text, str) else repr(text), str(exc),
                                seconds=time.perf_counter() - started)
        result = ActionResult("\n".join(str(a) for a in actions))
        for action in actions:
            try:
                error = await self.perform(action, result)
            except CDPError as exc:
                error = f"{action}: the page did not answer: {exc}"
            if error is not None:
                result.error = error
                break
        result.seconds = time.perf_counter() - started
        return result

    async def perform(self, action: Action, result: ActionResult) -> str | None:
        """Run one call; its error, or None."""
        bids = [action.args[p] for p in BID_PARAMS if p in action.args]
        elements: dict[str, Element] = {}
        if bids:
            elements = await locate(self.cdp, bids, self.origin)
            if self.scroll_into_view and await self._scroll_into_view(bids, elements, result):
                elements = await locate(self.cdp, bids, self.origin)
        plan = self.planner.plan(action, elements)
        if plan.error is not None:
            return plan.error
        if plan.script is not None:
            result.devtools.append(f"{action.name} {action.args.get('bid', '')}".strip())
            error = await self.cdp.evaluate(plan.script)
            if error is not None:
                return f"{action}: {error}"
        if plan.batches:
            error = await self._send(plan.batches, result)
            if error is not None:
                return f"{action}: {error}"
        if plan.wait_ms:
            await self.wait(plan.wait_ms / 1000)
        if plan.message is not None:
            result.messages.append(plan.message)
        return None

    async def _scroll_into_view(
        self, bids: list[str], elements: dict[str, Element], result: ActionResult
    ) -> bool:
        """Scroll the first element that is rendered but out of view into it; whether
        one was (the actor then locates again)."""
        for bid in bids:
            element = elements.get(bid)
            if element is None or not element.shown or element.point is not None:
                continue
            if element.bbox[2] <= 0 or element.bbox[3] <= 0:
                continue
            result.devtools.append(f"scrollIntoView {bid}")
            await self.cdp.evaluate(element_script(bid, _SCROLL_INTO_VIEW))
            return True
        return False

    async def _send(self, batches: list[Batch], result: ActionResult) -> str | None:
        """Send each batch with a one-pixel witness move and wait until the page sees it;
        then :data:`~runtimes.web_actions.BATCH_GAP` before the next batch, so that X
        stamps the next batch later even on a loaded machine. Text no key types goes in
        through DevTools once the page has seen the keys before it."""
        for i, batch in enumerate(batches):
            if isinstance(batch, InsertText):
                result.devtools.append(f"insertText {len(batch.text)} characters")
                await self.cdp.call("Input.insertText", {"text": batch.text})
                continue
            if i and not isinstance(batches[i - 1], InsertText):
                await asyncio.sleep(BATCH_GAP)  # a time gap the page must see, not a wait for it
            error = await self._send_batch(batch, result)
            if error is not None:
                return error
        return None

    async def _send_batch(self, events: list[InputEvent], result: ActionResult) -> str | None:
        """Send ``events`` and a witness move one pixel beside where they leave the
        pointer. A batch without pointer events first puts the pointer where it is
        thought to be: a witness move to where the pointer already is makes no event
        (X and DevTools send none), and the page would never see it."""
        fx, fy = self.planner.frame_origin
        last = next((e for e in reversed(events) if isinstance(e, PointerEvent)), None)
        anchor: list[InputEvent] = []
        if last is None:
            px, py = self.planner.pointer or (0, 0)
            mask = 0
            anchor = [PointerEvent(px - fx, py - fy, mask)]
        else:
            px, py, mask = last.x + fx, last.y + fy, last.buttonmask
        x, y = px + 1 if px < 1 else px - 1, py
        timeout = self.seen_timeout + len(events) * SEEN_SECONDS_PER_EVENT
        seq = await self.cdp.evaluate(_ARM_JS % json.dumps(WITNESS_GLOBAL))
        sent = self.send([*events, *anchor, PointerEvent(x - fx, y - fy, mask)])
        self.planner.pointer = (x, y)
        result.events += len(events) + len(anchor) + 1
        if inspect.isawaitable(sent):  # DevTools input (lockstep): done once the page handled it
            try:
                await asyncio.wait_for(sent, timeout)
            except TimeoutError:
                return f"the page did not take the input within {timeout:.1f} s"
            except ValueError as exc:  # a key DevTools input cannot send
                return f"the page cannot take this input: {exc}"
        try:
            seen = await self.cdp.evaluate(
                _SEEN_JS % (json.dumps(WITNESS_GLOBAL), int(seq), x, y), timeout
            )
        except CDPError as exc:
            if "no reply" in str(exc):
                return f"the page did not see the input within {timeout:.1f} s"
            if any(sign in str(exc) for sign in NAVIGATED):
                return None  # the input made the page load another document
            raise
        return None if seen else "the page changed before it saw the input"
