"""Snapshots of MiniWoB tasks in lockstep: the episode's seed and inputs, replayed.

Holds :class:`Snapshots`, the runtime's snapshot part: it owns the lockstep episode's
log (:class:`~runtimes.browser_state.EpisodeLog`; the document and its checks are
:mod:`runtimes.browser_state`'s) and saves, restores and digests the runtime's state
through the other parts' methods (:class:`Replaying` is what it uses of the runtime).
The runtime calls :func:`start_alike` at every lockstep reset.

**What the state is.** A page's own state cannot be saved: a DOM serialisation misses
the task's JavaScript (closures, timers, the seeded random generator's position). What
is saved is what made it: the task's seed, the page's history that outlives an episode
(MiniWoB's episode count and reward panel) and every input since the reset, in order —
a step's events and frames, an action string, a page observation (it numbers elements,
and action strings name them by those numbers). A restore resets the page to the seed
and replays the inputs without drawing: no screenshot until the last frame. In lockstep
the page's time moves only with steps (:mod:`runtimes.page_clock`), so the same inputs
give the same page.

**Every lockstep episode starts alike.** What would make a replayed episode differ from
the one it replays is what came before its reset; so a lockstep reset restarts page
time at 0 (``PageClock.pause(restart=True)``), parks the pointer at :data:`PARK` with no
click to double, takes the focus back to the page's body, numbers elements afresh and
seeds the page (with a fresh seed when the agent gave none, so that every lockstep
episode can be saved).

**Limits** (:mod:`runtimes.browser_state`'s). ``MAX_LOG_ENTRIES`` entries,
``MAX_LOG_EVENTS`` events and ``MAX_SNAPSHOT_BYTES`` bytes: past them an episode cannot be saved (it says so),
and bytes past them are refused before they are parsed. A restore replays every entry,
so its time grows with the episode (``python -m benchmarks browser_snapshots``).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from typing import Final, Protocol

import numpy as np
import orjson

from rewarder.protocol import LOCKSTEP

from .base import InputEvent, PointerEvent
from .browser_agents import PageAgents
from .browser_episodes import TaskEpisodes
from .browser_host import BrowserHost
from .browser_state import MAX_SCORES, MAX_SNAPSHOT_BYTES, BrowserState, EpisodeLog, History, Step, Walk
from .cdp import CDPClient
from .cdp_input import CDPInput, InputMapper
from .chromium import STATE_EXPRESSION
from .errors import SnapshotUnsupported
from .page_clock import CLOCK_GLOBAL, FRAME_MS
from .page_structure import STATE_GLOBAL, observe

#: Seeds drawn for a lockstep episode the agent gave none: below 2**31, like gymnasium's.
FRESH_SEED_BOUND: Final = 2**31

#: Where a lockstep reset leaves the pointer (screen pixels): the bottom right corner,
#: on the page's empty body, away from the task and MiniWoB's panel.
PARK: Final = (639, 479)

#: Why a real-time browser cannot: ``snapshot_refusal`` then, shown in describe.
REALTIME_REFUSAL: Final = (
    "a browser task in real time cannot save its state: its page runs on the browser's "
    "clock; serve it in lockstep (mode lockstep) to snapshot it"
)

#: Nothing focused: the page's body is the active element again.
_BLUR_JS: Final = (
    "(() => { const a = document.activeElement; if (a && a !== document.body && a.blur) a.blur(); "
    "return true; })()"
)
#: Read at every lockstep reset, after the episode began: elements are numbered afresh
#: (the walk after it starts from a0) and the page's history that outlives an episode.
_BEGIN_JS: Final = f"""(() => {{
  delete window[{orjson.dumps(STATE_GLOBAL).decode()}];
  const latest = core.wob_latest;
  return [WOB_EPISODE_ID, typeof latest === 'number' ? latest : null,
          Array.isArray(core.wob_scores) ? core.wob_scores : []];
}})()"""

#: Puts a snapshot's history back (its panel too, as MiniWoB draws it).
_HISTORY_JS: Final = """((episodes, latest, scores) => {
  WOB_EPISODE_ID = episodes;
  core.wob_latest = latest === null ? '-' : latest;
  core.wob_scores = scores;
  document.getElementById('episode-id').innerHTML = String(episodes);
  for (const id of ['reward-last', 'reward-avg']) {
    const span = document.getElementById(id);
    span.innerHTML = '-'; span.removeAttribute('style');
  }
  core.reloadDisplay();
  return true;
})"""

#: What a digest reads of the page: its clock, MiniWoB's globals, the instruction,
#: focus, scrolling, how many elements are numbered, and a hash (FNV-1a) of the document
#: with its fields' values, attributes sorted (their order is the order they were first
#: set in, history) and without MiniWoB's ``data-tampered`` marks (they name the episode
#: an element was last clicked in, and nothing we serve reads them).
_DIGEST_JS: Final = f"""(() => {{
  const c = window[{orjson.dumps(CLOCK_GLOBAL).decode()}], b = window[{orjson.dumps(STATE_GLOBAL).decode()}];
  const a = document.activeElement;
  const parts = [];
  const walk = (n) => {{
    if (n.nodeType === 3) {{ parts.push('#' + n.data); return; }}
    if (n.nodeType !== 1) return;
    const attrs = [...n.attributes].filter((x) => x.name !== 'data-tampered')
      .map((x) => x.name + '=' + x.value).sort();
    parts.push('<' + n.tagName + ' ' + attrs.join(' ') + (typeof n.value === 'string' ? '|' + n.value : '')
               + (n.checked ? '|checked' : ''));
    for (const c of n.childNodes) walk(c);
    parts.push('>');
  }};
  walk(document.documentElement);
  const text = parts.join('\u0000');
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {{ h ^= text.charCodeAt(i); h = Math.imul(h, 0x01000193); }}
  return [c ? c.state() : null, WOB_DONE_GLOBAL, WOB_REWARD_GLOBAL, WOB_RAW_REWARD_GLOBAL,
          WOB_EPISODE_ID, core.getUtterance(), a ? a.tagName + '#' + a.id : null,
          window.scrollX, window.scrollY, b ? b.next : null, h >>> 0];
}})()"""


# What the runtime calls --------------------------------------------------------------------


def fresh_seed() -> int:
    """A seed for a lockstep episode reset without one: it can be saved like any other."""
    return secrets.randbelow(FRESH_SEED_BOUND)


async def start_alike(cdp: CDPClient, page_input: CDPInput) -> None:
    """Before a lockstep episode begins, undo what the last one left that the task's own
    start keeps: the pointer parked at :data:`PARK` with no press a next click could
    double (call after ``page_input.release()``: nothing held), and no element focused
    (a static button or field clicked last episode kept the focus)."""
    page_input.mapper = InputMapper(page_input.mapper.now)
    await page_input.send([PointerEvent(*PARK, 0)])
    await cdp.evaluate(_BLUR_JS)


async def begin_log(cdp: CDPClient, seed: int) -> EpisodeLog:
    """At a lockstep reset, once the episode began: number elements afresh from the next
    observation on, read the page's history, and start the episode's log."""
    episodes, latest, scores = await cdp.evaluate(_BEGIN_JS)
    history = History(int(episodes), None if latest is None else float(latest),
                      tuple(float(s) for s in scores)[-MAX_SCORES:])
    return EpisodeLog(seed=seed, history=history)


class Replaying(Protocol):
    """What the snapshot part uses of the runtime that holds it: who it is, how it is
    served, its reset and its lockstep frame, and its other parts (each changed only
    through its own methods)."""

    @property
    def env_id(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def keys(self) -> tuple[str, ...]: ...
    @property
    def width(self) -> int: ...
    @property
    def height(self) -> int: ...
    @property
    def origin(self) -> tuple[int, int]: ...
    @property
    def framebuffer(self) -> np.ndarray: ...
    @property
    def host(self) -> BrowserHost: ...
    @property
    def episodes(self) -> TaskEpisodes: ...
    @property
    def agents(self) -> PageAgents: ...

    async def areset(self, seed: int | None = None, *, draw: bool = True) -> None: ...

    async def take_screenshot(self) -> None: ...


class Snapshots:
    """The snapshot part of a browser runtime: owns the lockstep episode's log (what it
    records as it goes: steps, walks, action strings), and saves, restores and digests
    the runtime's state through the other parts' methods."""

    def __init__(self) -> None:
        #: The lockstep episode's seed and inputs (None: real time, or no reset yet).
        self.log: EpisodeLog | None = None

    # Recording (the agents' Recorder, and the runtime's resets and steps) -----------------

    def forget(self) -> None:
        """A reset: the last episode's log is gone (real time keeps none)."""
        self.log = None

    async def begin(self, cdp: CDPClient, seed: int) -> None:
        """A lockstep reset, once the episode began: its log (:func:`begin_log`)."""
        self.log = await begin_log(cdp, seed)

    def step(self, events: Sequence[InputEvent], frames: int) -> None:
        if self.log is not None:
            self.log.step(events, frames)

    def walk(self, reset: bool) -> None:
        if self.log is not None:
            self.log.walk(reset)

    def action(self, text: str) -> None:
        if self.log is not None:
            self.log.action(text)

    # Saving and restoring ------------------------------------------------------------------

    def save(self, runtime: Replaying) -> bytes:
        """The runtime's lockstep episode as snapshot bytes; :class:`SnapshotUnsupported`
        in real time, before a lockstep reset, or past the limits."""
        if runtime.mode != LOCKSTEP:
            raise SnapshotUnsupported(REALTIME_REFUSAL)
        if self.log is None:
            raise SnapshotUnsupported(
                f"{runtime.env_id} has no lockstep episode to save yet: reset it in lockstep first"
            )
        data = self.log.state(runtime.env_id, runtime.episodes.text_pending).to_bytes()
        if len(data) > MAX_SNAPSHOT_BYTES:
            raise SnapshotUnsupported(
                f"this episode's snapshot would have {len(data)} bytes, over the limit of "
                f"{MAX_SNAPSHOT_BYTES} (MAX_SNAPSHOT_BYTES): snapshot earlier in an episode"
            )
        return data

    async def restore(self, runtime: Replaying, data: bytes) -> None:
        """Bring the runtime to the state ``data`` holds: checked in full first (a bad one
        changes nothing), then a reset to its seed and its inputs replayed without drawing,
        and the last frame drawn."""
        if runtime.mode != LOCKSTEP:
            raise SnapshotUnsupported(REALTIME_REFUSAL)
        state = BrowserState.parse(
            data, env_id=runtime.env_id, keys=runtime.keys, width=runtime.width, height=runtime.height
        )
        await runtime.areset(state.seed, draw=False)
        host, episodes, agents = runtime.host, runtime.episodes, runtime.agents
        cdp, clock, page_input = host.cdp, host.clock, host.page_input
        assert cdp is not None and clock is not None and page_input is not None
        utterance = episodes.take_text()
        history = state.history
        await cdp.evaluate(
            f"{_HISTORY_JS}({history.episodes}, {orjson.dumps(history.latest).decode()}, "
            f"{orjson.dumps(list(history.scores)).decode()})"
        )
        episodes.began(history.episodes)
        log = self.log = EpisodeLog(seed=state.seed, history=history)
        x0, y0 = runtime.origin
        last_step = max((i for i, e in enumerate(state.log) if isinstance(e, Step)), default=-1)
        for i, entry in enumerate(state.log):
            if isinstance(entry, Step):
                log.step(entry.events, entry.frames)
                await page_input.send([
                    e._replace(x=e.x + x0, y=e.y + y0) if isinstance(e, PointerEvent) else e
                    for e in entry.events
                ])
                await clock.advance(entry.frames * FRAME_MS)
                episodes.take_text()  # (a step reports them)
                agents.take_step_report()
                if i == last_step:  # (no step is taken once the episode ended)
                    done, _, _, episode, _ = await cdp.evaluate(STATE_EXPRESSION)
                    episodes.replayed_end(done, episode)
            elif isinstance(entry, Walk):
                log.walk(entry.reset)
                await observe(cdp, (0, 0), reset=entry.reset)
            else:
                await agents.run_action(entry.text, _never_called)  # (it logs itself)
        episodes.put_text(utterance if state.text_pending else None)
        agents.take_observation()
        log.recording = False
        try:
            await runtime.take_screenshot()
        finally:
            log.recording = True

    async def digest(self, runtime: Replaying) -> bytes:
        """SHA-256 of the frame and of what the page says of its state (clock, MiniWoB's
        globals, instruction, focus, scrolling, bids): equal after a restore and at the
        snapshot it restored, as long as the replay was exact."""
        cdp = runtime.host.cdp
        if cdp is None:
            raise SnapshotUnsupported(f"{runtime.env_id} has no page yet: start it first")
        page = await cdp.evaluate(_DIGEST_JS)
        h = hashlib.sha256(runtime.framebuffer.tobytes())
        h.update(orjson.dumps([page, runtime.episodes.reported, runtime.episodes.text_pending]))
        return h.digest()


def _never_called(events: Sequence[InputEvent]) -> None:
    """A lockstep action string sends its input through DevTools, never through here."""
    raise AssertionError("a lockstep action string's input goes through DevTools")
