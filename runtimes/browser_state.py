"""The browser snapshot's document: what a lockstep episode records, and its bytes.

Holds :class:`BrowserState` (a snapshot: its bytes, our own versioned JSON document,
parsed and checked field by field: bytes past :data:`MAX_SNAPSHOT_BYTES` are refused
unparsed), :class:`EpisodeLog` (what a lockstep episode records as it goes; past
:data:`MAX_LOG_ENTRIES` entries or :data:`MAX_LOG_EVENTS` events it stops and says why)
and the entries it records (:class:`Step`, :class:`Walk`, :class:`Action`). Sans-I/O:
what the page is asked and how a snapshot is replayed is :mod:`runtimes.browser_snapshots`'s.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from rewarder.protocol import MAX_ACTION_EVENTS, MAX_ACTION_STRING_CHARS, MAX_STEP_FRAMES

from .base import InputEvent, KeyEvent, PointerEvent
from .errors import BadSnapshot, SnapshotUnsupported

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
#: MiniWoB keeps the last 10 rewards for its panel's average.
MAX_SCORES: Final = 10
#: Largest episode count a snapshot may carry.
MAX_EPISODES: Final = 2**31
#: Pointer mask bits an event may carry (VNC's 8 buttons).
MAX_BUTTONMASK: Final = 0xFF


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
