"""What every agent port (dm_env_rpc, OpenEnv, the next one) shares about driving a remote.

Holds :class:`RemoteLike` (what a port may use of :class:`envserver.remote.Remote`),
:class:`Held` (what an agent holds down: an action is a change to it, made into input
events), :class:`Ledger` (what the remote's frames brought each episode the agent has
not seen yet, heard through the remote's result sink) and the limits they share. A port
drives the game through the same domain calls as the rewarder — orders of
:mod:`envserver.orders` through the seats' barrier — and maps
:class:`~envserver.orders.Refused` to its own error; :func:`reset` and :func:`step` are
those calls.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable
from typing import Any, Final, Protocol

import numpy as np

from runtimes.base import Runtime, StepResult

from .orders import ActOrder, ResetOrder, StepOrder
from .players import Seats
from .properties import Properties
from .state import State

#: Seconds a real-time step waits for its frame before it reports the remote stalled.
STEP_TIMEOUT: Final = 10.0
#: Episodes whose rewards a port keeps while its agent has not seen them (bounded).
MAX_PENDING_EPISODES: Final = 4

#: The player whose agent's request a port serves now (set per request by the port): a
#: property write that begins a new sequence resets as that player's share.
CALLER: contextvars.ContextVar[int] = contextvars.ContextVar("caller", default=0)

#: An input event as the game's orders take it.
Event = tuple[Any, ...]


class RemoteLike(Protocol):
    """What agent ports use of :class:`envserver.remote.Remote`."""

    property_table: Properties

    # (Read-only here: the remote's parts write them, never a front end.)
    @property
    def fps(self) -> float: ...
    @property
    def episode_id(self) -> int: ...
    @property
    def frame(self) -> int: ...
    @property
    def result_sinks(self) -> list[Callable[[int, StepResult], None]]: ...
    @property
    def episode_sinks(self) -> list[Callable[[int, int, str | None], None]]: ...
    @property
    def runtime(self) -> Runtime: ...
    @property
    def mode(self) -> str: ...
    @property
    def state(self) -> State: ...
    @property
    def env_id(self) -> str: ...
    @property
    def players(self) -> int: ...
    @property
    def seats(self) -> Seats: ...
    def describe(self) -> dict[str, Any]: ...
    def screen(self) -> np.ndarray: ...
    def agent(self) -> str | None: ...
    def set_fps(self, fps: float) -> None: ...
    def action(self, order: ActOrder) -> None: ...
    async def act(self, order: ActOrder, source: object = None) -> dict[str, Any]: ...
    async def page(self, parts: frozenset[str]) -> dict[str, Any]: ...
    def client_left(self, observer: bool) -> None: ...
    def player_left(self, player: int) -> None: ...
    async def wait_frame(self, after: int | None = None) -> int: ...


async def reset(remote: RemoteLike, order: ResetOrder, player: int = 0) -> int:
    """A new episode through the seats' barrier; its id (:class:`Refused` refuses)."""
    episode: list[int] = []
    await remote.seats.reset(order, lambda new, body=None: episode.append(new), player)
    return episode[0]


async def step(remote: RemoteLike, order: StepOrder) -> tuple[int, dict[str, Any]]:
    """One lockstep step through the seats' barrier: (episode id, the reply body)."""
    reply: tuple[int, dict[str, Any]] = await remote.seats.step(order)
    return reply


@dataclasses.dataclass
class Held:
    """What an agent holds now (keys, pointer, buttons): actions are changes to it."""

    keys: set[str] = dataclasses.field(default_factory=set)
    pointer: tuple[int, int] = (0, 0)
    buttons: int = 0

    def keys_to(self, want: set[str]) -> list[Event]:
        """The key events that take the held keys to ``want`` (releases first)."""
        ups: list[Event] = [("KeyEvent", key, False) for key in sorted(self.keys - want)]
        downs: list[Event] = [("KeyEvent", key, True) for key in sorted(want - self.keys)]
        self.keys = set(want)
        return ups + downs

    def pointer_to(self, x: int, y: int, buttons: int) -> list[Event]:
        """The pointer event that moves there with ``buttons`` held (none if it is)."""
        if (x, y, buttons) == (*self.pointer, self.buttons):
            return []
        self.pointer, self.buttons = (x, y), buttons
        return [("PointerEvent", x, y, buttons)]


@dataclasses.dataclass
class Seen:
    """What the remote's frames brought one episode, as the result sink heard it."""

    reward: float = 0.0
    done: bool = False
    #: Its last screen (real time: the remote draws the next episode at once).
    final_screen: np.ndarray | None = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


class Ledger:
    """The episodes an agent has not seen yet: their reward, end and last screen, at most
    :data:`MAX_PENDING_EPISODES` of them (the oldest go first)."""

    def __init__(self) -> None:
        self.episodes: dict[int, Seen] = {}

    def heard(
        self, episode_id: int, reward: float, done: bool,
        screen: Callable[[], np.ndarray] | None = None, info: dict[str, Any] | None = None,
    ) -> None:
        """An advance of ``episode_id`` brought ``reward`` (and its end); ``screen``: the
        remote's screen, kept as the episode's last if it ended (real time)."""
        seen = self.episodes.setdefault(episode_id, Seen())
        seen.reward += reward
        if info:
            seen.info.update(info)
        if done and not seen.done:
            seen.done = True
            if screen is not None:
                seen.final_screen = screen().copy()
        while len(self.episodes) > MAX_PENDING_EPISODES:
            del self.episodes[min(self.episodes)]

    def get(self, episode_id: int) -> Seen:
        return self.episodes.setdefault(episode_id, Seen())

    def pop(self, episode_id: int) -> Seen:
        """What ``episode_id`` brought since it was last popped (the agent has seen it)."""
        return self.episodes.pop(episode_id, None) or Seen()

    def forget_before(self, episode_id: int) -> None:
        for old in [e for e in self.episodes if e < episode_id]:
            del self.episodes[old]

    def clear(self) -> None:
        self.episodes.clear()
