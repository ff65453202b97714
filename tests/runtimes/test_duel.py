"""builtin.Duel-v0: the two-player game keeps the runtime contract, moves each paddle by
its own player's input only, and pays each player its own reward."""

from __future__ import annotations

import numpy as np
import pytest

from runtimes import registry
from runtimes.base import KeyEvent, PlayerEvent, StepResult, split_players
from runtimes.compliance import RuntimeCompliance
from runtimes.duel import (
    DUEL_BALL_SIZE,
    DUEL_PADDLE_HEIGHT,
    DUEL_POINTS_TO_WIN,
    Duel,
)


class TestDuelCompliance(RuntimeCompliance):
    env_id = "builtin.Duel-v0"


def _track(game: Duel, player: int) -> list[PlayerEvent]:
    """Keys that move ``player``'s paddle towards the ball."""
    centre = game.paddle_y[player] + DUEL_PADDLE_HEIGHT / 2
    ball = game.ball_y + DUEL_BALL_SIZE / 2
    up, down = ball < centre - 2, ball > centre + 2
    return [PlayerEvent(player, KeyEvent("Up", up)), PlayerEvent(player, KeyEvent("Down", down))]


def test_registered_with_two_players() -> None:
    runtime = registry.make("builtin.Duel-v0")
    assert runtime.players == 2
    assert runtime.describe()["players"] == 2
    assert registry.make("builtin.Catch-v0").describe()["players"] == 1


def test_each_player_moves_only_its_own_paddle() -> None:
    game = Duel()
    game.reset(seed=1)
    start = list(game.paddle_y)
    game.advance([PlayerEvent(1, KeyEvent("Up", True))], 4)
    assert game.paddle_y[0] == start[0]
    assert game.paddle_y[1] < start[1]
    game.advance([KeyEvent("Down", True)], 4)  # a bare event is player 0's
    assert game.paddle_y[0] > start[0]


def test_a_player_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="player 2 is not one of 0..1"):
        split_players([PlayerEvent(2, KeyEvent("Up", True))], 2)


def test_rewards_are_per_player_and_opposite() -> None:
    """Player 0 tracks the ball, player 1 stands still: player 0 wins, and each point is
    +1 for one player and -1 for the other."""
    game = Duel()
    game.reset(seed=7)
    totals = np.zeros(2)
    result = StepResult()
    while not game.done:
        result = game.advance(_track(game, 0), 1)
        assert result.rewards is not None
        assert result.reward == result.rewards[0]
        assert sum(result.rewards) == 0
        totals += result.rewards
    assert result.info["points"] == [DUEL_POINTS_TO_WIN, 0]
    assert totals.tolist() == [DUEL_POINTS_TO_WIN, -DUEL_POINTS_TO_WIN]


def test_rewards_add_up_over_an_advance() -> None:
    total = StepResult(frames=0)
    total.add(StepResult(1.0, rewards=(1.0, -1.0)))
    total.add(StepResult(0.0, rewards=(0.0, 0.0)))
    total.add(StepResult(-1.0, rewards=(-1.0, 1.0)))
    total.add(StepResult(0.0))  # a single-player result keeps the sums
    assert total.rewards == (0.0, 0.0) and total.frames == 4


def test_same_seed_and_joint_actions_same_frames() -> None:
    def play(seed: int) -> list[bytes]:
        game = Duel()
        game.reset(seed)
        frames = []
        for _ in range(400):
            game.advance([*_track(game, 0), *_track(game, 1)], 2)
            frames.append(game.framebuffer.tobytes())
        return frames

    assert play(3) == play(3)
    assert play(3) != play(4)
