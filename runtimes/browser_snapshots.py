"""Snapshots of MiniWoB tasks in lockstep: the episode's seed and inputs, replayed.

Holds :class:`BrowserState` (a snapshot: its bytes, our own versioned JSON document,
parsed and checked field by field), :class:`EpisodeLog` (what a lockstep episode
records as it goes), the entries it records (:class:`Step`, :class:`Walk`,
:class:`Action`), and :class:`Snapshots`, the runtime's snapshot part: it owns the
episode's log and saves, restores and digests the runtime's state through the other
parts' methods (:class:`Replaying` is what it uses of the runtime). The runtime calls
:func:`start_alike` at every lockstep reset.

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

**Limits.** :data:`MAX_LOG_ENTRIES` entries, :data:`MAX_LOG_EVENTS` events and
:data:`MAX_SNAPSHOT_BYTES` bytes: past them an episode cannot be saved (it says so),
and bytes past them are refused before they are parsed. A restore replays every entry,
so its time grows with the episode (``python -m benchmarks browser_snapshots``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import numpy as np
import orjson

from rewarder.protocol import LOCKSTEP, MAX_ACTION_EVENTS, MAX_ACTION_STRING_CHARS, MAX_STEP_FRAMES

from .base import InputEvent, KeyEvent, PointerEvent
from .browser_agents import PageAgents
from .browser_episodes import TaskEpisodes
from .browser_host import BrowserHost
from .cdp import CDPClient
from .cdp_input import CDPInput, InputMapper
from .chromium import STATE_EXPRESSION
from .errors import BadSnapshot, SnapshotUnsupported
from .page_clock import CLOCK_GLOBAL, FRAME_MS
from .page_structure import STATE_GLOBAL, observe

#: What the document says it is, and its version: a restore refuses any other.
FORMAT: Final = "universe-remote/browser-snapshot"
VERSION: Final = 1
#: Entries one episode's log may hold (a step, an action string, an observation): a
#: MiniWoB episode lasts 10 s of page time, 600 frames, so a few hundred steps at most.
MAX_LOG_ENTRIES: Final = 4096
#: Input events one log may hold in all steps together.
MAX_LOG_EVENTS: Final = 65_536
#: Bytes of a snapshot: refused unparsed past this.
MAX_SNAPSHOT_BYTES: Final = 2 * 1024 * 1024
#: Seeds a snapshot may name: what an int64 holds (the page reads it as a number).
MAX_SEED: Final = 2**63
#: Seeds drawn for a lockstep episode the agent gave none: below 2**31, like gymnasium's.
FRESH_SEED_BOUND: Final = 2**31
#: MiniWoB keeps the last 10 rewards for its panel's average.
MAX_SCORES: Final = 10
#: Largest episode count a snapshot may carry.
MAX_EPISODES: Final = 2**31
#: Pointer mask bits an event may carry (VNC's 8 buttons).
MAX_BUTTONMASK: Final = 0xFF
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


# The entries -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """A lockstep step: its events (served-frame pixels), then ``frames`` frames."""

    events: tuple[InputEvent, ...]
    frames: int


@dataclass(frozen=True, slots=True)
class Walk:
    """A page observation (it gives new elements their bids); ``reset``: from a0."""

    reset: bool


@dataclass(frozen=True, slots=True)
class Action:
    """An action string, run before its step's frames."""

    text: str


Entry = Step | Walk | Action


