"""The rules of the built-in games (:mod:`.builtin`) as numbers: sizes, speeds, rewards,
limits.

Holds every rule constant of Catch and ClickTarget, so the games (:mod:`.builtin`) and
their snapshots' checks (:mod:`.builtin_state`) read the same numbers while
:mod:`.builtin_state` imports nothing of the games. :mod:`.builtin` re-exports them
(``from runtimes.builtin import CATCH_WIDTH`` works as before).
"""

from __future__ import annotations

from typing import Final

# Catch: rules ---------------------------------------------------------------------------

#: Screen size of an Atari 2600 frame, so Catch looks and scales like the Atari games.
CATCH_WIDTH: Final = 160
CATCH_HEIGHT: Final = 210
#: Rows above the playfield holding the lives, catches and time indicators.
CATCH_HUD_HEIGHT: Final = 22
CATCH_PADDLE_WIDTH: Final = 20
CATCH_PADDLE_HEIGHT: Final = 4
#: Top row of the paddle; the rows below it are where a missed ball falls out.
CATCH_PADDLE_Y: Final = CATCH_HEIGHT - 16
#: Pixels the paddle moves per frame while Left or Right is held (or was tapped).
CATCH_PADDLE_SPEED: Final = 3
CATCH_BALL_SIZE: Final = 6
#: Pixels per frame the ball falls at first: about 2 s from top to paddle at 60 fps.
CATCH_BALL_SPEED: Final = 1.5
#: Each catch makes the next balls this much faster, up to CATCH_BALL_MAX_SPEED, which
#: still leaves the paddle time to cross the whole screen (47 frames) before the ball lands.
CATCH_BALL_SPEEDUP: Final = 0.05
CATCH_BALL_MAX_SPEED: Final = 2.5
#: Frames between a ball being caught or missed and the next one appearing.
CATCH_SPAWN_DELAY: Final = 30
CATCH_REWARD_CAUGHT: Final = 1.0
CATCH_REWARD_MISSED: Final = -1.0
#: The episode ends at this many misses, or after CATCH_MAX_FRAMES (60 s at 60 fps).
CATCH_MAX_MISSES: Final = 5
CATCH_MAX_FRAMES: Final = 60 * 60

# ClickTarget: rules ---------------------------------------------------------------------

CLICK_WIDTH: Final = 320
CLICK_HEIGHT: Final = 240
#: Rows above the playfield holding the lives, hits and target-time indicators.
CLICK_HUD_HEIGHT: Final = 20
#: Diameter of the target disc; a click counts on the disc's own pixels, not its box.
CLICK_TARGET_SIZE: Final = 24
#: Frames a target waits for its click before it jumps elsewhere, counting a miss (2 s).
CLICK_TARGET_FRAMES: Final = 120
CLICK_REWARD_HIT: Final = 1.0
CLICK_REWARD_MISSED: Final = -1.0
#: The episode ends at this many misses, or after CLICK_MAX_FRAMES (60 s at 60 fps).
CLICK_MAX_MISSES: Final = 5
CLICK_MAX_FRAMES: Final = 60 * 60
#: Bit of ``PointerEvent.buttonmask`` that clicks: the left button.
CLICK_BUTTON: Final = 1
