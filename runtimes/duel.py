"""A two-player built-in game: :class:`Duel` (``builtin.Duel-v0``), two paddles on one court.

The runtime of several agents in one world (``docs/multiagent.md``): player 0 holds the
left paddle, player 1 the right, both move with Up and Down, and each gets its own reward
(+1 for a point won, -1 for a point lost) in ``StepResult.rewards``. Input arrives as
:class:`~runtimes.base.PlayerEvent` (bare events are player 0's), so one set of keys
serves both players: which paddle moves is who sent the key, not which key it is.

Deterministic under a seed like the other built-in games (the serves are the only
randomness), numpy only, drawn with a few slice copies per frame: after a reset only what
moved or changed, reported as damage (``runtimes.damage``), as the other built-in games do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from .base import InputEvent, KeyEvent, PlayerEvent, Runtime, StepResult, check_frames, split_players
from .damage import Damage, Rect, clip, restore

Colour = tuple[int, int, int]

# Rules --------------------------------------------------------------------------------------

DUEL_WIDTH: Final = 160
DUEL_HEIGHT: Final = 120
#: Rows above the court holding each player's points as pips.
DUEL_HUD_HEIGHT: Final = 10
DUEL_PLAYERS: Final = 2
DUEL_PADDLE_WIDTH: Final = 3
DUEL_PADDLE_HEIGHT: Final = 20
#: Columns of the paddles' left edges, player 0 then player 1.
DUEL_PADDLE_X: Final = (4, DUEL_WIDTH - 4 - DUEL_PADDLE_WIDTH)
#: Pixels a paddle moves per frame while Up or Down is held (or was tapped).
DUEL_PADDLE_SPEED: Final = 3
DUEL_BALL_SIZE: Final = 4
#: Horizontal pixels per frame of a fresh serve: about 1.2 s across the court at 60 fps.
DUEL_BALL_SPEED: Final = 2.0
#: Each return makes the ball this much faster, up to DUEL_BALL_MAX_SPEED.
DUEL_BALL_SPEEDUP: Final = 0.1
DUEL_BALL_MAX_SPEED: Final = 4.0
#: Largest vertical speed of a serve, and the most a paddle's edge bends a return.
DUEL_SERVE_SLOPE: Final = 1.5
DUEL_RETURN_SLOPE: Final = 2.0
#: Frames between a point and the next serve.
DUEL_SERVE_DELAY: Final = 30
DUEL_REWARD_POINT: Final = 1.0
#: The episode ends when a player has this many points, or after DUEL_MAX_FRAMES.
DUEL_POINTS_TO_WIN: Final = 5
DUEL_MAX_FRAMES: Final = 60 * 60

# Colours --------------------------------------------------------------------------------------

DUEL_BACKGROUND: Final[Colour] = (10, 30, 20)
DUEL_LINE_COLOUR: Final[Colour] = (50, 90, 70)
DUEL_BALL_COLOUR: Final[Colour] = (250, 250, 250)
#: Player 0's paddle and pips, then player 1's.
DUEL_PLAYER_COLOURS: Final[tuple[Colour, Colour]] = ((70, 150, 255), (255, 150, 60))
DUEL_PIP_OFF_COLOUR: Final[Colour] = (40, 60, 50)

#: Key -> paddle direction (rows grow downwards).
_DIRECTIONS: Final = {"Up": -1, "Down": 1}
_PIP: Final = (6, 5, 8)  # width, height, pitch
_COURT_TOP: Final = DUEL_HUD_HEIGHT
_PADDLE_TOP_MAX: Final = DUEL_HEIGHT - DUEL_PADDLE_HEIGHT


def _pip_x(player: int, index: int) -> int:
    """Left column of pip ``index`` of ``player``: player 0's from the left edge, player
    1's from the right."""
    width, _, pitch = _PIP
    return 4 + index * pitch if player == 0 else DUEL_WIDTH - 4 - width - index * pitch


