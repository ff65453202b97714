"""The VNC action space: an action is a list of keyboard and mouse events.

Holds :class:`VNCActionSpace`. Events use Universe's vocabulary:
``("KeyEvent", key, down)`` with an X keysym name (or alias), and
``("PointerEvent", x, y, buttonmask)``. Keys stay pressed until released, as in VNC.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from gymnasium import spaces

from vncdriver import keysyms
from vncdriver.errors import UnknownKey

#: Events in one sampled action: a few, as a person might do in a frame.
MAX_SAMPLED_EVENTS: Final = 3

#: Uniform numbers one sampled event uses (kind, key, down, x, y, button bits), and one
#: sample in all (the event count first).
_EVENT_DRAWS: Final = 6
_SAMPLE_DRAWS: Final = 1 + _EVENT_DRAWS * MAX_SAMPLED_EVENTS

Event = tuple[Any, ...]


def _pick(u: float, n: int) -> int:
    """A uniform integer in [0, n) from a uniform float ``u`` in [0, 1)."""
    return min(int(u * n), n - 1)


class VNCActionSpace(spaces.Space[list[Event]]):
    """Lists of key and pointer events a remote accepts.

    Args:
        keys: the X keysym names the remote reacts to (from ``v0.env.describe``).
        width: the screen's width, for pointer events.
        height: the screen's height.
        buttons: the button mask bits the remote uses (0: no pointer events are sampled).
        seed: seeds :meth:`sample`'s generator (gymnasium's).
        any_key: the remote takes any X key (a desktop), ``keys`` being the common ones
            :meth:`sample` draws.

    Raises:
        UnknownKey: a name in ``keys`` is no key.
    """

    def __init__(
        self,
        keys: Sequence[str],
        width: int,
        height: int,
        buttons: int = 0,
        seed: int | np.random.Generator | None = None,
        any_key: bool = False,
    ) -> None:
        self.keys = tuple(keysyms.canonical(k) for k in keys)
        self.any_key = any_key
        self.width, self.height, self.buttons = width, height, buttons
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> list[Event]:
        """A few random events: key presses/releases among ``keys``, pointer moves/clicks.

        Every number comes from one ``random`` call (benchmarks and agents draw an action
        per step, so drawing one number at a time would cost more than the step's own
        bookkeeping: ``python -m benchmarks atari_lockstep``, part 1b).

        Args:
            mask: unsupported (gymnasium's signature); ignored.
            probability: unsupported (gymnasium's signature); ignored.

        Returns:
            Up to :data:`MAX_SAMPLED_EVENTS` events.
        """
        keys, buttons = self.keys, self.buttons
        if not keys and not buttons:
            return []
        u = self.np_random.random(_SAMPLE_DRAWS).tolist()
        events: list[Event] = []
        for e in range(_pick(u[0], MAX_SAMPLED_EVENTS + 1)):
            kind, which, down, x, y, bits = u[1 + e * _EVENT_DRAWS:1 + (e + 1) * _EVENT_DRAWS]
            if keys and (not buttons or kind < 0.5):
                events.append(("KeyEvent", keys[_pick(which, len(keys))], down < 0.5))
            else:
                events.append(("PointerEvent", _pick(x, self.width), _pick(y, self.height),
                               _pick(bits, 256) & buttons))
        return events

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is an action this space allows (:meth:`check` says why not).

        Args:
            x: a candidate action.

        Returns:
            True when it is a list of valid events.
        """
        return self.check(x) is None

    def check(self, action: Any) -> str | None:
        """None if ``action`` is valid, else what is wrong with it (for error messages).

        Args:
            action: a candidate action: a list of ``KeyEvent``/``PointerEvent`` tuples.

        Returns:
            None, or the first problem found, naming the event.
        """
        if not isinstance(action, list | tuple):
            return f"an action is a list of events, not {type(action).__name__}"
        for i, event in enumerate(action):
            if not isinstance(event, list | tuple) or not event:
                return f"event {i} must be a tuple such as ('KeyEvent', 'Left', True)"
            if event[0] == "KeyEvent" and len(event) == 3:
                key, down = event[1], event[2]
                if not isinstance(down, bool | np.bool_):
                    return f"event {i}: down must be True or False, not {down!r}"
                try:
                    name = keysyms.canonical(key) if isinstance(key, str) else keysyms.name(key)
                except (UnknownKey, TypeError):
                    return f"event {i}: unknown key {key!r}"
                if self.keys and name not in self.keys and not self.any_key:
                    return f"event {i}: this remote does not use key {name!r}; it uses {', '.join(self.keys)}"
            elif event[0] == "PointerEvent" and len(event) == 4:
                x, y, mask = event[1], event[2], event[3]
                if not all(isinstance(v, int | np.integer) for v in (x, y, mask)):
                    return f"event {i}: x, y and buttonmask must be integers"
                if not (0 <= x < self.width and 0 <= y < self.height):
                    return f"event {i}: pointer ({x}, {y}) is off the {self.width}x{self.height} screen"
                if not 0 <= mask <= 255:
                    return f"event {i}: buttonmask must be 0..255"
            else:
                return (
                    f"event {i} must be ('KeyEvent', key, down) or "
                    f"('PointerEvent', x, y, buttonmask), not {event!r}"
                )
        return None

    def __repr__(self) -> str:
        return (
            f"VNCActionSpace(keys={list(self.keys)}, screen={self.width}x{self.height}, "
            f"buttons={self.buttons}{', any_key=True' if self.any_key else ''})"
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, VNCActionSpace)
            and (self.keys, self.width, self.height, self.buttons, self.any_key)
            == (other.keys, other.width, other.height, other.buttons, other.any_key)
        )
