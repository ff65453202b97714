"""The built-in games: the compliance suite, then their rules, checked through pixels.

Tests find the paddle, ball and target by their colours in the framebuffer, as an agent
or a human would, so they check what is drawn as well as what is scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from runtimes import builtin, registry
from runtimes.base import InputEvent, KeyEvent, PlayerEvent, PointerEvent, Runtime, StepResult
from runtimes.builtin import (
    CATCH_BALL_COLOUR,
    CATCH_BALL_SIZE,
    CATCH_CATCH_COLOUR,
    CATCH_HEIGHT,
    CATCH_HUD_HEIGHT,
    CATCH_LIFE_COLOUR,
    CATCH_MAX_FRAMES,
    CATCH_MAX_MISSES,
    CATCH_PADDLE_COLOUR,
    CATCH_PADDLE_SPEED,
    CATCH_PADDLE_WIDTH,
    CATCH_PADDLE_Y,
    CATCH_WIDTH,
    CLICK_HIT_COLOUR,
    CLICK_HUD_HEIGHT,
    CLICK_MAX_FRAMES,
    CLICK_MAX_MISSES,
    CLICK_TARGET_COLOUR,
    CLICK_TARGET_FRAMES,
    CLICK_TARGET_SIZE,
    Catch,
    ClickTarget,
)
from runtimes.compliance import RuntimeCompliance
from runtimes.duel import Duel


class TestCatchCompliance(RuntimeCompliance):
    env_id = "builtin.Catch-v0"


class TestClickTargetCompliance(RuntimeCompliance):
    env_id = "builtin.ClickTarget-v0"


class SteppedCatch(Catch):
    """Catch advanced by the base class's loop over :meth:`step`, as a runtime that cannot
    skip drawing is; its frames send text and observations now and then, so that the
    suite checks which ones the loop keeps."""

    advance = Runtime.advance

    def step(self, events: Sequence[InputEvent]) -> StepResult:
        result = Catch.advance(self, events, 1)
        if result.frames and self.frame % 3 == 0:
            result.text = f"frame {self.frame}"
        if result.reward:
            result.observation = {"caught": result.reward > 0}
        return result


class TestBaseAdvanceCompliance(RuntimeCompliance):
    env_id = "builtin.Catch-v0"

    def make_runtime(self) -> SteppedCatch:
        return SteppedCatch()


def test_runtimes_table() -> None:
    expected = {"builtin.Catch-v0": Catch, "builtin.ClickTarget-v0": ClickTarget, "builtin.Duel-v0": Duel}
    assert builtin.RUNTIMES == expected
    assert isinstance(registry.make("builtin.Catch-v0"), Catch)
    assert Catch.keys == ("Left", "Right") and Catch.buttons == 0
    assert ClickTarget.keys == () and ClickTarget.buttons == 1


# Catch -------------------------------------------------------------------------------


def where(frame: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    """Mask of the pixels of exactly ``colour`` (a channel at a time, much faster than np.all)."""
    red, green, blue = colour
    mask: np.ndarray = (frame[..., 0] == red) & (frame[..., 1] == green) & (frame[..., 2] == blue)
    return mask


def paddle_x(frame: np.ndarray) -> int:
    """Left edge of the paddle, found in its rows."""
    columns = np.flatnonzero(where(frame[CATCH_PADDLE_Y], CATCH_PADDLE_COLOUR))
    assert len(columns) == CATCH_PADDLE_WIDTH
    assert columns[-1] - columns[0] == CATCH_PADDLE_WIDTH - 1
    return int(columns[0])


def ball(frame: np.ndarray) -> tuple[int, int] | None:
    """(x, y) of the top left of the ball, or None if there is none on screen."""
    ys, xs = np.nonzero(where(frame[CATCH_HUD_HEIGHT:], CATCH_BALL_COLOUR))
    if len(xs) == 0:
        return None
    assert xs.max() - xs.min() == CATCH_BALL_SIZE - 1
    return int(xs.min()), int(ys.min()) + CATCH_HUD_HEIGHT


def pips(row: np.ndarray, colour: tuple[int, int, int]) -> int:
    """How many separate runs of ``colour`` a row of pixels holds."""
    lit = where(row, colour).astype(np.int8)
    return int(np.count_nonzero(np.diff(lit, prepend=0) == 1))


def tracker(runtime: Catch) -> list[KeyEvent]:
    """Keys that steer the paddle under the ball, chosen from the pixels alone."""
    frame = runtime.framebuffer
    found = ball(frame)
    goal = (CATCH_WIDTH // 2) if found is None else found[0] + CATCH_BALL_SIZE // 2
    offset = goal - (paddle_x(frame) + CATCH_PADDLE_WIDTH // 2)
    return [KeyEvent("Right", offset > 1), KeyEvent("Left", offset < -1)]


@pytest.fixture
def catch() -> Catch:
    runtime = Catch()
    runtime.reset(5)
    return runtime


def test_catch_first_frame(catch: Catch) -> None:
    frame = catch.framebuffer
    assert paddle_x(frame) == (CATCH_WIDTH - CATCH_PADDLE_WIDTH) // 2
    assert ball(frame) == (catch.ball_x, CATCH_HUD_HEIGHT)
    assert pips(frame[4], CATCH_LIFE_COLOUR) == CATCH_MAX_MISSES
    assert pips(frame[10], CATCH_CATCH_COLOUR) == 0


@pytest.mark.parametrize(("key", "sign"), [("Right", 1), ("Left", -1)])
def test_holding_a_key_moves_the_paddle_every_frame(catch: Catch, key: str, sign: int) -> None:
    start = paddle_x(catch.framebuffer)
    catch.step([KeyEvent(key, True)])
    for frame in range(2, 11):
        catch.step([])  # nothing arrives while the key is held
        assert paddle_x(catch.framebuffer) == start + sign * frame * CATCH_PADDLE_SPEED
    catch.step([KeyEvent(key, False)])
    stopped = paddle_x(catch.framebuffer)
    catch.step([])
    assert paddle_x(catch.framebuffer) == stopped == start + sign * 10 * CATCH_PADDLE_SPEED


def test_a_tap_within_one_frame_moves_the_paddle_one_step(catch: Catch) -> None:
    start = paddle_x(catch.framebuffer)
    catch.step([KeyEvent("Right", True), KeyEvent("Right", False)])
    assert paddle_x(catch.framebuffer) == start + CATCH_PADDLE_SPEED
    catch.step([])
    assert paddle_x(catch.framebuffer) == start + CATCH_PADDLE_SPEED


def test_the_paddle_stops_at_the_edges(catch: Catch) -> None:
    catch.step([KeyEvent("Left", True)])
    for _ in range(100):
        catch.step([])
    assert paddle_x(catch.framebuffer) == 0
    catch.step([KeyEvent("Left", False), KeyEvent("Right", True)])
    for _ in range(100):
        catch.step([])
    assert paddle_x(catch.framebuffer) == CATCH_WIDTH - CATCH_PADDLE_WIDTH


def test_other_keys_and_the_mouse_do_nothing(catch: Catch) -> None:
    other = Catch()
    other.reset(5)
    for _ in range(50):
        catch.step([KeyEvent("space", True), PointerEvent(10, 10, 1), KeyEvent("Up", True)])
        other.step([])
        assert np.array_equal(catch.framebuffer, other.framebuffer)


def test_the_ball_falls(catch: Catch) -> None:
    found = ball(catch.framebuffer)
    assert found is not None
    for _ in range(20):
        catch.step([])
    later = ball(catch.framebuffer)
    assert later is not None
    assert later[0] == found[0] and later[1] > found[1] + 20


def test_a_tracking_agent_catches_every_ball_until_time_runs_out(catch: Catch) -> None:
    rewards = []
    result = StepResult()
    columns = set()
    while not result.done:
        result = catch.step(tracker(catch))
        rewards.append(result.reward)
        if catch.ball_x is not None:
            columns.add(catch.ball_x)
    assert len(rewards) == CATCH_MAX_FRAMES
    assert set(rewards) == {0.0, 1.0}
    catches = rewards.count(1.0)
    assert catches >= 30  # a perfect player gets 33
    assert result.info == {
        "score": catches, "catches": catches, "misses": 0, "frame": CATCH_MAX_FRAMES
    }
    assert len(columns) > catches // 2  # balls come from many columns
    hud = catch.framebuffer
    assert pips(hud[10], CATCH_CATCH_COLOUR) + pips(hud[14], CATCH_CATCH_COLOUR) == catches
    assert pips(hud[4], CATCH_LIFE_COLOUR) == CATCH_MAX_MISSES


def test_the_first_catch_is_rewarded_and_shown(catch: Catch) -> None:
    result = StepResult()
    while result.reward == 0:
        result = catch.step(tracker(catch))
    assert result.reward == 1.0
    assert result.info["catches"] == 1
    assert ball(catch.framebuffer) is None  # caught: gone until the next one
    assert pips(catch.framebuffer[10], CATCH_CATCH_COLOUR) == 1


def test_doing_nothing_loses_lives_until_the_episode_ends(catch: Catch) -> None:
    catch.step([KeyEvent("Left", True), KeyEvent("Left", False)])  # off the centre line
    rewards = []
    result = StepResult()
    while not result.done:
        result = catch.step([])
        rewards.append(result.reward)
        assert len(rewards) < CATCH_MAX_FRAMES
        lives = pips(catch.framebuffer[4], CATCH_LIFE_COLOUR)
        assert lives == CATCH_MAX_MISSES - result.info["misses"]
    assert rewards.count(-1.0) == CATCH_MAX_MISSES
    assert rewards[-1] == -1.0  # the last miss ends it, in the same frame
    assert result.info["misses"] == CATCH_MAX_MISSES
    assert result.info["score"] == sum(rewards)


def test_a_ball_is_missed_only_after_it_leaves_the_screen(catch: Catch) -> None:
    catch.step([KeyEvent("Left", True)])
    result = StepResult()
    lowest = 0
    while result.reward == 0:
        found = ball(catch.framebuffer)
        if found is not None:
            lowest = max(lowest, found[1])
        result = catch.step([])
    assert result.reward == -1.0
    assert CATCH_PADDLE_Y < lowest < CATCH_HEIGHT  # it was seen falling past the paddle


# ClickTarget -------------------------------------------------------------------------


def target(frame: np.ndarray) -> tuple[int, int, int, int]:
    """The target's bounding box (x0, y0, x1, y1), inclusive, found in the playfield."""
    ys, xs = np.nonzero(where(frame[CLICK_HUD_HEIGHT:], CLICK_TARGET_COLOUR))
    assert len(xs), "no target on screen"
    x0, y0 = int(xs.min()), int(ys.min()) + CLICK_HUD_HEIGHT
    x1, y1 = int(xs.max()), int(ys.max()) + CLICK_HUD_HEIGHT
    assert x1 - x0 == y1 - y0 == CLICK_TARGET_SIZE - 1
    return x0, y0, x1, y1


