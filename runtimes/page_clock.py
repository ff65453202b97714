"""Lockstep time for a web page: the page's clock moves only when the agent steps.

Holds :class:`PageClock` (install a clock into a page over CDP, then :meth:`~PageClock.pause`,
:meth:`~PageClock.advance`, :meth:`~PageClock.resume`, :meth:`~PageClock.screenshot`),
:func:`no_caret_blink_env` (the browser environment that stops the text caret's blinking),
:func:`measure` (steps per second of a step loop, for benchmarks) and the limits.

**Why a clock in the page, not Chromium's virtual time.** ``Emulation.setVirtualTimePolicy``
stops the page's time, but in headed Chromium (156, software compositing, measured on
Xvnc) it stops its rendering too: while virtual time is paused no frame is drawn
(``requestAnimationFrame`` ran 0 times in 0.5 s; ``Page.captureScreenshot`` got no reply
in 3 s, and every later one queued behind it), and frames are drawn only while virtual
time advances, which it does as fast as the page is idle (509,195 s of page time in 0.5 s
of wall time), so a frame cannot be had at a chosen virtual instant. ``HeadlessExperimental
.beginFrame``, which would, exists only in the old headless shell, not on a display.

So the clock is JavaScript, run in every document before the page's own scripts
(``Page.addScriptToEvaluateOnNewDocument``). It replaces what a page reads time through:
``Date`` (``new Date()``, ``Date()``, ``Date.now()``), ``performance.now()``,
``Event.prototype.timeStamp``, ``setTimeout``/``setInterval`` and their clears,
``requestAnimationFrame``/``cancelAnimationFrame``; and it holds the document's Web
Animations (CSS transitions and animations, ``element.animate``) and steps their
``currentTime`` itself. In real time it passes through to the browser's own timers (same
ids either way, so a timer set in one mode is cleared in the other). In lockstep nothing
the page schedules runs until :meth:`PageClock.advance`, which runs the due timers in
order of due time, each in a task of its own (its promise callbacks run before the next),
and animation frames every :data:`FRAME_MS` of page time (a task each that ran page
code). MiniWoB's 10 s limit is a ``setTimeout``: a slow agent never loses an episode to
it.

Rendering stays Chromium's own, in real time: the pixels are a function of the DOM and
the held animations, and :meth:`PageClock.screenshot` asks Chromium for a new frame of
them (a lossless PNG); Chromium rasterises whole tiles (``--disable-partial-raster`` in
``runtimes.chromium``), so the same page gives the same pixels whenever its frames were
drawn. What the clock cannot reach, and what would: the text caret blinks
on the browser's real clock (:func:`no_caret_blink_env` turns blinking off through GTK's
setting, so the caret is drawn steadily), wheel scrolling is animated by the compositor
(Chromium's ``--disable-smooth-scrolling``), and GIFs, videos, SMIL, workers and iframes
other than the top document keep real time.

Use::

    clock = PageClock(cdp)
    await clock.install()                 # before loading the page (or reload it after)
    await cdp.navigate(url)
    await clock.pause(at_ms=EPOCH_MS)     # lockstep: Date.now() == EPOCH_MS from here
    await clock.advance(1000 / 60)        # one frame of page time
    pixels = await clock.screenshot((0, 0, 160, 210))
    await clock.resume()                  # real time again
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from .cdp import CALL_TIMEOUT, CDPClient, CDPError

#: The global the clock lives under in the page (not enumerable).
CLOCK_GLOBAL: Final = "__universePageClock"
#: Page milliseconds between animation frames in lockstep (60 frames a second).
FRAME_MS: Final = 1000 / 60
#: ``Date.now()`` at :meth:`PageClock.pause` unless told otherwise: 2017-07-14 02:40 UTC.
#: A fixed date, so pages that show today's date (date pickers) draw the same each run.
EPOCH_MS: Final = 1_500_000_000_000
#: Timer callbacks and frames one advance may run; past it the page is looping on timers
#: of 0 ms (a bug of the page) and the advance fails instead of hanging.
MAX_CALLBACKS: Final = 100_000
#: Page milliseconds one advance may cover (an hour); larger budgets are a caller's bug.
MAX_ADVANCE_MS: Final = 3_600_000.0
#: Seconds an advance may take in wall time (it runs the page's callbacks).
ADVANCE_TIMEOUT: Final = 30.0
#: Timers nested deeper than this get at least CLAMP_MS, as browsers do (HTML spec).
NESTING_LEVEL: Final = 5
CLAMP_MS: Final = 4.0
#: The clock's first timer id: above the browser's own, which count up from 1.
FIRST_ID: Final = 1 << 30

# The page's side. Placeholders in %...% are filled by _script(); the rest is literal.
_CLOCK_JS: Final = r"""
(() => {
  const NAME = %NAME%;
  if (Object.prototype.hasOwnProperty.call(window, NAME)) return;
  const FRAME = %FRAME%, MAX_CALLS = %MAX_CALLS%, NESTING = %NESTING%, CLAMP = %CLAMP%;
  const SLACK = 1e-6;  // ms: a frame due within rounding of the advance's end runs in it
  const nSetTimeout = window.setTimeout.bind(window);
  const nClearTimeout = window.clearTimeout.bind(window);
  const nRaf = window.requestAnimationFrame.bind(window);
  const nCaf = window.cancelAnimationFrame.bind(window);
  const nPerfNow = performance.now.bind(performance);
  const NativeDate = Date, nDateNow = Date.now;
  const nStamp = Object.getOwnPropertyDescriptor(Event.prototype, 'timeStamp').get;
  // Ids from FIRST_ID up: never one of the browser's own (small) ids, so that a timer set
  // before the clock came is still cleared by the browser.
  const s = {lockstep: %LOCKSTEP%, now: 0, shift: 0, epoch: %EPOCH%, nextFrame: FRAME,
             seq: %FIRST_ID%, level: 0, timers: new Map(), frames: new Map(), held: new Set()};
  const mono = () => s.lockstep ? s.now : nPerfNow() + s.shift;
  const dateNow = () => s.lockstep ? Math.floor(s.epoch + s.now) : nDateNow();
  const call = (fn, args) => { try { fn.apply(window, args); } catch (e) { reportError(e); } };

  const arm = (t) => { t.native = nSetTimeout(() => fire(t), Math.max(0, t.due - mono())); };
  const fire = (t) => {
    if (t.every === null) s.timers.delete(t.id);
    else { t.due = s.lockstep ? t.due + t.every : mono() + t.every; if (!s.lockstep) arm(t); }
    const outer = s.level; s.level = t.level;
    try {
      if (typeof t.fn === 'function') call(t.fn, t.args); else (0, eval)(String(t.fn));
    } catch (e) { reportError(e); } finally { s.level = outer; }
  };
  const addTimer = (fn, delay, args, repeat) => {
    const level = s.level + 1;
    let ms = Math.max(0, Number(delay) || 0);
    if (level > NESTING && ms < CLAMP) ms = CLAMP;
    const t = {id: s.seq++, due: mono() + ms, every: repeat ? Math.max(ms, CLAMP) : null,
               fn, args, level, native: 0};
    s.timers.set(t.id, t);
    if (!s.lockstep) arm(t);
    return t.id;
  };
  const clearTimer = (id) => {
    const t = s.timers.get(id);
    if (t === undefined) nClearTimeout(id);
    else { s.timers.delete(id); if (!s.lockstep) nClearTimeout(t.native); }
  };
  const runFrame = (f, stamp) => { s.frames.delete(f.id); call(f.fn, [stamp]); };
  const armFrame = (f) => { f.native = nRaf((stamp) => runFrame(f, stamp + s.shift)); };

  window.setTimeout = (fn, delay, ...args) => addTimer(fn, delay, args, false);
  window.setInterval = (fn, delay, ...args) => addTimer(fn, delay, args, true);
  window.clearTimeout = window.clearInterval = (id) => clearTimer(id);
  window.requestAnimationFrame = (fn) => {
    const f = {id: s.seq++, fn, native: 0};
    s.frames.set(f.id, f);
    if (!s.lockstep) armFrame(f);
    return f.id;
  };
  window.cancelAnimationFrame = (id) => {
    const f = s.frames.get(id);
    if (f === undefined) nCaf(id);
    else { s.frames.delete(id); if (!s.lockstep) nCaf(f.native); }
  };
  Object.defineProperty(performance, 'now', {value: () => mono(), configurable: true, writable: true});
  Object.defineProperty(Event.prototype, 'timeStamp', {configurable: true, enumerable: true,
    get() { return s.lockstep ? s.now : nStamp.call(this) + s.shift; }});
  function FakeDate(...a) {
    if (new.target === undefined) return new NativeDate(dateNow()).toString();
    return Reflect.construct(NativeDate, a.length ? a : [dateNow()], new.target);
  }
  Object.defineProperty(FakeDate, 'name', {value: 'Date'});
  FakeDate.prototype = NativeDate.prototype;
  FakeDate.now = dateNow;
  FakeDate.parse = NativeDate.parse;
  FakeDate.UTC = NativeDate.UTC;
  window.Date = FakeDate;

  const animations = () => (document.getAnimations ? document.getAnimations() : []);
  const stepAnimations = (ms) => {
    for (const a of animations()) {
      if (a.playState === 'running') { a.pause(); a.currentTime = 0; s.held.add(a); }
      else if (s.held.has(a) && a.playState === 'paused') {
        const end = a.effect ? a.effect.getComputedTiming().endTime : Infinity;
        const next = (a.currentTime || 0) + ms * (a.playbackRate || 1);
        if (next >= end) { a.finish(); s.held.delete(a); } else a.currentTime = next;
      }
    }
    for (const a of s.held) if (a.playState !== 'paused') s.held.delete(a);
  };
  const channel = new MessageChannel(), wake = [];
  channel.port1.onmessage = () => wake.shift()();
  const task = () => new Promise((resolve) => { wake.push(resolve); channel.port2.postMessage(0); });
  const earliest = (limit) => {
    let best = null;
    for (const t of s.timers.values())
      if (t.due <= limit && (best === null || t.due < best.due)) best = t;
    return best;
  };
  let advancing = false;

  const api = {
    pause(at, restart) {
      if (s.lockstep) { if (at !== null) s.epoch = at - s.now; }
      else {
        s.now = mono(); s.epoch = (at === null ? nDateNow() : at) - s.now;
        s.nextFrame = s.now + FRAME;
        for (const t of s.timers.values()) nClearTimeout(t.native);
        for (const f of s.frames.values()) nCaf(f.native);
        s.lockstep = true;
        for (const a of animations()) if (a.playState === 'running') { a.pause(); s.held.add(a); }
      }
      if (restart) {  // page time 0 again, pending timers as far ahead as they were
        if (advancing) throw new Error('pause(restart) during advance()');
        s.epoch = at === null ? s.epoch + s.now : at;
        for (const t of s.timers.values()) t.due -= s.now;
        s.now = 0; s.nextFrame = FRAME;
      }
      return api.state();
    },
    resume() {
      if (!s.lockstep) return api.state();
      if (advancing) throw new Error('resume() during advance()');
      s.shift = s.now - nPerfNow(); s.lockstep = false;
      for (const t of s.timers.values()) arm(t);
      for (const f of s.frames.values()) armFrame(f);
      for (const a of s.held) if (a.playState === 'paused') a.play();
      s.held.clear();
      return api.state();
    },
    async advance(ms) {
      if (!s.lockstep) throw new Error('advance() needs lockstep: call pause() first');
      if (advancing) throw new Error('advance() is already running');
      advancing = true;
      try {
        const end = s.now + ms;
        let calls = 0;
        for (;;) {
          const t = earliest(Math.min(end, s.nextFrame));
          let ran = true;  // page code ran: its promise callbacks go before what comes next
          if (t !== null) { s.now = Math.max(s.now, t.due); fire(t); }
          else if (s.nextFrame <= end + SLACK) {  // (k frames' sum may round past k * FRAME)
            s.now = s.nextFrame; s.nextFrame += FRAME;
            const batch = [...s.frames.values()];
            for (const f of batch) runFrame(f, s.now);
            ran = batch.length > 0 || s.held.size > 0;
            stepAnimations(FRAME);
          } else break;
          if (++calls > MAX_CALLS)
            throw new Error(`the page ran ${MAX_CALLS} timers or frames in one advance of ${ms} ms`);
          // A frame where nothing ran needs no task of its own: after input Chromium
          // holds other tasks until its next frame is drawn (~a display refresh).
          if (ran) await task();
        }
        s.now = end;
        stepAnimations(0);  // hold what started since the last frame, at its start
        return api.state();
      } finally { advancing = false; }
    },
    rendered() { return new Promise((resolve) => nRaf(() => resolve(api.state()))); },
    state() {
      return {lockstep: s.lockstep, now: mono(), date: dateNow(), timers: s.timers.size,
              frames: s.frames.size, held: s.held.size};
    },
  };
  Object.defineProperty(window, NAME, {value: Object.freeze(api)});
})();
"""


def clock_script(*, lockstep: bool = False, epoch_ms: float = EPOCH_MS) -> str:
    """The page's clock as JavaScript: starts in lockstep (page time 0, ``Date.now()`` ==
    ``epoch_ms``) or in real time. Running it twice in one document does nothing."""
    values = {
        "NAME": json.dumps(CLOCK_GLOBAL),
        "FRAME": repr(FRAME_MS),
        "MAX_CALLS": str(MAX_CALLBACKS),
        "NESTING": str(NESTING_LEVEL),
        "CLAMP": repr(CLAMP_MS),
        "LOCKSTEP": "true" if lockstep else "false",
        "EPOCH": repr(float(epoch_ms)),
        "FIRST_ID": str(FIRST_ID),
    }
    script = _CLOCK_JS
    for key, value in values.items():
        script = script.replace(f"%{key}%", value)
    return script


@dataclass(frozen=True, slots=True)
class ClockState:
    """What the page's clock says: its mode, page time (``performance.now()``, ms),
    ``Date.now()``, and the timers, animation frames and held animations pending."""

    lockstep: bool
    now: float
    date: float
    timers: int
    frames: int
    held: int

    @classmethod
    def from_page(cls, value: Any) -> ClockState:
        if not isinstance(value, dict):
            raise CDPError(f"the page clock answered {value!r}, not its state")
        return cls(
            lockstep=bool(value["lockstep"]), now=float(value["now"]), date=float(value["date"]),
            timers=int(value["timers"]), frames=int(value["frames"]), held=int(value["held"]),
        )


class ClockMissing(CDPError):
    """The page has no clock: :meth:`PageClock.install` was not called before it loaded."""


class PageClock:
    """The clock of the page behind ``cdp``: real time, or lockstep where page time moves
    only in :meth:`advance`. One per page; calls must not overlap."""

    def __init__(self, cdp: CDPClient) -> None:
        self.cdp = cdp
        self._script_id: str | None = None
        #: The last state the page reported (None before the first call).
        self.state: ClockState | None = None

    async def install(
        self, *, lockstep: bool = False, epoch_ms: float = EPOCH_MS, current: bool = True
    ) -> None:
        """Put the clock into every document the page loads from now on, before its own
        scripts, starting in lockstep or real time; with ``current``, into the document
        loaded now as well (timers it set before keep real time: reload it to have all).
        Calling it again replaces the script for later documents."""
        source = clock_script(lockstep=lockstep, epoch_ms=epoch_ms)
        if self._script_id is not None:
            await self.cdp.remove_script(self._script_id)
            self._script_id = None
        self._script_id = await self.cdp.add_script(source)
        if current:
            await self.cdp.evaluate(f"{source}; 0")

    async def pause(self, at_ms: float | None = EPOCH_MS, *, restart: bool = False) -> ClockState:
        """Lockstep from now: page time stops; timers, frames and animations wait for
        :meth:`advance`. ``Date.now()`` becomes ``at_ms`` (None: keep the real date).
        ``restart``: page time starts again from 0 (timers keep their distance to it), so
        that an episode's timing is the same sums of frames whatever came before it (a
        browser snapshot's replay repeats them exactly: ``runtimes.browser_snapshots``)."""
        at = "null" if at_ms is None else repr(float(at_ms))
        return await self._call(f"pause({at}, {'true' if restart else 'false'})")

    async def advance(self, ms: float, timeout: float = ADVANCE_TIMEOUT) -> ClockState:
        """Move page time on by ``ms`` milliseconds, running what falls due in order, and
        animation frames every FRAME_MS; returns after the page ran them."""
        if not (math.isfinite(ms) and 0 <= ms <= MAX_ADVANCE_MS):
            raise ValueError(f"advance takes 0..{MAX_ADVANCE_MS} page milliseconds, not {ms!r}")
        return await self._call(f"advance({float(ms)!r})", timeout)

    async def resume(self) -> ClockState:
        """Real time again: pending timers and frames run on the browser's clock, held
        animations play, page time goes on from where lockstep left it."""
        return await self._call("resume()")

    async def rendered(self) -> ClockState:
        """Wait for Chromium's next frame of the page (a native animation frame, whatever
        the mode): by then scrolling that the compositor did (a wheel event) is in
        ``scrollY`` and the page's ``scroll`` listeners ran."""
        return await self._call("rendered()")

    async def read(self) -> ClockState:
        """The clock's state, read from the page."""
        return await self._call("state()")

    async def screenshot(self, clip: tuple[int, int, int, int]) -> np.ndarray:
        """The page's pixels in ``clip`` (x, y, width, height) as an RGB uint8 array of
        shape (height, width, 3), from a new frame Chromium draws for it (lossless)."""
        png = await self.cdp.screenshot_png(clip)
        return decode_png(png, clip[3], clip[2])

    async def _call(self, expression: str, timeout: float = CALL_TIMEOUT) -> ClockState:
        script = (
            f"(() => {{ const c = window[{json.dumps(CLOCK_GLOBAL)}]; "
            f"if (c === undefined) return null; return c.{expression}; }})()"
        )
        value = await self.cdp.evaluate(script, timeout)
        if value is None:
            raise ClockMissing(
                "the page has no clock: call PageClock.install() before the page loads "
                "(or with current=True on the loaded page)"
            )
        self.state = ClockState.from_page(value)
        return self.state


