"""The action wrappers of :mod:`remotes.wrappers` for vector envs: each env's action is
translated as the single-env wrapper would, into that env's list of VNC events.

``DiscreteKeys(vector_env, combos)`` gives a :class:`VectorDiscreteKeys` (and so on), so
the same line works for one remote and for many. Held keys are tracked per env and
forgotten when its episode ends: the remote releases everything at a reset, and under
``NEXT_STEP`` autoreset the step after an episode's end does not send that env's action.
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
    key_events,
    pointer_box,
    pointer_events,
    screen_size,
)


class VectorDiscreteKeys(VectorActionWrapper):  # type: ignore[type-arg]
    """``MultiDiscrete([len(combos)] * num_envs)``: env *i*'s action holds ``combos[a_i]``.
    Each env's held keys go with its snapshots (``clone_state``, ``set_states``, ``fork``)."""

    #: Its part of a snapshot (:class:`~remotes.states.SnapshotPart`).
    snapshot_name = HELD_KEYS

    def __init__(self, env: gymnasium.vector.VectorEnv, combos: Sequence[Sequence[str]]) -> None:
        super().__init__(env)
        self.combos = key_combos(combos)
        n = self.num_envs
        self.single_action_space = spaces.Discrete(len(self.combos))
        self.action_space = spaces.MultiDiscrete([len(self.combos)] * n)
        self._held = [frozenset[str]()] * n
        self._resetting = np.zeros(n, bool)
        self._next_step = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP) in (
            AutoresetMode.NEXT_STEP, AutoresetMode.NEXT_STEP.value,
        )
        keep_with_snapshots(env, self)

    def snapshot_value(self, index: int) -> tuple[str, ...]:
        if self._resetting[index]:  # (the env refuses first; a wrapper over another env)
            raise ValueError(
                f"env {index}'s episode ended in the last step: its next step starts a new one "
                "and drops its action; clone before the end or after that step"
            )
        return tuple(sorted(self._held[index]))

    def restore_value(self, index: int, value: Any) -> None:
        """Env ``index`` runs the restored episode, holding what it held at the clone."""
        self._held[index] = held_keys(value)
        self._resetting[index] = False

    def reset(self, **kwargs: Any) -> Any:
        self._held = [frozenset[str]()] * self.num_envs
        self._resetting[:] = False
        return super().reset(**kwargs)

    def actions(self, actions: Any) -> list[list[Event]]:
        chosen = np.asarray(actions).reshape(-1)
        if chosen.shape != (self.num_envs,) or not self.action_space.contains(chosen.astype(np.int64)):
            raise ValueError(f"actions {actions!r} are not in {self.action_space}")
        out: list[list[Event]] = []
        for i, action in enumerate(chosen.tolist()):
            if self._resetting[i]:  # this step resets env i and drops its action
                out.append([])
                continue
            wanted = self.combos[action]
            out.append(key_events(self._held[i], wanted))
            self._held[i] = wanted
        return out

    def step(self, actions: Any) -> Any:
        obs, rewards, terminated, truncated, infos = super().step(actions)
        ended = np.logical_or(terminated, truncated)
        for i in np.flatnonzero(ended):
            self._held[i] = frozenset()
        self._resetting = ended.copy() if self._next_step else np.zeros(self.num_envs, bool)
        return obs, rewards, terminated, truncated, infos


class VectorDiscreteClicks(VectorActionWrapper):  # type: ignore[type-arg]
    """``MultiDiscrete([len(points)] * num_envs)``: env *i* clicks at ``points[a_i]``; with
    ``noop=True``, ``MultiDiscrete([len(points) + 1] * num_envs)``: 0 sends env *i*
    nothing, ``a_i > 0`` clicks at ``points[a_i - 1]``."""

    def __init__(
        self, env: gymnasium.vector.VectorEnv, points: Sequence[tuple[int, int]], button: int = 1,
        *, noop: bool = False,
    ) -> None:
        super().__init__(env)
        self.points, self.button, self.noop = click_points(points), button, noop
        self.single_action_space = single = click_space(self.points, noop)
        self.action_space = spaces.MultiDiscrete([int(single.n)] * self.num_envs)

    def actions(self, actions: Any) -> list[list[Event]]:
        chosen = np.asarray(actions).reshape(-1)
        if chosen.shape != (self.num_envs,):
            raise ValueError(f"actions {actions!r} are not in {self.action_space}")
        return [click_action(self.points, self.button, self.noop, a) for a in chosen.tolist()]


class VectorPointerBox(VectorActionWrapper):  # type: ignore[type-arg]
    """``Box`` of shape (num_envs, 3): env *i* moves to (x, y), button down while > 0.5."""

    def __init__(self, env: gymnasium.vector.VectorEnv) -> None:
        super().__init__(env)
        screen = getattr(env.unwrapped, "screen_space", None)  # (a Dict observation's screen)
        height, width = screen.shape[:2] if screen is not None else screen_size(env)
        self.single_action_space = box = pointer_box(height, width)
        n = self.num_envs
        self.action_space = spaces.Box(np.tile(box.low, (n, 1)), np.tile(box.high, (n, 1)), dtype=np.float32)

    def actions(self, actions: Any) -> list[list[Event]]:
        box = self.single_action_space
        assert isinstance(box, spaces.Box)
        return [pointer_events(box, a) for a in np.asarray(actions, np.float32).reshape(self.num_envs, 3)]