def centre(frame: np.ndarray) -> tuple[int, int]:
    x0, y0, x1, y1 = target(frame)
    return (x0 + x1) // 2, (y0 + y1) // 2


def click(x: int, y: int) -> list[PointerEvent]:
    return [PointerEvent(x, y, 1), PointerEvent(x, y, 0)]


@pytest.fixture
def game() -> ClickTarget:
    runtime = ClickTarget()
    runtime.reset(11)
    return runtime


def test_clicking_the_target_scores_and_moves_it(game: ClickTarget) -> None:
    before = target(game.framebuffer)
    result = game.step(click(*centre(game.framebuffer)))
    assert result.reward == 1.0
    assert result.info == {"score": 1, "hits": 1, "misses": 0, "frame": 1}
    after = target(game.framebuffer)
    assert after != before
    assert abs(after[0] - before[0]) + abs(after[1] - before[1]) >= CLICK_TARGET_SIZE
    assert pips(game.framebuffer[4], CLICK_HIT_COLOUR) == 1


def test_clicking_elsewhere_scores_nothing(game: ClickTarget) -> None:
    x0, y0, x1, y1 = target(game.framebuffer)
    far_x = game.width - 1 if x0 < game.width // 2 else 0
    corner = (x0, y0)  # inside the target's box but outside its disc
    for x, y in [(far_x, y0), corner, (x1 + 1, (y0 + y1) // 2), (5, 5)]:
        result = game.step(click(x, y))
        assert result.reward == 0.0
        assert target(game.framebuffer) == (x0, y0, x1, y1)
    assert result.info["hits"] == result.info["misses"] == 0


def test_holding_the_button_clicks_once(game: ClickTarget) -> None:
    x, y = centre(game.framebuffer)
    assert game.step([PointerEvent(x, y, 1)]).reward == 1.0
    x, y = centre(game.framebuffer)  # follow the target with the button still down
    assert game.step([PointerEvent(x, y, 1)]).reward == 0.0
    assert game.step([PointerEvent(x + 1, y, 1)]).reward == 0.0
    assert game.step([PointerEvent(x, y, 0)]).reward == 0.0
    assert game.step([PointerEvent(x, y, 1)]).reward == 1.0


def test_pressing_off_target_and_dragging_on_does_not_click(game: ClickTarget) -> None:
    x, y = centre(game.framebuffer)
    game.step([PointerEvent(0, game.height - 1, 1)])
    assert game.step([PointerEvent(x, y, 1)]).reward == 0.0


def test_only_the_left_button_clicks(game: ClickTarget) -> None:
    x, y = centre(game.framebuffer)
    assert game.step([PointerEvent(x, y, 4), PointerEvent(x, y, 0)]).reward == 0.0
    assert game.step([PointerEvent(x, y, 2), PointerEvent(x, y, 0)]).reward == 0.0
    assert game.step([PointerEvent(x, y, 3)]).reward == 1.0


def test_two_clicks_in_one_frame_can_score_twice(game: ClickTarget) -> None:
    first = centre(game.framebuffer)
    second_target = ClickTarget()
    second_target.reset(11)
    second_target.step(click(*first))
    second = centre(second_target.framebuffer)
    result = game.step([*click(*first), *click(*second)])
    assert result.reward == 2.0


def test_the_target_jumps_after_its_time_is_up(game: ClickTarget) -> None:
    before = target(game.framebuffer)
    for _ in range(CLICK_TARGET_FRAMES - 1):
        result = game.step([])
        assert result.reward == 0.0
        assert target(game.framebuffer) == before
    result = game.step([])
    assert result.reward == -1.0
    assert result.info["misses"] == 1
    assert target(game.framebuffer) != before
    # A hit restarts the clock.
    for _ in range(CLICK_TARGET_FRAMES - 10):
        game.step([])
    game.step(click(*centre(game.framebuffer)))
    for _ in range(CLICK_TARGET_FRAMES - 1):
        assert game.step([]).reward == 0.0
    assert game.step([]).reward == -1.0  # every target is shown for the same frames


def test_the_episode_ends_after_its_misses(game: ClickTarget) -> None:
    rewards = []
    result = StepResult()
    while not result.done:
        result = game.step([])
        rewards.append(result.reward)
    assert len(rewards) == CLICK_TARGET_FRAMES * CLICK_MAX_MISSES
    assert rewards.count(-1.0) == CLICK_MAX_MISSES
    assert result.info["misses"] == CLICK_MAX_MISSES


def test_a_clicking_agent_plays_a_whole_episode(game: ClickTarget) -> None:
    result = StepResult()
    frames = 0
    while not result.done:
        result = game.step(click(*centre(game.framebuffer)) if frames % 3 == 0 else [])
        frames += 1
    assert frames == CLICK_MAX_FRAMES
    assert result.info == {
        "score": CLICK_MAX_FRAMES // 3, "hits": CLICK_MAX_FRAMES // 3, "misses": 0,
        "frame": CLICK_MAX_FRAMES,
    }


# Both --------------------------------------------------------------------------------


@pytest.mark.parametrize("game_class", [Catch, ClickTarget])
def test_a_finished_episode_stays_as_it_ended(game_class: type[Catch | ClickTarget]) -> None:
    runtime = game_class()
    runtime.reset(2)
    result = StepResult()
    while not result.done:
        result = runtime.step([])
    frame, info = runtime.framebuffer.copy(), result.info
    x, y = runtime.width // 2, runtime.height // 2
    for pressed in [True, False] * 150:  # keys and clicks all over: nothing moves
        events: list[InputEvent] = [KeyEvent("Right", pressed), PointerEvent(x, y, int(pressed))]
        if isinstance(runtime, ClickTarget):
            events.append(PointerEvent(*runtime.target_centre, int(pressed)))
        assert runtime.step(events) == StepResult(0.0, True, info, frames=0)
        assert np.array_equal(runtime.framebuffer, frame)
    runtime.reset(2)
    assert runtime.step([]).done is False


def test_a_subclass_that_redefines_step_is_advanced_through_its_step() -> None:
    """The remote advances every runtime (1 frame in real time): a subclass's own step
    must run then, not be skipped by the faster advance it inherits."""
    calls: list[int] = []

    class Counting(Catch):
        def step(self, events):  # type: ignore[no-untyped-def]
            calls.append(1)
            return super().step(events)

    runtime = Counting()
    runtime.reset(1)
    result = runtime.advance([], 3)
    assert len(calls) == result.frames == 3
    plain = Catch()
    plain.reset(1)
    plain.advance([], 3)
    assert np.array_equal(runtime.framebuffer, plain.framebuffer)  # same game, same frames


# Drawing only what changed ------------------------------------------------------------------


def _random_events(game: Runtime, rng: np.random.Generator) -> list[Any]:
    """Now and then a key or a click somewhere (a player's, on the Duel), as agents send."""
    if rng.random() < 0.7:
        return []
    if isinstance(game, ClickTarget):
        x, y = (game.target_centre if rng.random() < 0.3 else
                (int(rng.integers(game.width)), int(rng.integers(game.height))))
        return [PointerEvent(x, y, 1), PointerEvent(x, y, 0)]
    key = game.keys[int(rng.integers(len(game.keys)))]
    event = KeyEvent(key, bool(rng.integers(2)))
    return [PlayerEvent(int(rng.integers(2)), event)] if isinstance(game, Duel) else [event]


@pytest.mark.parametrize("game_class", [Catch, ClickTarget, Duel])
def test_frames_drawn_in_part_are_whole_redraws_and_damage_covers_every_change(
    game_class: type[Runtime],
) -> None:
    """A built-in game redraws only what changed and reports it (take_damage) so the VNC
    server skips its compare: every frame must equal the game's whole redraw of the same
    state, and every pixel that changed must lie in a reported rectangle."""
    game = game_class()
    rng = np.random.default_rng(5)
    game.reset(3)
    assert game.take_damage() is None  # a whole new frame: the server compares it
    previous = game.framebuffer.copy()
    partial_frames = 0
    for frame in range(4000):
        frames = 1 if frame % 7 else int(rng.integers(2, 6))  # lockstep advances too
        result = game.advance(_random_events(game, rng), frames)
        if result.done:
            game.reset(int(rng.integers(1000)))
            assert game.take_damage() is None
            previous = game.framebuffer.copy()
            continue
        damage = game.take_damage()
        assert damage is not None, f"frame {frame}: a partial redraw reports its damage"
        partial_frames += 1
        covered = np.zeros(game.framebuffer.shape[:2], bool)
        for x, y, w, h in damage:
            assert 0 <= x and 0 <= y and x + w <= game.width and y + h <= game.height, damage
            covered[y : y + h, x : x + w] = True
        changed = (game.framebuffer != previous).any(axis=2)
        assert not (changed & ~covered).any(), f"frame {frame}: a change outside the damage"
        drawn = game.framebuffer.copy()
        game._drawn = None  # type: ignore[attr-defined]  # redraw the same state whole
        game._draw()  # type: ignore[attr-defined]
        assert np.array_equal(drawn, game.framebuffer), f"frame {frame} differs from a redraw"
        game.take_damage()
        previous = drawn
    assert partial_frames > 3000


def test_damage_nobody_takes_does_not_grow() -> None:
    """A game played without a remote (a gymnasium wrapper, a benchmark) is never asked
    for its damage: past MAX_DAMAGE_RECTS it is "unknown", not an ever longer list."""
    from runtimes.damage import MAX_DAMAGE_RECTS

    game = Catch()
    game.reset(1)
    game.take_damage()
    for _ in range(10 * MAX_DAMAGE_RECTS):
        game.advance([KeyEvent("Left", True)], 1)
        assert game.damage.rects is None or len(game.damage.rects) <= MAX_DAMAGE_RECTS
    assert game.take_damage() is None and game.take_damage() == []
