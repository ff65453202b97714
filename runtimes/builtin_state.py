"""The snapshots of the built-in games: every variable of the rules, the generator
included, so a restored game plays on exactly as it would have (docs/snapshots.md).

Holds :data:`CATCH_LAYOUT` / :data:`CLICK_LAYOUT` and, for each game, the function that
reads its state into fields and the one that checks fields and sets them back. The frame
is not saved: it is a function of these fields, and a restore draws it whole. The games
(:mod:`.builtin`) import this module; it knows them only as :class:`CatchGame` and
:class:`ClickGame`, the fields it reads and sets, and their rules from :mod:`.builtin_rules`.
"""

from __future__ import annotations

import math
from typing import Any, Final, Protocol

import numpy as np

from .builtin_rules import (
    CATCH_BALL_MAX_SPEED,
    CATCH_BALL_SIZE,
    CATCH_HEIGHT,
    CATCH_PADDLE_WIDTH,
    CATCH_SPAWN_DELAY,
    CATCH_WIDTH,
    CLICK_HEIGHT,
    CLICK_HUD_HEIGHT,
    CLICK_TARGET_FRAMES,
    CLICK_TARGET_SIZE,
    CLICK_WIDTH,
)
from .errors import BadSnapshot
from .state_codec import StateLayout, check_range, pack_rng, rng_fields, unpack_rng

#: A snapshot never outlives a change of these rules unnoticed: bump the layout version
#: when a field is added, removed or means something else.
CATCH_LAYOUT: Final = StateLayout(b"URc0", 1, (
    *rng_fields(),
    ("frame", "I"), ("misses", "I"), ("done", "?"),
    ("held", "B"), ("catches", "I"), ("paddle_x", "i"),
    ("has_ball", "?"), ("ball_x", "i"), ("ball_y", "d"), ("ball_speed", "d"),
    ("below_paddle", "?"), ("spawn_in", "i"),
))
CLICK_LAYOUT: Final = StateLayout(b"URk0", 1, (
    *rng_fields(),
    ("frame", "I"), ("misses", "I"), ("done", "?"),
    ("hits", "I"), ("pointer_x", "i"), ("pointer_y", "i"), ("buttonmask", "B"),
    ("target_x", "i"), ("target_y", "i"), ("target_age", "I"),
))
#: Catch's held keys as bits of ``held``.
_HELD_BITS: Final = {"Left": 1, "Right": 2}
#: Largest coordinate a saved pointer may have (a pointer event's field is 16 bits).
_MAX_POINTER: Final = 65535


class _Game(Protocol):
    """What both games' snapshots hold: the generator, the episode's clock and misses."""

    rng: np.random.Generator
    frame: int
    misses: int
    done: bool

    @property
    def env_id(self) -> str: ...
    @property
    def max_episode_frames(self) -> int: ...
    @property
    def max_misses(self) -> int: ...


class CatchGame(_Game, Protocol):
    """The fields of :class:`~.builtin.Catch` its snapshot reads and sets."""

    held: set[str]
    catches: int
    paddle_x: int
    ball_x: int | None
    ball_y: float
    ball_speed: float
    ball_below_paddle: bool
    spawn_in: int


class ClickGame(_Game, Protocol):
    """The fields of :class:`~.builtin.ClickTarget` its snapshot reads and sets."""

    hits: int
    pointer: tuple[int, int]
    buttonmask: int
    target: tuple[int, int]
    target_age: int


def _common(game: _Game) -> dict[str, Any]:
    return {**pack_rng(game.rng), "frame": game.frame, "misses": game.misses, "done": game.done}


def _load_common(game: _Game, fields: dict[str, Any]) -> None:
    check_range("frame", fields["frame"], 0, game.max_episode_frames)
    check_range("misses", fields["misses"], 0, game.max_misses)
    game.rng = unpack_rng(fields)
    game.frame, game.misses, game.done = fields["frame"], fields["misses"], fields["done"]


def catch_state(game: CatchGame) -> bytes:
    held = sum(bit for key, bit in _HELD_BITS.items() if key in game.held)
    has_ball = game.ball_x is not None
    return CATCH_LAYOUT.pack({
        **_common(game), "held": held, "catches": game.catches, "paddle_x": game.paddle_x,
        "has_ball": has_ball, "ball_x": game.ball_x if has_ball else 0,
        "ball_y": game.ball_y, "ball_speed": game.ball_speed,
        "below_paddle": game.ball_below_paddle, "spawn_in": game.spawn_in,
    })


def load_catch(game: CatchGame, data: bytes) -> None:
    """Set ``game`` to the state ``data`` holds, every field checked before any is set."""
    f = CATCH_LAYOUT.unpack(data, game.env_id)
    if f["held"] & ~3:
        raise BadSnapshot(f"held must be a mask of Left (1) and Right (2), not {f['held']}")
    check_range("paddle_x", f["paddle_x"], 0, CATCH_WIDTH - CATCH_PADDLE_WIDTH)
    check_range("ball_x", f["ball_x"], 0, CATCH_WIDTH - CATCH_BALL_SIZE)
    check_range("ball_y", f["ball_y"], 0, CATCH_HEIGHT + CATCH_BALL_MAX_SPEED)
    check_range("ball_speed", f["ball_speed"], 0, CATCH_BALL_MAX_SPEED)
    check_range("spawn_in", f["spawn_in"], -1, CATCH_SPAWN_DELAY)
    check_range("catches", f["catches"], 0, game.max_episode_frames)
    if not (math.isfinite(f["ball_y"]) and math.isfinite(f["ball_speed"])):
        raise BadSnapshot("ball_y and ball_speed must be finite")
    _load_common(game, f)
    game.held = {key for key, bit in _HELD_BITS.items() if f["held"] & bit}
    game.catches, game.paddle_x = f["catches"], f["paddle_x"]
    game.ball_x = f["ball_x"] if f["has_ball"] else None
    game.ball_y, game.ball_speed = f["ball_y"], f["ball_speed"]
    game.ball_below_paddle, game.spawn_in = f["below_paddle"], f["spawn_in"]


def click_state(game: ClickGame) -> bytes:
    return CLICK_LAYOUT.pack({
        **_common(game), "hits": game.hits, "pointer_x": game.pointer[0],
        "pointer_y": game.pointer[1], "buttonmask": game.buttonmask,
        "target_x": game.target[0], "target_y": game.target[1], "target_age": game.target_age,
    })


def load_click(game: ClickGame, data: bytes) -> None:
    """Set ``game`` to the state ``data`` holds, every field checked before any is set."""
    f = CLICK_LAYOUT.unpack(data, game.env_id)
    check_range("pointer_x", f["pointer_x"], 0, _MAX_POINTER)
    check_range("pointer_y", f["pointer_y"], 0, _MAX_POINTER)
    check_range("target_x", f["target_x"], 0, CLICK_WIDTH - CLICK_TARGET_SIZE)
    check_range("target_y", f["target_y"], CLICK_HUD_HEIGHT, CLICK_HEIGHT - CLICK_TARGET_SIZE)
    check_range("target_age", f["target_age"], 0, CLICK_TARGET_FRAMES)
    check_range("hits", f["hits"], 0, game.max_episode_frames * 1000)
    _load_common(game, f)
    game.hits = f["hits"]
    game.pointer, game.buttonmask = (f["pointer_x"], f["pointer_y"]), f["buttonmask"]
    game.target, game.target_age = (f["target_x"], f["target_y"]), f["target_age"]