@dataclass(frozen=True, slots=True)
class History:
    """What MiniWoB's page keeps across episodes, as it was at the episode's reset:
    episodes ended, the last reward and the last :data:`MAX_SCORES` (the panel's)."""

    episodes: int
    latest: float | None
    scores: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class BrowserState:
    """One snapshot: the task, its seed, the page's history at the reset, whether the
    instruction was still to be sent, and the inputs since the reset."""

    env_id: str
    miniwob: str
    seed: int
    history: History
    text_pending: bool
    log: tuple[Entry, ...]

    def to_bytes(self) -> bytes:
        document = {
            "format": FORMAT,
            "version": VERSION,
            "env_id": self.env_id,
            "miniwob": self.miniwob,
            "seed": self.seed,
            "history": {
                "episodes": self.history.episodes,
                "latest": self.history.latest,
                "scores": list(self.history.scores),
            },
            "text_pending": self.text_pending,
            "log": [_entry_json(entry) for entry in self.log],
        }
        return orjson.dumps(document)

    @classmethod
    def parse(
        cls, data: bytes, *, env_id: str, keys: Sequence[str], width: int, height: int
    ) -> BrowserState:
        """The state ``data`` holds, checked field by field against the runtime that is
        to take it (its task, keys and screen); :class:`BadSnapshot` says what is wrong."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise BadSnapshot(f"a snapshot is bytes, not {type(data).__name__}")
        if len(data) > MAX_SNAPSHOT_BYTES:
            raise BadSnapshot(
                f"the snapshot has {len(data)} bytes, over the limit of {MAX_SNAPSHOT_BYTES} "
                "(MAX_SNAPSHOT_BYTES)"
            )
        try:
            document = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise BadSnapshot(
                f"not a browser snapshot: its bytes are not JSON ({exc}); pass the bytes a "
                "browser remote's snapshot gave"
            ) from None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise BadSnapshot(f"not a browser snapshot: its format is not {FORMAT!r}")
        fields = _Fields(document, "the snapshot")
        fields.string("format", len(FORMAT))
        version = fields.integer("version", 0, 2**31)
        if version != VERSION:
            raise BadSnapshot(f"browser snapshot version {version} is not this remote's ({VERSION})")
        taken_of = fields.string("env_id", 200)
        if taken_of != env_id:
            raise BadSnapshot(
                f"the snapshot is of {taken_of}, not {env_id}: restore it on a {taken_of} remote"
            )
        pages = fields.string("miniwob", 100)
        if pages != miniwob_version():
            raise BadSnapshot(
                f"the snapshot was taken with miniwob {pages}, this remote has {miniwob_version()}: "
                "its task pages may differ"
            )
        seed = fields.integer("seed", -MAX_SEED, MAX_SEED - 1)
        history = _history(fields.object("history"))
        text_pending = fields.boolean("text_pending")
        entries = fields.items("log", MAX_LOG_ENTRIES)
        log, events = [], 0
        checker = _EventChecker(frozenset(keys), width, height)
        for i, raw in enumerate(entries):
            entry = _entry(raw, f"log[{i}]", checker)
            if isinstance(entry, Step):
                events += len(entry.events)
                if events > MAX_LOG_EVENTS:
                    raise BadSnapshot(
                        f"log[{i}]: the log has more than {MAX_LOG_EVENTS} events (MAX_LOG_EVENTS)"
                    )
            log.append(entry)
        fields.no_others()
        return cls(taken_of, pages, seed, history, text_pending, tuple(log))


@dataclass(slots=True)
class EpisodeLog:
    """What a lockstep episode records from its reset on: :meth:`state` is its snapshot.
    Past the limits it stops recording and says why (:attr:`overflow`)."""

    seed: int
    history: History
    entries: list[Entry] = field(default_factory=list)
    events: int = 0
    #: Why this episode can no longer be saved (None: it can).
    overflow: str | None = None
    #: False while a restore draws its last frame (that frame's observation is the
    #: replayed step's, already in the log).
    recording: bool = True

    def step(self, events: Sequence[InputEvent], frames: int) -> None:
        if self.recording:
            self.events += len(events)
        self._add(Step(tuple(events), frames))

    def walk(self, reset: bool) -> None:
        self._add(Walk(reset))

    def action(self, text: str) -> None:
        self._add(Action(text))

    def _add(self, entry: Entry) -> None:
        if not self.recording or self.overflow is not None:
            return
        if len(self.entries) >= MAX_LOG_ENTRIES or self.events > MAX_LOG_EVENTS:
            self.overflow = (
                f"this episode had more than {MAX_LOG_ENTRIES} inputs or {MAX_LOG_EVENTS} events "
                "since its reset (MAX_LOG_ENTRIES, MAX_LOG_EVENTS); snapshot earlier in an episode"
            )
            self.entries.clear()
            return
        self.entries.append(entry)

    def state(self, env_id: str, text_pending: bool) -> BrowserState:
        if self.overflow is not None:
            raise SnapshotUnsupported(self.overflow)
        if not -MAX_SEED <= self.seed < MAX_SEED:
            raise SnapshotUnsupported(
                f"this episode's seed {self.seed} is outside -2**63..2**63-1, what a snapshot holds; "
                "reset with a smaller seed to snapshot"
            )
        return BrowserState(
            env_id, miniwob_version(), self.seed, self.history, text_pending, tuple(self.entries)
        )


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


@functools.cache
def miniwob_version() -> str:
    """The installed task pages' version: a snapshot replays on the same pages only."""
    return importlib.metadata.version("miniwob")


# The document's fields ---------------------------------------------------------------------


def _entry_json(entry: Entry) -> list[Any]:
    if isinstance(entry, Step):
        return ["step", entry.frames, [
            ["key", e.key, e.down] if isinstance(e, KeyEvent) else ["pointer", e.x, e.y, e.buttonmask]
            for e in entry.events
        ]]
    if isinstance(entry, Walk):
        return ["walk", entry.reset]
    return ["action", entry.text]


