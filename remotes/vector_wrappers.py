"""The action wrappers of :mod:`remotes.wrappers` for vector envs: each env's action is
translated as the single-env wrapper would, into that env's list of VNC events.

``DiscreteKeys(vector_env, combos)`` gives a :class:`VectorDiscreteKeys` (and so on), so
the same line works for one remote and for many. Held keys are tracked per env and
forgotten when its episode ends: the remote releases everything at a reset, and under
``NEXT_STEP`` autoreset the step after an episode's end does not send that env's action.

Each is an :class:`EachEnv`: it checks the batch once and overrides one hook,
:meth:`EachEnv.env_action`, one env's action into its events, through the functions the
single-env wrapper calls (:mod:`remotes.action_maps`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorActionWrapper

from .action_maps import (
    HELD_KEYS,
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


class EachEnv(VectorActionWrapper):  # type: ignore[type-arg]
    """A vector action wrapper that translates each env's action on its own: a subclass
    sets its spaces with :meth:`_batch` and overrides :meth:`env_action`; :meth:`actions`
    splits the batch (:meth:`_rows`, checked) and asks it env by env."""

    def _batch(self, single: spaces.Discrete | spaces.Box) -> None:
        """``single`` for one env, and the batch's space of ``num_envs`` of them."""
        self.single_action_space = single
        n = self.num_envs
        if isinstance(single, spaces.Box):
            self.action_space = spaces.Box(
                np.tile(single.low, (n, 1)), np.tile(single.high, (n, 1)), dtype=np.float32)
        else:
            self.action_space = spaces.MultiDiscrete([int(single.n)] * n)

    def _rows(self, actions: Any) -> Sequence[Any]:
        """One action per env (a ValueError names a batch of another shape)."""
        chosen = np.asarray(actions).reshape(-1)
        if chosen.shape != (self.num_envs,) or not self._allowed(chosen):
            raise ValueError(f"actions {actions!r} are not in {self.action_space}")
        return chosen.tolist()  # type: ignore[no-any-return]

    def _allowed(self, chosen: np.ndarray) -> bool:
        """Whether a batch of the right shape may be sent (each env's own check aside)."""
        return True

    def actions(self, actions: Any) -> list[list[Event]]:
        return [self.env_action(i, action) for i, action in enumerate(self._rows(actions))]

    def env_action(self, index: int, action: Any) -> list[Event]:
        """Env ``index``'s action as its VNC events.

        Args:
            index: the env.
            action: its row of the batch, already checked against the space.

        Returns:
            The events to send it (none for an env whose action this step drops).
        """
        raise NotImplementedError