def decode_png(png: bytes, height: int, width: int) -> np.ndarray:
    """An RGB array from PNG bytes, checked against the size asked for. Needs Pillow."""
    try:
        from PIL import Image
    except ModuleNotFoundError as exc:  # pragma: no cover (Pillow is installed with tests)
        raise ModuleNotFoundError(
            "decoding page screenshots needs Pillow: pip install Pillow", name="PIL"
        ) from exc
    with Image.open(io.BytesIO(png)) as image:
        pixels = np.asarray(image.convert("RGB"))
    if pixels.shape != (height, width, 3):
        raise CDPError(
            f"the screenshot is {pixels.shape[1]}x{pixels.shape[0]}, not the {width}x{height} "
            "asked for (is the clip outside the page, or the device scale factor not 1?)"
        )
    return pixels


def no_caret_blink_env(config_dir: Path) -> dict[str, str]:
    """Environment variables for a browser whose text caret does not blink.

    Chromium on Linux takes the caret's blinking from GTK's ``gtk-cursor-blink``; this
    writes ``gtk-3.0/settings.ini`` turning it off under ``config_dir`` and returns
    ``XDG_CONFIG_HOME`` pointing there. A blinking caret changes the pixels every 500 ms of
    wall time, whatever the page's clock says (measured: 2 frames alternate over 1.5 s
    with a focused text field; 1 with this setting).
    """
    gtk = config_dir / "gtk-3.0"
    gtk.mkdir(parents=True, exist_ok=True)
    (gtk / "settings.ini").write_text("[Settings]\ngtk-cursor-blink = false\n")
    return {"XDG_CONFIG_HOME": str(config_dir)}


