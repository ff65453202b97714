"""What a page has pending, asked over DevTools: the page's side of settling.

Holds :class:`PageIdle` (put a small tracker into a page, then :meth:`~PageIdle.probe`
it for a :class:`~runtimes.settle.PageReport`), :func:`tracker_script` (the tracker as
JavaScript) and :data:`TRACKER_GLOBAL`. ``runtimes.settle`` decides with the reports;
``runtimes.xruntime`` asks for them while an action settles.

The tracker runs in every document before the page's own scripts
(``Page.addScriptToEvaluateOnNewDocument``), after the page clock
(``runtimes.page_clock``), whose timers it wraps in turn. It keeps the page's pending
one-shot timers with their due time, its intervals with their period, its animation
frame callbacks, its ``fetch``/``XMLHttpRequest`` requests in flight, and counts the
trusted button, key and wheel events the page handled (and where its last mouse event
was). A probe waits two of the page's frames — so what the page changed has been drawn —
and then says what is pending: one-shot timers due within ``horizon`` and finite running
animations (``document.getAnimations()``: CSS transitions and animations, Web
Animations) ending within it are ``due``; animation frames, intervals of ``fast`` ms or
less, a one-shot timer re-armed by a callback that already ran in this wait (a polling
loop), infinite or longer animations and requests are ``ongoing``. Slower intervals (a
countdown that ticks each second) are the page's own time, not the action's.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

from .cdp import CDPClient, CDPError
from .settle import PROBE_TIMEOUT, QUIET_SECONDS, TIMER_HORIZON, PageReport

#: The global the tracker lives under in the page (not enumerable).
TRACKER_GLOBAL: Final = "__universeSettle"

# Placeholders in %...% are filled by tracker_script(); the rest is literal.
_TRACKER_JS: Final = r"""
(() => {
  const NAME = %NAME%;
  if (Object.prototype.hasOwnProperty.call(window, NAME)) return;
  const HORIZON = %HORIZON%, FAST = %FAST%;
  const now = () => performance.now();  // the page clock's time once it is installed
  const sTimeout = window.setTimeout, sInterval = window.setInterval;
  const sClearTimeout = window.clearTimeout, sClearInterval = window.clearInterval;
  const sRaf = window.requestAnimationFrame, sCaf = window.cancelAnimationFrame;
  const timers = new Map(), frames = new Set(), ran = new WeakMap();
  let mark = Infinity, inputs = 0, px = null, py = null, requests = 0;
  const noteRan = (fn) => { if (typeof fn === 'function') ran.set(fn, now()); };
  const invoke = (self, fn, args) =>
    typeof fn === 'function' ? fn.apply(self, args) : (0, eval)(String(fn));
  const looping = (fn) => typeof fn === 'function' && (ran.get(fn) ?? -Infinity) >= mark;

  window.setTimeout = function (fn, delay, ...args) {
    const ms = Math.max(0, Number(delay) || 0);
    const t = {due: now() + ms, every: 0, loop: looping(fn) && ms <= FAST};
    const id = sTimeout.call(window, function () {
      timers.delete(id); noteRan(fn); return invoke(this, fn, args);
    }, delay);
    timers.set(id, t);
    return id;
  };
  window.setInterval = function (fn, delay, ...args) {
    const t = {due: 0, every: Math.max(4, Number(delay) || 0), loop: false};
    const id = sInterval.call(window, function () { noteRan(fn); return invoke(this, fn, args); }, delay);
    timers.set(id, t);
    return id;
  };
  window.clearTimeout = function (id) { timers.delete(id); return sClearTimeout.call(window, id); };
  window.clearInterval = function (id) { timers.delete(id); return sClearInterval.call(window, id); };
  window.requestAnimationFrame = function (fn) {
    const id = sRaf.call(window, (stamp) => { frames.delete(id); noteRan(fn); return fn(stamp); });
    frames.add(id);
    return id;
  };
  window.cancelAnimationFrame = function (id) { frames.delete(id); return sCaf.call(window, id); };

  if (typeof window.fetch === 'function') {
    const sFetch = window.fetch;
    window.fetch = function (...args) {
      requests++;
      let done = false;
      const over = () => { if (!done) { done = true; requests--; } };
      try {
        const p = sFetch.apply(window, args);
        p.then(over, over);
        return p;
      } catch (e) { over(); throw e; }
    };
  }
  const sSend = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function (...args) {
    requests++;
    this.addEventListener('loadend', () => { requests--; }, {once: true});
    try { return sSend.apply(this, args); } catch (e) { requests--; throw e; }
  };

  const seen = (e) => {
    if (!e.isTrusted) return;
    if (e.type !== 'mousemove') inputs++;
    if (e.type !== 'keydown' && e.type !== 'keyup') { px = e.screenX; py = e.screenY; }
  };
  for (const type of ['mousedown', 'mouseup', 'keydown', 'keyup', 'wheel', 'mousemove'])
    window.addEventListener(type, seen, {capture: true, passive: true});

  const frame = () => new Promise((resolve) => sRaf.call(window, resolve));
  const api = {
    async probe(first) {
      if (first) mark = now();
      await frame(); await frame();
      const t = now(), ongoing = new Set();
      let due = 0, until = 0;
      const soon = (left) => {
        if (left > HORIZON) return false;
        due++; until = Math.max(until, left); return true;
      };
      for (const x of timers.values()) {
        if (x.every) { if (x.every <= FAST) ongoing.add('interval'); }
        else if (x.loop) ongoing.add('timer-loop');
        else soon(x.due - t);
      }
      if (frames.size) ongoing.add('frames');
      for (const a of (document.getAnimations ? document.getAnimations() : [])) {
        if (a.playState !== 'running') continue;
        const end = a.effect ? a.effect.getComputedTiming().endTime : Infinity;
        const left = (end - (Number(a.currentTime) || 0)) / (Math.abs(a.playbackRate) || 1);
        if (!Number.isFinite(left) || !soon(left)) ongoing.add('animation');
      }
      if (requests > 0) ongoing.add('network');
      return {due, until: Math.max(0, until), ongoing: [...ongoing], inputs,
              pointer: px === null ? null : [px, py]};
    },
    inputs() { return inputs; },
  };
  Object.defineProperty(window, NAME, {value: Object.freeze(api)});
})();
"""


def tracker_script(*, horizon_s: float = TIMER_HORIZON, fast_s: float = QUIET_SECONDS) -> str:
    """The tracker as JavaScript: one-shot timers within ``horizon_s`` are due, intervals
    of ``fast_s`` or less ongoing. Running it twice in one document does nothing."""
    values = {
        "NAME": json.dumps(TRACKER_GLOBAL),
        "HORIZON": repr(horizon_s * 1000),
        "FAST": repr(fast_s * 1000),
    }
    script = _TRACKER_JS
    for key, value in values.items():
        script = script.replace(f"%{key}%", value)
    return script


class PageIdle:
    """The tracker of the page behind ``cdp``: :meth:`install` once, then :meth:`probe`."""

    def __init__(self, cdp: CDPClient) -> None:
        self.cdp = cdp
        self._script_id: str | None = None

    async def install(self) -> int:
        """Put the tracker into every document from now on and into the current one (its
        timers set before keep going, untracked); the page's input count now."""
        source = tracker_script()
        if self._script_id is not None:
            await self.cdp.remove_script(self._script_id)
        self._script_id = await self.cdp.add_script(source)
        await self.cdp.evaluate(f"{source}; 0")
        return int(await self.cdp.evaluate(f"window[{json.dumps(TRACKER_GLOBAL)}].inputs()"))

    async def probe(self, first: bool, sent: int, timeout: float = PROBE_TIMEOUT) -> PageReport | None:
        """What the page has pending, two of its frames from now; ``first``: a new wait
        begins (polling loops count from here); ``sent``: the input count to compare
        with. None when the page cannot say (no tracker, a stuck or lost page)."""
        expression = (
            f"(() => {{ const s = window[{json.dumps(TRACKER_GLOBAL)}]; "
            f"return s === undefined ? null : s.probe({'true' if first else 'false'}); }})()"
        )
        try:
            value = await asyncio.wait_for(self.cdp.evaluate(expression, timeout), timeout)
        except (CDPError, TimeoutError):
            return None
        return report_from_page(value, sent)


def report_from_page(value: Any, sent: int) -> PageReport | None:
    """A :class:`PageReport` from the tracker's answer; None if it is not one."""
    if not isinstance(value, dict):
        return None
    try:
        pointer = value.get("pointer")
        return PageReport(
            due=int(value["due"]), until=float(value["until"]) / 1000,
            ongoing=tuple(str(o) for o in value["ongoing"]), inputs=int(value["inputs"]),
            pointer=(int(pointer[0]), int(pointer[1])) if pointer else None, sent=sent,
        )
    except (KeyError, TypeError, ValueError, IndexError):
        return None
