"""Action wrappers that turn simple action spaces into VNC events.

Holds :class:`DiscreteKeys` (``Discrete(n)`` -> a held key combination),
:class:`DiscreteClicks` (``Discrete(n)`` -> a click at one of n points, or with
``noop=True`` ``Discrete(n + 1)`` whose action :data:`NOOP` sends nothing) and
:class:`PointerBox` (``Box`` (x, y, button) -> pointer moves and clicks). Each overrides
gymnasium's one hook, :meth:`action`. Given a :class:`~remotes.vector.RemoteVectorEnv`
(any gymnasium ``VectorEnv``) each gives its vector form instead
(:mod:`remotes.vector_wrappers`, named by ``vector_form``), which translates every env's
action the same way, through the same functions (:mod:`remotes.action_maps`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces

from . import vector_wrappers
from .action_maps import (
    HELD_KEYS,
    NOOP,
    Event,
    click_action,
    click_points,
    click_space,
    held_keys,
    keep_with_snapshots,
    key_combos,
    pointer_box,
    pointer_events,
    press,
    screen_size,
)

__all__ = ["NOOP", "DiscreteClicks", "DiscreteKeys", "PointerBox"]


class _OneOrMany:
    """Made over a vector env, a wrapper is its vector form instead (``vector_form``, a
    class of :mod:`remotes.vector_wrappers`), so one line serves one remote and many."""

    vector_form: ClassVar[str]

    def __new__(cls, env: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(env, gymnasium.vector.VectorEnv):
            return getattr(vector_wrappers, cls.vector_form)(env, *args, **kwargs)
        return super().__new__(cls)


class DiscreteKeys(_OneOrMany, gymnasium.ActionWrapper[np.ndarray, np.int64, list[Event]]):
    """``Discrete(len(combos))``: action *i* holds exactly the keys of ``combos[i]``.

    Keys stay held across steps while the chosen combination keeps them, as a player's
    fingers would: ``DiscreteKeys(env, [[], ["left"], ["right"], ["space"]])``. Switching
    combination releases the keys it no longer holds and presses the new ones. Which keys
    it holds decides what the next action sends, so a remote env's snapshots carry them
    (``clone_state`` saves them, ``restore_state`` sets them back: docs/snapshots.md).
    """

    #: Its part of a snapshot (:class:`~remotes.states.SnapshotPart`).
    snapshot_name = HELD_KEYS
    vector_form = "VectorDiscreteKeys"

    def __init__(self, env: gymnasium.Env[Any, Any], combos: Sequence[Sequence[str]]) -> None:
        """One action per key combination.

        Args:
            env: a remote env (or a wrapper of one) taking lists of VNC events.
            combos: the key names each action holds (``[]``: none); names as
                :mod:`vncdriver.keysyms` reads them.

        Raises:
            ValueError: no combination, or one names an unknown key
                (:class:`~vncdriver.errors.UnknownKey`).
        """
        super().__init__(env)
        self.combos = key_combos(combos)
        self.action_space = spaces.Discrete(len(self.combos))
        self._held: frozenset[str] = frozenset()
        keep_with_snapshots(env, self)

    def snapshot_value(self, index: int) -> tuple[str, ...]:
        """The keys held now: a clone saves them, so a restore holds them again.

        Args:
            index: unused (one env); the vector form's env index.

        Returns:
            The held key names, sorted.
        """
        return tuple(sorted(self._held))

    def restore_value(self, index: int, value: Any) -> None:
        """Hold what was held at the clone, so the next action sends only the difference.

        Args:
            index: unused (one env).
            value: what :meth:`snapshot_value` returned.
        """
        self._held = held_keys(value)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Forget the held keys (the remote releases every key on reset) and reset.

        Args:
            **kwargs: ``seed`` and ``options``, for the env's :meth:`reset`.

        Returns:
            The env's first observation and info.
        """
        self._held = frozenset()  # the remote releases everything on reset
        return super().reset(**kwargs)

    def action(self, action: np.int64 | int) -> list[Event]:
        if not self.action_space.contains(np.int64(action)):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        self._held, events = press(self.combos, self._held, action)
        return events


class DiscreteClicks(_OneOrMany, gymnasium.ActionWrapper[np.ndarray, np.int64, list[Event]]):
    """``Discrete(len(points))``: action *i* clicks the left button at ``points[i]``.

    With ``noop=True`` it is ``Discrete(len(points) + 1)``: action :data:`NOOP` (0) sends
    no event — the agent waits a step, as it must while a page animates or loads — and
    action *i* clicks ``points[i - 1]``. ``DiscreteClicks.grid(env, columns, rows)``
    spreads the points over the screen.
    """

    vector_form = "VectorDiscreteClicks"

    def __init__(
        self, env: gymnasium.Env[Any, Any], points: Sequence[tuple[int, int]], button: int = 1,
        *, noop: bool = False,
    ) -> None:
        """One action per point to click.

        Args:
            env: a remote env (or a wrapper of one) taking lists of VNC events.
            points: the (x, y) screen pixel each action clicks.
            button: the button mask a click presses (1: left).
            noop: add action 0, which sends nothing.
        """
        super().__init__(env)
        self.points, self.button, self.noop = click_points(points), button, noop
        self.action_space = click_space(self.points, noop)

    @classmethod
    def grid(cls, env: Any, columns: int, rows: int, *, noop: bool = False) -> DiscreteClicks:
        """The centres of a ``columns`` x ``rows`` grid over the screen, row by row.

        Args:
            env: a remote env (its screen size decides the points).
            columns: points across.
            rows: points down.
            noop: add action 0, which sends nothing.

        Returns:
            A :class:`DiscreteClicks` of ``columns * rows`` points (``+ 1`` with ``noop``).
        """
        height, width = screen_size(env)
        xs = (np.arange(columns) + 0.5) * width / columns
        ys = (np.arange(rows) + 0.5) * height / rows
        return cls(env, [(int(x), int(y)) for y in ys for x in xs], noop=noop)

    def action(self, action: np.int64 | int) -> list[Event]:
        return click_action(self.points, self.button, self.noop, action)


class PointerBox(_OneOrMany, gymnasium.ActionWrapper[np.ndarray, np.ndarray, list[Event]]):
    """``Box(low=[0, 0, 0], high=[W-1, H-1, 1])``: move to (x, y), button down while > 0.5."""

    vector_form = "VectorPointerBox"

    def __init__(self, env: gymnasium.Env[Any, Any]) -> None:
        """A pointer box over ``env``'s screen.

        Args:
            env: a remote env (or a wrapper of one); its screen size bounds the box.
        """
        super().__init__(env)
        self.action_space = pointer_box(*screen_size(env))

    def action(self, action: np.ndarray) -> list[Event]:
        assert isinstance(self.action_space, spaces.Box)
        return pointer_events(self.action_space, action)
