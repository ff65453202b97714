"""What the action wrappers share, one env or many: key combinations, click points and
spaces, pointer boxes, each turned into VNC events.

Holds the pieces both :mod:`remotes.wrappers` (one env) and :mod:`remotes.vector_wrappers`
(a vector env) build on, so neither imports the other's module for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from gymnasium import spaces

from vncdriver import keysyms

Event = tuple[Any, ...]

#: The action of a click space built with ``noop=True`` that sends no event: 0, as ALE's
#: NOOP and MiniWoB++'s first action are, so the points keep their order from 1.
NOOP: Final = 0


def key_combos(combos: Sequence[Sequence[str]]) -> list[frozenset[str]]:
    """Canonical key names of each combination (``["left"]`` -> ``{"Left"}``)."""
    if not combos:
        raise ValueError("DiscreteKeys needs at least one key combination, e.g. [[]]")
    return [frozenset(keysyms.canonical(k) for k in combo) for combo in combos]


#: The name of the held keys' part of a snapshot (remotes.states.SnapshotPart), one
#: env's or a vector env's: a state of either restores on the other.
HELD_KEYS: Final = "held_keys"


def keep_with_snapshots(env: Any, part: Any) -> None:
    """Have ``env``'s snapshots carry ``part``'s state, if ``env`` is a remote env (any
    other env's states are its own affair)."""
    keep = getattr(env.unwrapped, "keep_with_snapshots", None)
    if keep is not None:
        keep(part)


def held_keys(value: Any) -> frozenset[str]:
    """The held keys a snapshot carries, checked: canonical key names."""
    if not isinstance(value, tuple | list | set | frozenset) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"a snapshot's held keys are key names such as ('Left',), not {value!r}")
    return frozenset(keysyms.canonical(k) for k in value)


def key_events(held: frozenset[str], wanted: frozenset[str]) -> list[Event]:
    """Release what is held and not wanted, press what is wanted and not held."""
    events: list[Event] = [("KeyEvent", k, False) for k in sorted(held - wanted)]
    events += [("KeyEvent", k, True) for k in sorted(wanted - held)]
    return events


def press(
    combos: Sequence[frozenset[str]], held: frozenset[str], action: Any
) -> tuple[frozenset[str], list[Event]]:
    """Action ``action`` of a key-combination space with ``held`` down: the keys it holds
    and the events that get there (:func:`key_events`)."""
    wanted = combos[int(action)]
    return wanted, key_events(held, wanted)


def click_points(points: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    if not points:
        raise ValueError("DiscreteClicks needs at least one point")
    return [(int(x), int(y)) for x, y in points]


def click_events(x: int, y: int, button: int) -> list[Event]:
    return [("PointerEvent", x, y, 0), ("PointerEvent", x, y, button), ("PointerEvent", x, y, 0)]


def click_space(points: Sequence[tuple[int, int]], noop: bool) -> spaces.Discrete:
    """One action per point, and one more (:data:`NOOP`, first) with ``noop``."""
    return spaces.Discrete(len(points) + int(noop))


def click_action(
    points: Sequence[tuple[int, int]], button: int, noop: bool, action: Any
) -> list[Event]:
    """The events of one click action: none for the no-op; a ValueError names an action
    out of range (a negative index would otherwise click a point from the end)."""
    index = int(action)
    if not 0 <= index < len(points) + int(noop):
        raise ValueError(f"action {action!r} is not in {click_space(points, noop)}")
    if noop:
        if index == NOOP:
            return []  # the step still advances: a frame in real time, frameskip in lockstep
        index -= 1
    return click_events(*points[index], button)


def screen_size(env: Any) -> tuple[int, int]:
    """(height, width) of one env's observations (vector envs too)."""
    space = getattr(env, "single_observation_space", env.observation_space)
    height, width = space.shape[:2]
    return int(height), int(width)


def pointer_box(height: int, width: int) -> spaces.Box:
    return spaces.Box(
        np.array([0, 0, 0], np.float32), np.array([width - 1, height - 1, 1], np.float32),
        dtype=np.float32,
    )


def pointer_events(space: spaces.Box, action: np.ndarray) -> list[Event]:
    x, y, button = np.clip(np.asarray(action, np.float32), space.low, space.high)
    return [("PointerEvent", int(round(x)), int(round(y)), int(button > 0.5))]