class VectorDiscreteKeys(EachEnv):
    """``MultiDiscrete([len(combos)] * num_envs)``: env *i*'s action holds ``combos[a_i]``.
    Each env's held keys go with its snapshots (``clone_state``, ``set_states``, ``fork``).

    Args:
        env: a remote vector env (or a wrapper of one) taking lists of VNC events.
        combos: the key names each action holds, as :class:`~remotes.wrappers.DiscreteKeys`'s.
    """

    #: Its part of a snapshot (:class:`~remotes.states.SnapshotPart`).
    snapshot_name = HELD_KEYS

    def __init__(self, env: gymnasium.vector.VectorEnv, combos: Sequence[Sequence[str]]) -> None:
        super().__init__(env)
        self.combos = key_combos(combos)
        n = self.num_envs
        self._batch(spaces.Discrete(len(self.combos)))
        self._held = [frozenset[str]()] * n
        self._resetting = np.zeros(n, bool)
        self._next_step = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP) in (
            AutoresetMode.NEXT_STEP, AutoresetMode.NEXT_STEP.value,
        )
        keep_with_snapshots(env, self)

    def snapshot_value(self, index: int) -> tuple[str, ...]:
        """The keys env ``index`` holds now: a clone saves them.

        Args:
            index: the env.

        Returns:
            Its held key names, sorted.

        Raises:
            ValueError: env ``index``'s episode ended in the last step (its next step starts a
                new one and drops its action, so no clone of it would replay).
        """
        if self._resetting[index]:  # (the env refuses first; a wrapper over another env)
            raise ValueError(
                f"env {index}'s episode ended in the last step: its next step starts a new one "
                "and drops its action; clone before the end or after that step"
            )
        return tuple(sorted(self._held[index]))

    def restore_value(self, index: int, value: Any) -> None:
        """Env ``index`` runs the restored episode, holding what it held at the clone.

        Args:
            index: the env restored.
            value: what :meth:`snapshot_value` returned.
        """
        self._held[index] = held_keys(value)
        self._resetting[index] = False

    def reset(self, **kwargs: Any) -> Any:
        """Forget every env's held keys (the remotes release every key on reset) and reset.

        Args:
            **kwargs: ``seed`` and ``options``, for the vector env's :meth:`reset`.

        Returns:
            The vector env's observations and info.
        """
        self._held = [frozenset[str]()] * self.num_envs
        self._resetting[:] = False
        return super().reset(**kwargs)

    def _allowed(self, chosen: np.ndarray) -> bool:
        return self.action_space.contains(chosen.astype(np.int64))

    def env_action(self, index: int, action: Any) -> list[Event]:
        if self._resetting[index]:  # this step resets env i and drops its action
            return []
        self._held[index], events = press(self.combos, self._held[index], action)
        return events

    def step(self, actions: Any) -> Any:
        """Step, then forget the keys of envs whose episode ended (their remote released them).

        Args:
            actions: one combination index per env.

        Returns:
            The vector env's ``(observations, rewards, terminated, truncated, infos)``.
        """
        obs, rewards, terminated, truncated, infos = super().step(actions)
        ended = np.logical_or(terminated, truncated)
        for i in np.flatnonzero(ended):
            self._held[i] = frozenset()
        self._resetting = ended.copy() if self._next_step else np.zeros(self.num_envs, bool)
        return obs, rewards, terminated, truncated, infos


class VectorDiscreteClicks(EachEnv):
    """``MultiDiscrete([len(points)] * num_envs)``: env *i* clicks at ``points[a_i]``; with
    ``noop=True``, ``MultiDiscrete([len(points) + 1] * num_envs)``: 0 sends env *i*
    nothing, ``a_i > 0`` clicks at ``points[a_i - 1]``.

    Args:
        env: a remote vector env (or a wrapper of one) taking lists of VNC events.
        points: the (x, y) screen pixel each action clicks.
        button: the button mask a click presses (1: left).
        noop: add action 0, which sends nothing.
    """

    def __init__(
        self, env: gymnasium.vector.VectorEnv, points: Sequence[tuple[int, int]], button: int = 1,
        *, noop: bool = False,
    ) -> None:
        super().__init__(env)
        self.points, self.button, self.noop = click_points(points), button, noop
        self._batch(click_space(self.points, noop))

    def env_action(self, index: int, action: Any) -> list[Event]:
        return click_action(self.points, self.button, self.noop, action)


class VectorPointerBox(EachEnv):
    """``Box`` of shape (num_envs, 3): env *i* moves to (x, y), button down while > 0.5."""

    def __init__(self, env: gymnasium.vector.VectorEnv) -> None:
        super().__init__(env)
        screen = getattr(env.unwrapped, "screen_space", None)  # (a Dict observation's screen)
        height, width = screen.shape[:2] if screen is not None else screen_size(env)
        self._batch(pointer_box(height, width))

    def _rows(self, actions: Any) -> Sequence[Any]:
        return np.asarray(actions, np.float32).reshape(self.num_envs, 3)  # type: ignore[return-value]

    def env_action(self, index: int, action: Any) -> list[Event]:
        box = self.single_action_space
        assert isinstance(box, spaces.Box)
        return pointer_events(box, action)
