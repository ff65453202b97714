"""What :class:`remotes.faults.Faults` reads of its :class:`remotes.lane.Lane`: the lane's
settings, state and frame copy, named here so faults (which the lane's options read for
their defaults) never imports the lane: imports flow one way (docs/design.md).
mypy checks that a Lane is one where ``remotes/stepper.py`` hands its lane to ``Faults``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from .loop import LoopThread
    from .slot import Slot


class LaneView(Protocol):
    """A lane as fault handling sees it."""

    @property
    def mode(self) -> str: ...
    @property
    def fps(self) -> float: ...
    @property
    def requested_fps(self) -> float | None: ...
    @property
    def env_id(self) -> str | None: ...
    @property
    def start_timeout(self) -> float: ...
    @property
    def stall_frames(self) -> int: ...
    @property
    def stall_timeout(self) -> float: ...
    @property
    def loop(self) -> LoopThread: ...
    @property
    def same_step(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def frames(self) -> np.ndarray | None: ...
    def copy_frame(self, slot: Slot) -> None: ...
