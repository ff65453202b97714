"""Built-in runtimes: small, real games that need nothing but numpy.

Holds :class:`Catch` (``builtin.Catch-v0``, played with the keyboard), :class:`ClickTarget`
(``builtin.ClickTarget-v0``, played with the mouse) and :data:`RUNTIMES`, the table
``runtimes.registry`` reads.

Every rule is a module-level constant of :mod:`.builtin_rules` (re-exported here), the
colours are below. Both games are deterministic under a seed
(same seed and same events, same frames and rewards), draw into their framebuffer in place
with numpy slices, and keep answering ``done`` after the episode ends until the next
:meth:`~runtimes.base.Runtime.reset`. Scores and lives are drawn as pips, not digits;
``info`` carries the exact numbers.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Sequence
from typing import Any, ClassVar, Final, NamedTuple

import numpy as np

from . import builtin_state
from .base import InputEvent, KeyEvent, PointerEvent, Runtime, StepResult, check_frames
from .builtin_rules import (
    CATCH_BALL_MAX_SPEED,
    CATCH_BALL_SIZE,
    CATCH_BALL_SPEED,
    CATCH_BALL_SPEEDUP,
    CATCH_HEIGHT,
    CATCH_HUD_HEIGHT,
    CATCH_MAX_FRAMES,
    CATCH_MAX_MISSES,
    CATCH_PADDLE_HEIGHT,
    CATCH_PADDLE_SPEED,
    CATCH_PADDLE_WIDTH,
    CATCH_PADDLE_Y,
    CATCH_REWARD_CAUGHT,
    CATCH_REWARD_MISSED,
    CATCH_SPAWN_DELAY,
    CATCH_WIDTH,
    CLICK_BUTTON,
    CLICK_HEIGHT,
    CLICK_HUD_HEIGHT,
    CLICK_MAX_FRAMES,
    CLICK_MAX_MISSES,
    CLICK_REWARD_HIT,
    CLICK_REWARD_MISSED,
    CLICK_TARGET_FRAMES,
    CLICK_TARGET_SIZE,
    CLICK_WIDTH,
)
from .damage import Damage, Rect, clip, restore
from .duel import Duel

Colour = tuple[int, int, int]

# Catch: colours -------------------------------------------------------------------------

CATCH_BACKGROUND: Final[Colour] = (12, 14, 28)
CATCH_PADDLE_COLOUR: Final[Colour] = (70, 150, 255)
CATCH_BALL_COLOUR: Final[Colour] = (255, 90, 40)
CATCH_LIFE_COLOUR: Final[Colour] = (235, 235, 235)
CATCH_LOST_LIFE_COLOUR: Final[Colour] = (110, 30, 30)
CATCH_CATCH_COLOUR: Final[Colour] = (60, 210, 90)
CATCH_TIME_COLOUR: Final[Colour] = (120, 120, 170)
CATCH_LINE_COLOUR: Final[Colour] = (60, 64, 90)

#: Key -> paddle direction.
_CATCH_DIRECTIONS: Final = {"Left": -1, "Right": 1}

# ClickTarget: colours -------------------------------------------------------------------

CLICK_BACKGROUND: Final[Colour] = (235, 238, 242)
CLICK_TARGET_COLOUR: Final[Colour] = (220, 40, 60)
CLICK_TARGET_CENTRE_COLOUR: Final[Colour] = (255, 255, 255)
CLICK_HUD_COLOUR: Final[Colour] = (40, 44, 60)
CLICK_LIFE_COLOUR: Final[Colour] = (235, 235, 235)
CLICK_LOST_LIFE_COLOUR: Final[Colour] = (120, 40, 40)
CLICK_HIT_COLOUR: Final[Colour] = (60, 210, 90)
CLICK_TIME_COLOUR: Final[Colour] = (240, 190, 60)


def _disc(size: int, radius: float) -> np.ndarray:
    """A ``size`` x ``size`` boolean mask of a disc of ``radius`` centred in the square."""
    centre = size / 2
    yy, xx = np.mgrid[:size, :size] + 0.5
    return np.asarray((xx - centre) ** 2 + (yy - centre) ** 2 <= radius**2)


_TARGET_MASK: Final = _disc(CLICK_TARGET_SIZE, CLICK_TARGET_SIZE / 2)
_TARGET_CENTRE_MASK: Final = _disc(CLICK_TARGET_SIZE, CLICK_TARGET_SIZE / 5)


# Drawing ------------------------------------------------------------------------------
#
# Each game's frame is: a prebuilt *base* frame (background, HUD frame, dimmed pips), a
# prefix of each HUD gauge uncovered from a prebuilt *lit* frame, then the sprites. Every
# step is a handful of slice copies: painting a colour over many pixels is much slower in
# numpy than copying the same pixels from another frame. A reset draws all of it; a
# frame after that redraws only what changed — a gauge whose count changed (its region
# restored from the base, then uncovered again), the sprites that moved (restored from
# the base where they were, drawn where they are) — and reports those rectangles
# (``take_damage``), so the VNC server need not compare the frame. The sprites lie below
# the HUD, so the two never overlap, and the frame is the one a whole redraw makes
# (tests/runtimes/test_builtin.py checks it).


class _Gauge(NamedTuple):
    """A row of ``capacity`` pips (a bar when ``width == pitch == 1``) in a HUD."""

    x: int
    y: int
    width: int
    height: int
    pitch: int
    capacity: int

    @classmethod
    def fit(cls, x: int, y: int, size: tuple[int, int], pitch: int, screen: int) -> _Gauge:
        """As many ``size`` (w, h) pips as fit from ``x`` to the ``screen`` edge."""
        return cls(x, y, *size, pitch, (screen - x - size[0]) // pitch + 1)

    def paint(self, fb: np.ndarray, colour: Colour) -> None:
        """Draw every pip in ``colour``: used once, to build a base or lit frame."""
        end = self.x + self.capacity * self.pitch
        for column in range(self.width):  # one strided slice per pixel column of a pip
            fb[self.y : self.y + self.height, self.x + column : end : self.pitch] = colour

    def show(self, fb: np.ndarray, lit: np.ndarray, count: int) -> int:
        """Copy the first ``count`` pips from ``lit`` onto ``fb``; return how many fit."""
        count = min(max(count, 0), self.capacity)
        rows = slice(self.y, self.y + self.height)
        columns = slice(self.x, self.x + count * self.pitch)
        fb[rows, columns] = lit[rows, columns]
        return count

    def region(self, screen: int) -> Rect:
        """The rectangle every pip of the gauge lies in, on a screen ``screen`` wide."""
        return self.x, self.y, min(self.capacity * self.pitch, screen - self.x), self.height

    def redraw(self, fb: np.ndarray, base: np.ndarray, lit: np.ndarray, count: int,
               damage: Damage) -> int:
        """Show ``count`` pips where another count was shown: the region from ``base``
        again, then the pips from ``lit``; the region is damage. How many fit."""
        region = self.region(fb.shape[1])
        restore(fb, base, region)
        damage.add(region)
        return self.show(fb, lit, count)


def _draw_hud(
    fb: np.ndarray, damage: Damage, gauges: tuple[_Gauge, _Gauge, _Gauge, _Gauge],
    base: np.ndarray, lit: np.ndarray, values: tuple[int, ...], last: tuple[Any, ...] | None,
) -> None:
    """A game's HUD — lives, a count over two rows of pips, time left (``values``): all
    of it on a fresh ``base`` frame when nothing was drawn (``last`` None), else only the
    gauges whose value changed since ``last``, as damage."""
    lives_gauge, count_gauge, more_gauge, time_gauge = gauges
    lives, count, time_left = values
    if last is None:
        np.copyto(fb, base)
        damage.everything()
        lives_gauge.show(fb, lit, lives)
        shown = count_gauge.show(fb, lit, count)
        more_gauge.show(fb, lit, count - shown)
        time_gauge.show(fb, lit, time_left)
        return
    if lives != last[0]:
        lives_gauge.redraw(fb, base, lit, lives, damage)
    if count != last[1]:
        shown = count_gauge.redraw(fb, base, lit, count, damage)
        more_gauge.redraw(fb, base, lit, count - shown, damage)
    if time_left != last[2]:
        time_gauge.redraw(fb, base, lit, time_left, damage)


def _canvas(width: int, height: int, colour: Colour) -> np.ndarray:
    frame = np.empty((height, width, 3), dtype=np.uint8)
    frame[:] = colour
    return frame


def _frozen(frame: np.ndarray) -> np.ndarray:
    frame.flags.writeable = False
    return frame


def _rgb(colour: Colour) -> np.ndarray:
    """``colour`` as a uint8 array: numpy assigns it to a slice faster than a tuple."""
    return _frozen(np.array(colour, dtype=np.uint8))


def _rng(seed: int | None) -> np.random.Generator:
    """The generator of one episode; ``None`` draws fresh entropy from the OS."""
    return np.random.Generator(np.random.PCG64(seed))


# Games --------------------------------------------------------------------------------


class _Game(Runtime):
    """What both games share: an episode clock, a miss count, the describe() extras, and
    :meth:`advance`, which plays the rules of every frame but draws only the last.

    Subclasses implement :meth:`_play` (one frame of the rules, not drawn), :meth:`_draw`
    and :meth:`_info`; :meth:`step` is an advance of one frame.
    """

    #: The episode is done after this many frames at the latest.
    max_episode_frames: ClassVar[int]
    #: ... or after this many misses.
    max_misses: ClassVar[int]
    #: Snapshots hold every variable of the rules and the generator (runtimes/builtin_state.py).
    snapshot_refusal = None
    #: The rules never read the screen: :meth:`play` skips drawing, :meth:`draw` catches up.
    draws_on_demand = True

    def __init__(self) -> None:
        super().__init__()
        self.damage = Damage()
        #: What the last draw showed (None: draw everything next time).
        self._drawn: tuple[Any, ...] | None = None
        self.reset()  # a runtime always has a drawn first frame, even before reset(seed)

    def take_damage(self) -> list[Rect] | None:
        return self.damage.take()

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {
            **super().describe(),
            "max_episode_frames": cls.max_episode_frames,
            "max_misses": cls.max_misses,
        }

    def step(self, events: Sequence[InputEvent]) -> StepResult:
        return _Game.advance(self, events, 1)  # not a subclass's (it may loop step)

    def advance(self, events: Sequence[InputEvent], frames: int) -> StepResult:
        """Play ``frames`` frames with the input held; draw once, at the end: drawing is
        most of a frame's cost, so an advance of k frames costs little more than one
        step (``python -m benchmarks realtime_cpu`` measures a frame's cost)."""
        result = self._play_frames(events, frames)
        if result.frames:
            self._draw()
        return result

    def play(self, events: Sequence[InputEvent], frames: int) -> StepResult:
        """:meth:`advance` without the draw (the frame drawn last stays on screen)."""
        return self._play_frames(events, frames)

    def _play_frames(self, events: Sequence[InputEvent], frames: int) -> StepResult:
        check_frames(frames)
        if self.done:
            return StepResult(0.0, True, self._info(), frames=0)
        reward = self._play(events)
        ran = 1
        while ran < frames and not self.done:
            reward += self._play(())
            ran += 1
        return StepResult(reward, self.done, self._info(), frames=ran)

    def draw(self) -> None:
        self._draw()

    @abc.abstractmethod
    def _play(self, events: Sequence[InputEvent]) -> float:
        """Apply ``events`` and play one frame of the rules, counting it with
        :meth:`_tick`, without drawing; its reward."""

    @abc.abstractmethod
    def _draw(self) -> None:
        """Draw the current state into :attr:`framebuffer`: only what changed since the
        last draw, all of it after :meth:`_start` (and record what, in :attr:`damage`)."""

    @abc.abstractmethod
    def _info(self) -> dict[str, Any]:
        """The exact numbers the pips show, for ``StepResult.info``."""

    def snapshot(self) -> bytes:
        return self._save(self)

    def restore(self, state: bytes) -> None:
        """Every field checked before any is set; then the whole frame drawn again."""
        self._load(self, state)
        self._drawn = None
        self._draw()

    def state_digest(self) -> bytes:
        self._draw()  # (a frame played, not drawn: the screen is part of the state)
        digest = hashlib.blake2b(self.snapshot(), digest_size=16)
        digest.update(self.framebuffer.data)
        return digest.digest()

    # The game's codec (runtimes/builtin_state.py), as plain functions of the game.
    _save: ClassVar[Any]
    _load: ClassVar[Any]

    def _start(self, seed: int | None) -> None:
        self._drawn = None  # the next draw draws everything
        self.rng = _rng(seed)
        self.frame = 0
        self.misses = 0
        self.done = False

    def _time_left(self) -> float:
        """The fraction of the episode's frames still to play."""
        return 1 - self.frame / self.max_episode_frames

    def _tick(self) -> bool:
        """Count one frame; whether the episode is now over."""
        self.frame += 1
        self.done = self.misses >= self.max_misses or self.frame >= self.max_episode_frames
        return self.done


# Catch: frames -------------------------------------------------------------------------

_CATCH_LIVES: Final = _Gauge(4, 2, 5, 5, 7, CATCH_MAX_MISSES)
#: Catches as pips in two rows: 78 in all; a perfect player catches 33 in 60 s.
_CATCH_CATCHES: Final = (
    _Gauge.fit(4, 9, (2, 3), 4, CATCH_WIDTH),
    _Gauge.fit(4, 13, (2, 3), 4, CATCH_WIDTH),
)
#: The time the episode has left.
_CATCH_TIME: Final = _Gauge(0, 18, 1, 2, 1, CATCH_WIDTH)
_CATCH_BALL_RGB: Final = _rgb(CATCH_BALL_COLOUR)
_CATCH_PADDLE_RGB: Final = _rgb(CATCH_PADDLE_COLOUR)


def _catch_frames() -> tuple[np.ndarray, np.ndarray]:
    """The base frame (empty playfield, lives all lost) and lit frame (every pip) of Catch."""
    base = _canvas(CATCH_WIDTH, CATCH_HEIGHT, CATCH_BACKGROUND)
    base[CATCH_HUD_HEIGHT - 1] = CATCH_LINE_COLOUR
    _CATCH_LIVES.paint(base, CATCH_LOST_LIFE_COLOUR)
    lit = base.copy()
    _CATCH_LIVES.paint(lit, CATCH_LIFE_COLOUR)
    for row in _CATCH_CATCHES:
        row.paint(lit, CATCH_CATCH_COLOUR)
    _CATCH_TIME.paint(lit, CATCH_TIME_COLOUR)
    return _frozen(base), _frozen(lit)


_CATCH_BASE, _CATCH_LIT = _catch_frames()


class Catch(_Game):
    """Catch the falling balls with the paddle; hold Left or Right to move it.

    The paddle follows the keyboard *state*: it moves every frame while a key is held,
    and a key pressed and released within one frame still moves it one step.
    """

    env_id = "builtin.Catch-v0"
    width = CATCH_WIDTH
    height = CATCH_HEIGHT
    keys = ("Left", "Right")
    buttons = 0
    description = "Catch falling balls with a paddle (Left/Right); +1 caught, -1 missed"
    max_episode_frames = CATCH_MAX_FRAMES
    max_misses = CATCH_MAX_MISSES
    _save = staticmethod(builtin_state.catch_state)
    _load = staticmethod(builtin_state.load_catch)

    def reset(self, seed: int | None = None) -> None:
        self._start(seed)
        self.held: set[str] = set()  # keys down now; cleared so a seed replays exactly
        self.catches = 0
        self.paddle_x = (CATCH_WIDTH - CATCH_PADDLE_WIDTH) // 2
        self._spawn()
        self._draw()

    def _spawn(self) -> None:
        self.ball_x: int | None = int(self.rng.integers(0, CATCH_WIDTH - CATCH_BALL_SIZE + 1))
        self.ball_y = float(CATCH_HUD_HEIGHT)
        self.ball_speed = min(
            CATCH_BALL_SPEED + CATCH_BALL_SPEEDUP * self.catches, CATCH_BALL_MAX_SPEED
        )
        self.ball_below_paddle = False
        self.spawn_in = 0

    def held_input(self) -> tuple[frozenset[str], tuple[int, int, int]]:
        return frozenset(self.held), (0, 0, 0)

    def _info(self) -> dict[str, Any]:
        return {
            "score": self.catches - self.misses,
            "catches": self.catches,
            "misses": self.misses,
            "frame": self.frame,
        }

    def _play(self, events: Sequence[InputEvent]) -> float:
        tapped: set[str] = set()
        for event in events:
            if isinstance(event, KeyEvent) and event.key in _CATCH_DIRECTIONS:
                if event.down:
                    self.held.add(event.key)
                    tapped.add(event.key)
                else:
                    self.held.discard(event.key)
        direction = sum(_CATCH_DIRECTIONS[key] for key in self.held | tapped)
        self.paddle_x = min(
            max(self.paddle_x + direction * CATCH_PADDLE_SPEED, 0),
            CATCH_WIDTH - CATCH_PADDLE_WIDTH,
        )

        reward = 0.0
        if self.ball_x is None:
            self.spawn_in -= 1
            if self.spawn_in <= 0:
                self._spawn()
        else:
            self.ball_y += self.ball_speed
            bottom = self.ball_y + CATCH_BALL_SIZE
            if not self.ball_below_paddle and bottom >= CATCH_PADDLE_Y:
                if (
                    self.ball_x < self.paddle_x + CATCH_PADDLE_WIDTH
                    and self.ball_x + CATCH_BALL_SIZE > self.paddle_x
                ):
                    reward = CATCH_REWARD_CAUGHT
                    self.catches += 1
                    self.ball_x = None
                else:
                    self.ball_below_paddle = True  # too late now: it falls past the paddle
            if self.ball_x is not None and self.ball_y >= CATCH_HEIGHT:
                reward = CATCH_REWARD_MISSED
                self.misses += 1
                self.ball_x = None
            if self.ball_x is None:
                self.spawn_in = CATCH_SPAWN_DELAY

        self._tick()
        return reward

    def _draw(self) -> None:
        fb, damage, last = self.framebuffer, self.damage, self._drawn
        lives, time_left = self.max_misses - self.misses, round(CATCH_WIDTH * self._time_left())
        ball = None if self.ball_x is None else clip(
            self.ball_x, int(self.ball_y), CATCH_BALL_SIZE, CATCH_BALL_SIZE, CATCH_WIDTH, CATCH_HEIGHT
        )
        paddle = (self.paddle_x, CATCH_PADDLE_Y, CATCH_PADDLE_WIDTH, CATCH_PADDLE_HEIGHT)
        drawn = (lives, self.catches, time_left, ball, paddle)
        if drawn == last:
            return
        _draw_hud(fb, damage, (_CATCH_LIVES, *_CATCH_CATCHES, _CATCH_TIME), _CATCH_BASE,
                  _CATCH_LIT, drawn[:3], last)
        if last is not None:
            if ball == last[3] and paddle == last[4]:
                self._drawn = drawn
                return
            for sprite in last[3:]:
                if sprite is not None:
                    restore(fb, _CATCH_BASE, sprite)
                    damage.add(sprite)
        if ball is not None:
            x, y, w, h = ball
            fb[y : y + h, x : x + w] = _CATCH_BALL_RGB
            damage.add(ball)
        fb[CATCH_PADDLE_Y : CATCH_PADDLE_Y + CATCH_PADDLE_HEIGHT,
           self.paddle_x : self.paddle_x + CATCH_PADDLE_WIDTH] = _CATCH_PADDLE_RGB
        damage.add(paddle)
        self._drawn = drawn


# ClickTarget: frames ------------------------------------------------------------------

_CLICK_LIVES: Final = _Gauge(4, 2, 5, 5, 7, CLICK_MAX_MISSES)
#: Hits as pips in two rows right of the lives; the rest are only in ``info``.
_CLICK_HITS: Final = (
    _Gauge.fit(48, 2, (3, 5), 5, CLICK_WIDTH),
    _Gauge.fit(48, 9, (3, 5), 5, CLICK_WIDTH),
)
#: The time the target has left before it jumps.
_CLICK_TIME: Final = _Gauge(0, 16, 1, 2, 1, CLICK_WIDTH)


def _click_frames() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The base and lit frames and the target sprite (on its background) of ClickTarget."""
    base = _canvas(CLICK_WIDTH, CLICK_HEIGHT, CLICK_BACKGROUND)
    base[:CLICK_HUD_HEIGHT] = CLICK_HUD_COLOUR
    _CLICK_LIVES.paint(base, CLICK_LOST_LIFE_COLOUR)
    lit = base.copy()
    _CLICK_LIVES.paint(lit, CLICK_LIFE_COLOUR)
    for row in _CLICK_HITS:
        row.paint(lit, CLICK_HIT_COLOUR)
    _CLICK_TIME.paint(lit, CLICK_TIME_COLOUR)
    target = _canvas(CLICK_TARGET_SIZE, CLICK_TARGET_SIZE, CLICK_BACKGROUND)
    target[_TARGET_MASK] = CLICK_TARGET_COLOUR
    target[_TARGET_CENTRE_MASK] = CLICK_TARGET_CENTRE_COLOUR
    return _frozen(base), _frozen(lit), _frozen(target)


_CLICK_BASE, _CLICK_LIT, _CLICK_TARGET = _click_frames()


class ClickTarget(_Game):
    """Click the target disc before it jumps away; a click is the left button going down.

    The pointer is wherever the last pointer event put it. Holding the button down
    clicks once; clicking off the target earns nothing and costs nothing.
    """

    env_id = "builtin.ClickTarget-v0"
    width = CLICK_WIDTH
    height = CLICK_HEIGHT
    keys = ()
    buttons = CLICK_BUTTON
    description = "Click the target before it moves (left button); +1 hit, -1 when it escapes"
    max_episode_frames = CLICK_MAX_FRAMES
    max_misses = CLICK_MAX_MISSES
    _save = staticmethod(builtin_state.click_state)
    _load = staticmethod(builtin_state.load_click)

    def reset(self, seed: int | None = None) -> None:
        self._start(seed)
        self.hits = 0
        self.pointer = (0, 0)
        self.buttonmask = 0  # cleared so a seed replays exactly
        self.target: tuple[int, int] = (-CLICK_WIDTH, -CLICK_HEIGHT)  # nowhere yet
        self._move_target()
        self._draw()

    @property
    def target_centre(self) -> tuple[int, int]:
        """(x, y) of the pixel at the middle of the target: always on it."""
        x, y = self.target
        return x + CLICK_TARGET_SIZE // 2, y + CLICK_TARGET_SIZE // 2

    def on_target(self, x: int, y: int) -> bool:
        """Whether a click at (x, y) hits the target: exactly the pixels drawn as the disc."""
        dx, dy = x - self.target[0], y - self.target[1]
        return (
            0 <= dx < CLICK_TARGET_SIZE
            and 0 <= dy < CLICK_TARGET_SIZE
            and bool(_TARGET_MASK[dy, dx])
        )

    def _move_target(self) -> None:
        """Put the target somewhere new, at least a diameter from where it was."""
        old_x, old_y = self.target
        for _ in range(100):  # almost always the first try: the playfield is 10x the disc
            x = int(self.rng.integers(0, CLICK_WIDTH - CLICK_TARGET_SIZE + 1))
            y = int(self.rng.integers(CLICK_HUD_HEIGHT, CLICK_HEIGHT - CLICK_TARGET_SIZE + 1))
            if (x - old_x) ** 2 + (y - old_y) ** 2 >= CLICK_TARGET_SIZE**2:
                break
        self.target = (x, y)
        self.target_age = 0

    def held_input(self) -> tuple[frozenset[str], tuple[int, int, int]]:
        return frozenset(), (*self.pointer, self.buttonmask)

    def _info(self) -> dict[str, Any]:
        return {
            "score": self.hits - self.misses,
            "hits": self.hits,
            "misses": self.misses,
            "frame": self.frame,
        }

    def _play(self, events: Sequence[InputEvent]) -> float:
        hits = 0
        for event in events:
            if not isinstance(event, PointerEvent):
                continue
            pressed = event.buttonmask & CLICK_BUTTON and not self.buttonmask & CLICK_BUTTON
            self.pointer, self.buttonmask = (event.x, event.y), event.buttonmask
            if pressed and self.on_target(event.x, event.y):
                hits += 1
                self._move_target()
        self.hits += hits
        reward = hits * CLICK_REWARD_HIT
        # A target placed this frame is on screen from this frame and starts ageing on
        # the next, so every target is shown for CLICK_TARGET_FRAMES frames.
        if not hits:
            self.target_age += 1
            if self.target_age >= CLICK_TARGET_FRAMES:
                reward += CLICK_REWARD_MISSED
                self.misses += 1
                self._move_target()

        self._tick()
        return reward

    def _draw(self) -> None:
        fb, damage, last = self.framebuffer, self.damage, self._drawn
        lives = self.max_misses - self.misses
        time_left = round(CLICK_WIDTH * (1 - self.target_age / CLICK_TARGET_FRAMES))
        drawn = (lives, self.hits, time_left, self.target)
        if drawn == last:
            return
        _draw_hud(fb, damage, (_CLICK_LIVES, *_CLICK_HITS, _CLICK_TIME), _CLICK_BASE,
                  _CLICK_LIT, drawn[:3], last)
        if last is not None:
            if self.target == last[3]:
                self._drawn = drawn
                return
            old = (*last[3], CLICK_TARGET_SIZE, CLICK_TARGET_SIZE)
            restore(fb, _CLICK_BASE, old)
            damage.add(old)
        x, y = self.target
        fb[y : y + CLICK_TARGET_SIZE, x : x + CLICK_TARGET_SIZE] = _CLICK_TARGET
        damage.add((x, y, CLICK_TARGET_SIZE, CLICK_TARGET_SIZE))
        self._drawn = drawn


#: env id -> runtime class, read by ``runtimes.registry``.
RUNTIMES: dict[str, type[Runtime]] = {
    Catch.env_id: Catch,
    ClickTarget.env_id: ClickTarget,
    Duel.env_id: Duel,  # two players: runtimes/duel.py
}
