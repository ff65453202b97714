"""What a front end asks of the game, in the game's own words, and how the game says no.

Holds :class:`StepOrder`, :class:`ResetOrder`, :class:`ActOrder` and :class:`Refused`.
The remote (:class:`envserver.remote.Remote`) and the seats' barrier
(:class:`envserver.players.Seats`) take these, never a front end's wire request: each
front end (the rewarder, dm_env_rpc, OpenEnv) makes an order from its own message and
maps a :class:`Refused` back to its own error (the rewarder's ``v0.reply.error`` with
the message id, a ``google.rpc`` status, an OpenEnv error), as h11 keeps its state table
free of framing. No message id travels through the game.

The names of the modes and of the frame transports are the rewarder's wire values,
re-exported here so the game names them from its own module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from rewarder.protocol import LOCKSTEP, MODES, OBS_SHM, OBS_VNC, REALTIME

__all__ = [
    "LOCKSTEP", "MODES", "OBS_SHM", "OBS_VNC", "REALTIME",
    "ActOrder", "Refused", "ResetOrder", "StepOrder",
]

#: An input event as a front end gives it: ``("KeyEvent", key, down)`` or
#: ``("PointerEvent", x, y, buttons)`` (checked by :class:`envserver.inputs.Inputs`).
Event = Sequence[Any]


class Refused(Exception):
    """The game will not do what was asked; ``reason`` says why and what to do instead.

    Each front end turns it into its own error (the rewarder: ``BadRequest`` with the
    request's message id)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class StepOrder:
    """One lockstep step of ``player`` (0 on single-player runtimes): its events, then
    ``frames`` frames (a joint step adds the other seated players' orders' events).

    ``obs``: how the frame leaves (:data:`OBS_VNC` or :data:`OBS_SHM`); ``web``: an action
    string run before the frames (browser remotes); ``episode_id``: the episode the
    player believes current (None: whatever is), a stale one is refused."""

    events: tuple[Event, ...] = ()
    frames: int = 1
    obs: str = OBS_VNC
    web: str | None = None
    episode_id: int | None = None
    player: int = 0
    #: A batch step's (envserver.batch): the frame goes into this slot of the batch's
    #: shared segment, ``(segment, slot)``, instead of the game's own.
    into: tuple[Any, int] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ResetOrder:
    """A new episode past ``episode_id``, maybe of another env, mode or fps; ``obs``
    :data:`OBS_SHM` (lockstep) hands its first frame over in shared memory."""

    episode_id: int | None = None
    env_id: str | None = None
    seed: int | None = None
    fps: float | None = None
    mode: str | None = None
    obs: str = OBS_VNC


@dataclasses.dataclass(frozen=True, slots=True)
class ActOrder:
    """Real time: ``player``'s events for the next frame; and/or an action string to run,
    or a wait for the screen to settle, whose outcome the agent hears under ``action_id``."""

    events: tuple[Event, ...] = ()
    web: str | None = None
    settle: bool = False
    action_id: Any = None
    player: int = 0