@dataclass(frozen=True, slots=True)
class StepTiming:
    """Figures of a lockstep step loop: steps per second and milliseconds per step of
    each part (input, advance, screenshot), medians."""

    steps: int
    steps_per_second: float
    input_ms: float
    advance_ms: float
    screenshot_ms: float

    def line(self, name: str) -> str:
        return (
            f"{name:<24} {self.steps_per_second:7.1f} steps/s  input {self.input_ms:5.2f} ms  "
            f"advance {self.advance_ms:5.2f} ms  screenshot {self.screenshot_ms:6.2f} ms"
        )


async def measure(
    clock: PageClock,
    act: Callable[[int], Awaitable[None]],
    *,
    steps: int,
    step_ms: float = FRAME_MS,
    clip: tuple[int, int, int, int],
) -> StepTiming:
    """Time ``steps`` lockstep steps of ``act(i)`` (the agent's input for step i, e.g. a
    :class:`~runtimes.cdp_input.CDPInput` send), an advance of ``step_ms`` and a
    screenshot of ``clip``: what an agent stepping a browser task gets per second."""
    parts: list[tuple[float, float, float]] = []
    started = time.perf_counter()
    for i in range(steps):
        t0 = time.perf_counter()
        await act(i)
        t1 = time.perf_counter()
        await clock.advance(step_ms)
        t2 = time.perf_counter()
        await clock.screenshot(clip)
        parts.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
    elapsed = time.perf_counter() - started

    def median(values: Sequence[float]) -> float:
        return 1000 * float(np.median(values)) if values else 0.0

    return StepTiming(
        steps=steps,
        steps_per_second=steps / elapsed if elapsed > 0 else 0.0,
        input_ms=median([p[0] for p in parts]),
        advance_ms=median([p[1] for p in parts]),
        screenshot_ms=median([p[2] for p in parts]),
    )
