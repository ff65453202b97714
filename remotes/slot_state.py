"""Where a remote's slot is between two steps, and what moves it, as one transition table.

Holds :class:`Phase`, :class:`SlotEvent`, the table :data:`SLOT_TABLE`,
:class:`IllegalSlotTransition` and :func:`fire`, the one writer of a slot's ``phase``
(``tests/remotes/test_slot_state.py`` checks that no other module assigns it). Sans-I/O,
in the manner of the remote's own machine (:mod:`envserver.state`, after h11's
``_state.py``): the stepping strategies (:mod:`remotes.realtime`, :mod:`remotes.lockstep`,
:mod:`remotes.faults`) fire events and read the phase that comes out.

**The error exit.** Whatever goes wrong with a remote — it drops, stalls, is replaced,
a reset or a send raises — takes its slot out to ``away`` (``LOST``), from every phase,
away included (a reset of an away slot that fails again): no phase is one that no event
leaves, and the exit never raises. ``away`` is left by ``BACK`` (the remote answers
again) or by a reset.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, Protocol


class Phase(enum.Enum):
    """Where a remote's slot is between two steps."""

    #: Stepping an episode.
    RUNNING = "running"
    #: The remote ended the episode (real time: it starts the next by itself).
    ENDED = "ended"
    #: We ended it (step limit) or the remote waits for a reset (lockstep): reset next.
    NEEDS_RESET = "needs reset"
    #: Dropped, stalled or replaced: reconnecting in the background.
    AWAY = "away"

    # Members are singletons compared by identity (as envserver.state.State's).
    __hash__ = object.__hash__


class SlotEvent(enum.Enum):
    """What happens to a remote's slot."""

    CONNECT = "connect"  # the env (re)connects its remotes: every slot starts over
    RESET = "reset"  # a reset (explicit, automatic, or of a remote that came back) began an episode
    BACK = "back"  # an away remote answers again and is reconnected
    EPISODE_END = "episode end"  # real time: the remote said done (it starts the next itself)
    NEED_RESET = "need reset"  # the step limit, or a lockstep remote's done: reset next
    LOST = "lost"  # the error exit: dropped, stalled, replaced, or a reset or send raised

    __hash__ = object.__hash__  # (as Phase's)


_EVERY: Final = tuple(Phase)

#: The slot's transitions: for each phase, each event it allows and the phase it leads to.
SLOT_TABLE: Final[Mapping[Phase, Mapping[SlotEvent, Phase]]] = {
    phase: {
        SlotEvent.CONNECT: Phase.RUNNING,
        SlotEvent.RESET: Phase.RUNNING,
        SlotEvent.LOST: Phase.AWAY,
        **({SlotEvent.EPISODE_END: Phase.ENDED, SlotEvent.NEED_RESET: Phase.NEEDS_RESET}
           if phase is Phase.RUNNING else {}),
        **({SlotEvent.BACK: Phase.RUNNING} if phase is Phase.AWAY else {}),
    }
    for phase in _EVERY
}


class IllegalSlotTransition(Exception):
    """An event the slot's phase does not allow: a bug in the stepping core, not the
    caller's doing (the message names the slot, its phase and the event)."""

    def __init__(self, index: int, phase: Phase, event: SlotEvent) -> None:
        self.index, self.phase, self.event = index, phase, event
        allowed = ", ".join(e.value for e in SLOT_TABLE[phase])
        super().__init__(
            f"slot {index}: {event.value} is not possible while its remote is {phase.value} "
            f"(allowed there: {allowed}); the stepping core fired it out of order"
        )


class HasPhase(Protocol):
    """What :func:`fire` needs of a slot (``remotes.slot.Slot``)."""

    index: int
    phase: Phase


def fire(slot: HasPhase, event: SlotEvent) -> Phase:
    """Move ``slot`` by ``event`` and return its new phase; raise
    :class:`IllegalSlotTransition` (the phase left as it was) if its phase does not allow it."""
    try:
        phase = slot.phase = SLOT_TABLE[slot.phase][event]
    except KeyError:
        raise IllegalSlotTransition(slot.index, slot.phase, event) from None
    return phase
