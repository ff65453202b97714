"""Action wrappers that turn simple action spaces into VNC events.

Holds :class:`DiscreteKeys` (``Discrete(n)`` -> a held key combination),
:class:`DiscreteClicks` (``Discrete(n)`` -> a click at one of n points) and
:class:`PointerBox` (``Box`` (x, y, button) -> pointer moves and clicks). Each overrides
gymnasium's one hook, :meth:`action`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from vncdriver import keysyms

Event = tuple[Any, ...]


class DiscreteKeys(gymnasium.ActionWrapper[np.ndarray, np.int64, list[Event]]):
    """``Discrete(len(combos))``: action *i* holds exactly the keys of ``combos[i]``.

    Keys stay held across steps while the chosen combination keeps them, as a player's
    fingers would: ``DiscreteKeys(env, [[], ["left"], ["right"], ["space"]])``. Switching
    combination releases the keys it no longer holds and presses the new ones.
    """

    def __init__(self, env: gymnasium.Env[Any, Any], combos: Sequence[Sequence[str]]) -> None:
        super().__init__(env)
        if not combos:
            raise ValueError("DiscreteKeys needs at least one key combination, e.g. [[]]")
        self.combos = [frozenset(keysyms.canonical(k) for k in combo) for combo in combos]
        self.action_space = spaces.Discrete(len(self.combos))
        self._held: frozenset[str] = frozenset()

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._held = frozenset()  # the remote releases everything on reset
        return super().reset(**kwargs)

    def action(self, action: np.int64 | int) -> list[Event]:
        if not self.action_space.contains(np.int64(action)):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        wanted = self.combos[int(action)]
        events: list[Event] = [("KeyEvent", k, False) for k in sorted(self._held - wanted)]
        events += [("KeyEvent", k, True) for k in sorted(wanted - self._held)]
        self._held = wanted
        return events


class DiscreteClicks(gymnasium.ActionWrapper[np.ndarray, np.int64, list[Event]]):
    """``Discrete(len(points))``: action *i* clicks the left button at ``points[i]``.

    ``DiscreteClicks.grid(env, columns, rows)`` spreads the points over the screen.
    """

    def __init__(
        self, env: gymnasium.Env[Any, Any], points: Sequence[tuple[int, int]], button: int = 1
    ) -> None:
        super().__init__(env)
        if not points:
            raise ValueError("DiscreteClicks needs at least one point")
        self.points = [(int(x), int(y)) for x, y in points]
        self.button = button
        self.action_space = spaces.Discrete(len(self.points))

    @classmethod
    def grid(cls, env: gymnasium.Env[Any, Any], columns: int, rows: int) -> DiscreteClicks:
        height, width = env.observation_space.shape[:2]  # type: ignore[index]
        xs = (np.arange(columns) + 0.5) * width / columns
        ys = (np.arange(rows) + 0.5) * height / rows
        return cls(env, [(int(x), int(y)) for y in ys for x in xs])

    def action(self, action: np.int64 | int) -> list[Event]:
        x, y = self.points[int(action)]
        return [("PointerEvent", x, y, 0), ("PointerEvent", x, y, self.button), ("PointerEvent", x, y, 0)]


class PointerBox(gymnasium.ActionWrapper[np.ndarray, np.ndarray, list[Event]]):
    """``Box(low=[0, 0, 0], high=[W-1, H-1, 1])``: move to (x, y), button down while > 0.5."""

    def __init__(self, env: gymnasium.Env[Any, Any]) -> None:
        super().__init__(env)
        height, width = env.observation_space.shape[:2]  # type: ignore[index]
        self.action_space = spaces.Box(
            np.array([0, 0, 0], np.float32),
            np.array([width - 1, height - 1, 1], np.float32),
            dtype=np.float32,
        )

    def action(self, action: np.ndarray) -> list[Event]:
        space = self.action_space
        assert isinstance(space, spaces.Box)
        low, high = space.low, space.high
        x, y, button = np.clip(np.asarray(action, np.float32), low, high)
        return [("PointerEvent", int(round(x)), int(round(y)), int(button > 0.5))]
