"""What an env asks of its remotes and how it steps them: one object for every env.

Holds :class:`EnvOptions`, which :class:`~remotes.env.RemoteEnv`,
:class:`~remotes.vector.RemoteVectorEnv` and the stepping core take (as ``options=`` or
as the same names given as keywords), so the settings, their defaults and their checks
are written once.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from rewarder.protocol import MODES, REALTIME
from runtimes import registry

from .faults import STALL_FRAMES, STALL_TIMEOUT

#: What an observation may hold: the screen, and a browser remote's page structure.
SCREEN: Final = "screen"
PAGE: Final = "page"
OBSERVATIONS: Final = (SCREEN, PAGE)
#: How actions are given: VNC events, or BrowserGym action strings (and events).
VNC_ACTIONS: Final = "vnc"
WEB_ACTIONS: Final = "web"
ACTION_KINDS: Final = (VNC_ACTIONS, WEB_ACTIONS)
#: When a real-time step returns: at the frame clock, or once the screen settled.
FRAME_STEPS: Final = "frame"
SETTLE_STEPS: Final = "settle"
STEP_MODES: Final = (FRAME_STEPS, SETTLE_STEPS)

#: Seconds to wait for a remote to answer by default (connect, and a reset waiting for a
#: reconnection).
START_TIMEOUT: Final = 30.0


@dataclass(frozen=True, kw_only=True, slots=True)
class EnvOptions:
    """How an env connects to and steps its remotes.

    Attributes:
        password: the remotes' password (overrides one in the address).
        fps: real-time steps per second (default: the remote's own fps from its describe).
        env_id: ask the remotes for this environment at every reset.
        encoding, quality: how VNC sends pixels (``"tight"``/``"zrle"``/``"raw"``; None:
            Raw on loopback, Tight elsewhere; quality 0-9 turns on lossy JPEG).
        start_timeout: seconds to wait for a remote to answer (connect, and a reset
            waiting for a reconnection).
        max_episode_steps: truncate episodes after this many steps (None: never).
        mode: ``"realtime"`` (Universe's: the remote runs at its fps whatever we do) or
            ``"lockstep"`` (the remote advances only when we step: deterministic, and as
            fast as the runtime goes).
        frameskip: frames one step spans (lockstep: exactly; real time: frame periods).
        stall_frames: real time: frame periods without a new frame before
            ``info["remote.stalled"]``.
        stall_timeout: seconds without a new frame (real time), or without a step's reply
            (lockstep), before the episode is truncated and the remote reconnected.
        tls_ca: for ``vnc+tls://`` addresses, the PEM file of the CA that issued the
            remotes' certificate (default: $UNIVERSE_REMOTE_TLS_CA, else the system's
            trust store).
        observations: ``("screen",)`` (the frame) or ``("screen", "page")``: a browser
            remote's page structure too, as a ``Dict`` observation (:mod:`remotes.web`).
        actions: ``"vnc"`` (lists of key and pointer events) or ``"web"``: BrowserGym
            action strings such as ``"click('a12')"`` (events are still taken).
        step_mode: ``"frame"`` (a step returns the frame ``frameskip`` after the last) or
            ``"settle"`` (real time, browser and desktop remotes: a step returns once the
            screen has been still after its action).
    """

    password: str | None = None
    fps: float | None = None
    env_id: str | None = None
    encoding: str | None = None
    quality: int | None = None
    start_timeout: float = START_TIMEOUT
    max_episode_steps: int | None = None
    mode: str = REALTIME
    frameskip: int = 1
    stall_frames: int = STALL_FRAMES
    stall_timeout: float = STALL_TIMEOUT
    tls_ca: str | os.PathLike[str] | None = None
    observations: tuple[str, ...] = (SCREEN,)
    actions: str = VNC_ACTIONS
    step_mode: str = FRAME_STEPS

    def __post_init__(self) -> None:
        if isinstance(self.observations, str) or not isinstance(self.observations, tuple | list):
            raise ValueError(
                f"observations must be a tuple such as ('screen', 'page'), not {self.observations!r}"
            )
        object.__setattr__(self, "observations", tuple(self.observations))
        unknown = [o for o in self.observations if o not in OBSERVATIONS]
        if unknown or SCREEN not in self.observations:
            raise ValueError(
                f"observations={self.observations!r}: take 'screen' and optionally 'page' "
                f"(of {', '.join(OBSERVATIONS)})"
            )
        if self.actions not in ACTION_KINDS:
            raise ValueError(f"actions must be one of {', '.join(ACTION_KINDS)}, not {self.actions!r}")
        if self.step_mode not in STEP_MODES:
            raise ValueError(f"step_mode must be one of {', '.join(STEP_MODES)}, not {self.step_mode!r}")
        if self.step_mode == SETTLE_STEPS and self.mode != REALTIME:
            raise ValueError(
                "step_mode='settle' is for real time: a lockstep step already returns the "
                "frame after its action ran and its frames passed"
            )
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if not (isinstance(self.frameskip, int) and self.frameskip >= 1):
            raise ValueError(f"frameskip must be a positive integer, not {self.frameskip!r}")
        if not (isinstance(self.stall_frames, int) and self.stall_frames >= 1):
            raise ValueError(f"stall_frames must be 1 or more, not {self.stall_frames!r}")
        if not self.stall_timeout > 0:
            raise ValueError(f"stall_timeout must be positive seconds, not {self.stall_timeout!r}")
        if not self.start_timeout > 0:
            raise ValueError(f"start_timeout must be positive seconds, not {self.start_timeout!r}")
        if self.max_episode_steps is not None and self.max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be 1 or more (or None), not {self.max_episode_steps!r}")

    @classmethod
    def of(cls, options: EnvOptions | None, settings: dict[str, Any], **given: Any) -> EnvOptions:
        """``options`` with ``settings`` (keywords of the same names) on top, and ``given``
        (the envs' positional ``password`` and ``fps``) where not None; an unknown name is
        a TypeError that lists the known ones.

        Args:
            options: the base (None: the defaults).
            settings: keyword settings, which win over ``options``.
            **given: the positional ``password`` and ``fps``, used where not None.

        Returns:
            The merged, checked options.

        Raises:
            TypeError: a setting has no such name.
            ValueError: a setting is out of range (the message says which).
        """
        settings = {**settings, **{k: v for k, v in given.items() if v is not None}}
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(settings) - names)
        if unknown:
            raise TypeError(
                f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; an env "
                f"takes {', '.join(sorted(names))} (see remotes.EnvOptions)"
            )
        base = options if options is not None else cls()
        return dataclasses.replace(base, **settings) if settings else base

    @property
    def web(self) -> bool:
        """Whether the env needs the web side of a browser remote (:mod:`remotes.web`)."""
        return (PAGE in self.observations or self.actions == WEB_ACTIONS
                or self.step_mode == SETTLE_STEPS)

    def changed(self) -> dict[str, Any]:
        """The settings that differ from the defaults (what ``gymnasium.make`` must repeat
        to build the env again), paths as strings.

        Returns:
            ``{name: value}`` of each setting not at its default.
        """
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                out[f.name] = os.fspath(value) if isinstance(value, os.PathLike) else value
        return out


def check_env_id(env_id: str | None, served: Iterable[Any]) -> None:
    """Raise :class:`~runtimes.errors.UnknownEnvironment` (with the closest ids) when
    ``env_id`` is neither an id this install knows (the registry's catalogue, which also
    names families not installed here) nor one the remotes serve now (``served``: their
    describes' env ids, for runtimes of their own): at the env's construction, not at
    its first ``reset()``."""
    if env_id is None:
        return
    registry.check(env_id, served)