def _frames() -> tuple[np.ndarray, np.ndarray]:
    """The base frame (court, unlit pips) and the lit frame (every pip in its colour)."""
    base = np.empty((DUEL_HEIGHT, DUEL_WIDTH, 3), np.uint8)
    base[:] = DUEL_BACKGROUND
    base[_COURT_TOP - 1] = DUEL_LINE_COLOUR
    for row in range(_COURT_TOP + 1, DUEL_HEIGHT, 6):  # a dashed net down the middle
        base[row : row + 3, DUEL_WIDTH // 2] = DUEL_LINE_COLOUR
    lit = base.copy()
    width, height, _ = _PIP
    for player in range(DUEL_PLAYERS):
        for index in range(DUEL_POINTS_TO_WIN):
            x = _pip_x(player, index)
            base[2 : 2 + height, x : x + width] = DUEL_PIP_OFF_COLOUR
            lit[2 : 2 + height, x : x + width] = DUEL_PLAYER_COLOURS[player]
    base.flags.writeable = lit.flags.writeable = False
    return base, lit


_BASE, _LIT = _frames()
_BALL_RGB: Final = np.array(DUEL_BALL_COLOUR, np.uint8)
_PADDLE_RGB: Final = tuple(np.array(c, np.uint8) for c in DUEL_PLAYER_COLOURS)


class Duel(Runtime):
    """Two paddles, one ball: keep it out of your goal (Up/Down); +1 a point won, -1 lost.

    Player 0 plays the left paddle, player 1 the right. Each paddle follows its own
    player's keyboard *state*, as Catch's does.
    """

    env_id = "builtin.Duel-v0"
    width = DUEL_WIDTH
    height = DUEL_HEIGHT
    keys = ("Up", "Down")
    buttons = 0
    players = DUEL_PLAYERS
    description = "Two players, two paddles (Up/Down each): +1 a point won, -1 a point lost"

    def __init__(self) -> None:
        super().__init__()
        self.damage = Damage()
        self._drawn: tuple[Any, ...] | None = None  # what the last draw showed
        self.reset()

    def take_damage(self) -> list[Rect] | None:
        return self.damage.take()

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {
            **super().describe(),
            "max_episode_frames": DUEL_MAX_FRAMES,
            "points_to_win": DUEL_POINTS_TO_WIN,
        }

    def reset(self, seed: int | None = None) -> None:
        self._drawn = None  # the next draw draws everything
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.frame = 0
        self.done = False
        self.points = [0] * DUEL_PLAYERS
        self.held: list[set[str]] = [set() for _ in range(DUEL_PLAYERS)]
        middle = (_COURT_TOP + DUEL_HEIGHT - DUEL_PADDLE_HEIGHT) // 2
        self.paddle_y = [middle] * DUEL_PLAYERS
        self._next_serve = 0
        self._serve(towards=int(self.rng.integers(DUEL_PLAYERS)))
        self._draw()

    def _serve(self, towards: int) -> None:
        """Put the ball in the middle, moving to ``towards``'s goal at a random slope."""
        self.ball_x = (DUEL_WIDTH - DUEL_BALL_SIZE) / 2
        self.ball_y = float(self.rng.integers(_COURT_TOP, DUEL_HEIGHT - DUEL_BALL_SIZE + 1))
        self.ball_vx = -DUEL_BALL_SPEED if towards == 0 else DUEL_BALL_SPEED
        self.ball_vy = float(self.rng.uniform(-DUEL_SERVE_SLOPE, DUEL_SERVE_SLOPE))
        self.serve_in = 0

    def step(self, events: Sequence[InputEvent]) -> StepResult:
        return self.advance(events, 1)

    def advance(self, events: Sequence[InputEvent | PlayerEvent], frames: int) -> StepResult:
        """Play ``frames`` frames with each player's input held; draw the last one."""
        check_frames(frames)
        if self.done:
            return StepResult(0.0, True, self._info(), frames=0, rewards=(0.0,) * DUEL_PLAYERS)
        rewards = [0.0] * DUEL_PLAYERS
        tapped = self._press(split_players(events, DUEL_PLAYERS))
        ran = 0
        while ran < frames and not self.done:
            self._play(tapped, rewards)
            tapped = [set() for _ in range(DUEL_PLAYERS)]
            ran += 1
        self._draw()
        return StepResult(
            rewards[0], self.done, self._info(), frames=ran, rewards=tuple(rewards)
        )

    def _press(self, per_player: list[list[InputEvent]]) -> list[set[str]]:
        """Apply each player's key events to what it holds; the keys tapped this frame."""
        tapped: list[set[str]] = []
        for held, events in zip(self.held, per_player, strict=True):
            taps: set[str] = set()
            for event in events:
                if isinstance(event, KeyEvent) and event.key in _DIRECTIONS:
                    if event.down:
                        held.add(event.key)
                        taps.add(event.key)
                    else:
                        held.discard(event.key)
            tapped.append(taps)
        return tapped

    def _play(self, tapped: list[set[str]], rewards: list[float]) -> None:
        """One frame of the rules: paddles, then the ball, then the clock."""
        for player in range(DUEL_PLAYERS):
            direction = sum(_DIRECTIONS[k] for k in self.held[player] | tapped[player])
            y = self.paddle_y[player] + direction * DUEL_PADDLE_SPEED
            self.paddle_y[player] = min(max(y, _COURT_TOP), _PADDLE_TOP_MAX)
        if self.serve_in > 0:
            self.serve_in -= 1
            if self.serve_in == 0:
                self._serve(towards=self._next_serve)
        else:
            self._move_ball(rewards)
        self.frame += 1
        self.done = max(self.points) >= DUEL_POINTS_TO_WIN or self.frame >= DUEL_MAX_FRAMES

    def _move_ball(self, rewards: list[float]) -> None:
        self.ball_x += self.ball_vx
        self.ball_y += self.ball_vy
        low, high = float(_COURT_TOP), float(DUEL_HEIGHT - DUEL_BALL_SIZE)
        if self.ball_y < low or self.ball_y > high:  # off the wall, mirrored back in
            self.ball_y = 2 * (low if self.ball_y < low else high) - self.ball_y
            self.ball_vy = -self.ball_vy
        player = 0 if self.ball_vx < 0 else 1  # whose paddle the ball is heading for
        x = DUEL_PADDLE_X[player]
        face = x + DUEL_PADDLE_WIDTH if player == 0 else x - DUEL_BALL_SIZE
        reached = self.ball_x <= face if player == 0 else self.ball_x >= face
        past = (
            self.ball_x + DUEL_BALL_SIZE < x if player == 0 else self.ball_x > x + DUEL_PADDLE_WIDTH
        )
        top = self.paddle_y[player]
        if reached and not past and top - DUEL_BALL_SIZE < self.ball_y < top + DUEL_PADDLE_HEIGHT:
            # Returned: back the other way, faster, bent by where on the paddle it hit.
            speed = min(abs(self.ball_vx) + DUEL_BALL_SPEEDUP, DUEL_BALL_MAX_SPEED)
            self.ball_vx = speed if player == 0 else -speed
            self.ball_x = float(face)
            offset = (self.ball_y + DUEL_BALL_SIZE / 2) - (top + DUEL_PADDLE_HEIGHT / 2)
            self.ball_vy = DUEL_RETURN_SLOPE * offset / (DUEL_PADDLE_HEIGHT / 2)
        elif self.ball_x < -DUEL_BALL_SIZE or self.ball_x > DUEL_WIDTH:
            winner = 1 - player
            self.points[winner] += 1
            rewards[winner] += DUEL_REWARD_POINT
            rewards[player] -= DUEL_REWARD_POINT
            self.serve_in = DUEL_SERVE_DELAY
            self._next_serve = player  # the loser of the point receives the next serve

    def _info(self) -> dict[str, Any]:
        return {"points": list(self.points), "frame": self.frame}

    def _sprites(self) -> tuple[Rect | None, ...]:
        """Where the paddles and the ball are (the ball: None between a point and a serve)."""
        paddles = tuple(
            (DUEL_PADDLE_X[p], self.paddle_y[p], DUEL_PADDLE_WIDTH, DUEL_PADDLE_HEIGHT)
            for p in range(DUEL_PLAYERS)
        )
        ball = None
        if self.serve_in == 0:
            left = min(max(int(self.ball_x), 0), DUEL_WIDTH - DUEL_BALL_SIZE)
            ball = clip(left, int(self.ball_y), DUEL_BALL_SIZE, DUEL_BALL_SIZE, DUEL_WIDTH, DUEL_HEIGHT)
        return (*paddles, ball)

    def _draw(self) -> None:
        """The frame: all of it after a reset; else the pips whose count changed and the
        sprites that moved (restored from the base where they were), reported as damage."""
        fb, damage, last = self.framebuffer, self.damage, self._drawn
        points = tuple(min(p, DUEL_POINTS_TO_WIN) for p in self.points)
        sprites = self._sprites()
        drawn = (points, sprites)
        width, height, _ = _PIP
        if last is None:
            np.copyto(fb, _BASE)
            damage.everything()
            changed: Sequence[int] = range(DUEL_PLAYERS)
        elif drawn == last:
            return
        else:
            changed = [p for p in range(DUEL_PLAYERS) if points[p] != last[0][p]]
            if sprites != last[1]:
                for sprite in last[1]:
                    if sprite is not None:
                        restore(fb, _BASE, sprite)
                        damage.add(sprite)
        for player in changed:  # a player's pips only ever grow within an episode
            shown = points[player]
            if shown:
                xs = [_pip_x(player, i) for i in range(shown)]
                left, right = min(xs), max(xs) + width
                fb[2 : 2 + height, left:right] = _LIT[2 : 2 + height, left:right]
                damage.add((left, 2, right - left, height))
        if last is None or sprites != last[1]:
            for player in range(DUEL_PLAYERS):
                x, y, w, h = sprites[player]  # type: ignore[misc]
                fb[y : y + h, x : x + w] = _PADDLE_RGB[player]
                damage.add(sprites[player])
            ball = sprites[DUEL_PLAYERS]
            if ball is not None:
                x, y, w, h = ball
                fb[y : y + h, x : x + w] = _BALL_RGB
                damage.add(ball)
        self._drawn = drawn