class _Fields:
    """Reads a JSON object's fields one by one, each checked; names the path when not."""

    def __init__(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise BadSnapshot(f"{where} must be a JSON object, not {_kind(value)}")
        self.value, self.where, self.read = value, where, set[str]()

    def get(self, name: str) -> Any:
        if name not in self.value:
            raise BadSnapshot(f"{self.where} has no {name!r}")
        self.read.add(name)
        return self.value[name]

    def integer(self, name: str, low: int, high: int) -> int:
        return _int(self.get(name), f"{self.where}'s {name}", low, high)

    def string(self, name: str, max_chars: int) -> str:
        value = self.get(name)
        if not isinstance(value, str) or len(value) > max_chars:
            raise BadSnapshot(f"{self.where}'s {name} must be a string of at most {max_chars} characters")
        return value

    def boolean(self, name: str) -> bool:
        value = self.get(name)
        if not isinstance(value, bool):
            raise BadSnapshot(f"{self.where}'s {name} must be true or false, not {_kind(value)}")
        return value

    def object(self, name: str) -> _Fields:
        return _Fields(self.get(name), f"{self.where}'s {name}")

    def items(self, name: str, max_items: int) -> list[Any]:
        value = self.get(name)
        if not isinstance(value, list):
            raise BadSnapshot(f"{self.where}'s {name} must be a list, not {_kind(value)}")
        if len(value) > max_items:
            raise BadSnapshot(
                f"{self.where}'s {name} has {len(value)} items, over the limit of {max_items}"
                + (" (MAX_LOG_ENTRIES)" if max_items == MAX_LOG_ENTRIES else "")
            )
        return value

    def no_others(self) -> None:
        others = sorted(set(self.value) - self.read)
        if others:
            raise BadSnapshot(f"{self.where} has fields this remote does not know: {', '.join(others)}")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


def _int(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadSnapshot(f"{what} must be an integer in {low}..{high}, not {value!r:.40}")
    return value


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadSnapshot(f"{what} must be a finite number, not {value!r:.40}")
    return float(value)


def _history(fields: _Fields) -> History:
    episodes = fields.integer("episodes", 0, MAX_EPISODES)
    latest_raw = fields.get("latest")
    latest = None if latest_raw is None else _finite(latest_raw, f"{fields.where}'s latest")
    scores = tuple(
        _finite(s, f"{fields.where}'s scores[{i}]")
        for i, s in enumerate(fields.items("scores", MAX_SCORES))
    )
    fields.no_others()
    return History(episodes, latest, scores)


@dataclass(frozen=True, slots=True)
class _EventChecker:
    """Checks events as the remote checks an agent's: keys the runtime takes, the
    pointer on its screen."""

    keys: frozenset[str]
    width: int
    height: int

    def event(self, raw: Any, where: str) -> InputEvent:
        if isinstance(raw, list) and raw and raw[0] == "key" and len(raw) == 3:
            _, key, down = raw
            if not isinstance(key, str) or key not in self.keys:
                raise BadSnapshot(f"{where}: {key!r:.40} is not a key this task takes")
            if not isinstance(down, bool):
                raise BadSnapshot(f"{where}: a key's down must be true or false")
            return KeyEvent(key, down)
        if isinstance(raw, list) and raw and raw[0] == "pointer" and len(raw) == 4:
            _, x, y, mask = raw
            return PointerEvent(
                _int(x, f"{where}'s x", 0, self.width - 1),
                _int(y, f"{where}'s y", 0, self.height - 1),
                _int(mask, f"{where}'s buttonmask", 0, MAX_BUTTONMASK),
            )
        raise BadSnapshot(f"{where} must be [\"key\", name, down] or [\"pointer\", x, y, buttonmask]")


def _entry(raw: Any, where: str, checker: _EventChecker) -> Entry:
    kind = raw[0] if isinstance(raw, list) and raw else None
    if kind == "step" and len(raw) == 3:
        frames = _int(raw[1], f"{where}'s frames", 1, MAX_STEP_FRAMES)
        events = raw[2]
        if not isinstance(events, list) or len(events) > MAX_ACTION_EVENTS:
            raise BadSnapshot(f"{where}'s events must be a list of at most {MAX_ACTION_EVENTS} events")
        return Step(tuple(checker.event(e, f"{where}'s events[{j}]") for j, e in enumerate(events)), frames)
    if kind == "walk" and len(raw) == 2:
        if not isinstance(raw[1], bool):
            raise BadSnapshot(f"{where}: a walk's reset must be true or false")
        return Walk(raw[1])
    if kind == "action" and len(raw) == 2:
        text = raw[1]
        if not isinstance(text, str) or len(text) > MAX_ACTION_STRING_CHARS:
            raise BadSnapshot(
                f"{where}: an action must be a string of at most {MAX_ACTION_STRING_CHARS} characters"
            )
        return Action(text)
    raise BadSnapshot(
        f"{where} must be [\"step\", frames, events], [\"walk\", reset] or [\"action\", text], "
        f"not {orjson.dumps(raw)[:60].decode(errors='replace')}"
    )
