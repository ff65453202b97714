"""The remote's states and what moves it between them, as transition tables.

Holds :class:`State`, :class:`Event`, the tables :data:`REALTIME_TABLE` and
:data:`LOCKSTEP_TABLE`, :class:`RemoteState` (the machine), :class:`IllegalTransition`
and :class:`Progress` (how far a reset or step under way got, for the error exit).
Sans-I/O: no asyncio, no sockets; the remote (:mod:`envserver.remote`) feeds events in
and acts on the state that comes out, as h11's ``_state.py`` does for HTTP.

The mode picks the table: in real time the game loop ticks and an episode that ends
resets by itself; in lockstep the active client steps and an episode that ends waits for
its reset. A mode switch happens only while resetting, so a table never changes under
a running episode. An event a table does not list for the current state is illegal: the
machine raises :class:`IllegalTransition`, which says what the client should do instead.

**The error exit.** A reset or a step is under way from its event (``RESET``, ``STEP``)
to its completion (``RESET_DONE``, ``STEP_DONE``/``EPISODE_DONE``), and anything in
between may raise: the runtime, the frame's hand-off to shared memory, a send. Whatever
raised, :meth:`RemoteState.process_error` (h11's ``process_error``) takes the machine out:
to ``recovering`` when something changed, back to where the event found it when nothing
did (``ABORT``). No state is one that no event leaves.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Final


class State(enum.Enum):
    """Where the remote is. ``wire`` is the ``env_state`` Universe clients understand."""

    STARTING = "starting"  # binding ports, starting the runtime
    RESETTING = "resetting"  # a reset (requested, automatic or initial) is under way
    RUNNING = "running"  # an episode is on: ticking (real time) or waiting for a step
    STEPPING = "stepping"  # lockstep: advancing the frames one step asked for
    DONE = "done"  # lockstep: the episode ended; waiting for v0.env.reset
    RECOVERING = "recovering"  # the runtime failed; resetting it until it works again
    CLOSING = "closing"  # shutting down (signal, or the runtime failed past recovery)

    # Members are singletons compared by identity; Enum's own __hash__ is a Python call
    # (it hashes the name), paid at every table look-up of every step.
    __hash__ = object.__hash__

    @property
    def wire(self) -> str:
        """Universe's ``env_state``: only ``running`` lets its client act."""
        return "running" if self in _WIRE_RUNNING else "resetting"


_WIRE_RUNNING: Final = frozenset({State.RUNNING, State.STEPPING, State.DONE})


class Event(enum.Enum):
    """What happens to the remote."""

    RESET = "reset"  # a reset begins: requested, automatic after done, or the first one
    RESET_DONE = "reset done"  # the runtime drew the new episode's first frame
    STEP = "step"  # lockstep: the active client asks for frames
    STEP_DONE = "step done"  # lockstep: those frames are drawn
    TICK = "tick"  # real time: one frame is due
    EPISODE_DONE = "episode done"  # the runtime said done
    ERROR = "error"  # something raised: the runtime, or a step's or reset's hand-off, a send
    ABORT = "abort"  # something raised before the step under way changed anything
    RECOVERED = "recovered"  # a recovery reset worked
    ENV_SWITCH = "env switch"  # a reset asked for another env id
    MODE_SWITCH = "mode switch"  # a reset asked for the other mode
    SHUTDOWN = "shutdown"  # stop serving

    __hash__ = object.__hash__  # (as State's)


Table = Mapping[State, Mapping[Event, State]]

#: Transitions both modes share.
_COMMON: Final[dict[State, dict[Event, State]]] = {
    State.STARTING: {
        Event.RESET: State.RESETTING,
        Event.SHUTDOWN: State.CLOSING,
    },
    State.RESETTING: {
        Event.RESET_DONE: State.RUNNING,
        Event.ENV_SWITCH: State.RESETTING,
        Event.MODE_SWITCH: State.RESETTING,
        Event.ERROR: State.RECOVERING,
        Event.SHUTDOWN: State.CLOSING,
    },
    State.RUNNING: {
        Event.RESET: State.RESETTING,
        Event.ERROR: State.RECOVERING,
        Event.SHUTDOWN: State.CLOSING,
    },
    State.RECOVERING: {
        Event.RECOVERED: State.RUNNING,
        Event.ERROR: State.RECOVERING,
        Event.SHUTDOWN: State.CLOSING,
    },
    State.CLOSING: {
        Event.SHUTDOWN: State.CLOSING,
    },
}


def _extend(extra: dict[State, dict[Event, State]]) -> dict[State, dict[Event, State]]:
    table = {state: dict(moves) for state, moves in _COMMON.items()}
    for state, moves in extra.items():
        table.setdefault(state, {}).update(moves)
    return table


#: Real time: the loop ticks while running; a done episode resets by itself.
REALTIME_TABLE: Final[Table] = _extend(
    {
        State.RUNNING: {
            Event.TICK: State.RUNNING,
            Event.EPISODE_DONE: State.RESETTING,
        },
    }
)

#: Lockstep: the active client steps; a done episode waits for its reset.
LOCKSTEP_TABLE: Final[Table] = _extend(
    {
        State.RUNNING: {Event.STEP: State.STEPPING},
        State.STEPPING: {
            Event.STEP_DONE: State.RUNNING,
            Event.EPISODE_DONE: State.DONE,
            Event.ERROR: State.RECOVERING,
            Event.ABORT: State.RUNNING,
            Event.SHUTDOWN: State.CLOSING,
        },
        State.DONE: {
            Event.RESET: State.RESETTING,
            Event.SHUTDOWN: State.CLOSING,
        },
    }
)

#: States an event begins and another completes: an exception in between must take the
#: machine out (:meth:`RemoteState.process_error`).
UNDER_WAY: Final = frozenset({State.RESETTING, State.STEPPING})

TABLES: Final[Mapping[str, Table]] = {"realtime": REALTIME_TABLE, "lockstep": LOCKSTEP_TABLE}

#: What a client should do instead of an illegal event, by (event, state); the default
#: for an event is under state None.
_ADVICE: Final[Mapping[tuple[Event, State | None], str]] = {
    (Event.STEP, None): "wait for describe env_state 'running', then step",
    (Event.STEP, State.DONE): "the episode is done; send v0.env.reset",
    (Event.STEP, State.STEPPING): "wait for the reply to the step under way",
    (Event.RESET, None): "wait for describe env_state 'running', then reset",
    (Event.RESET, State.STEPPING): "wait for the reply to the step under way, then reset",
    (Event.ENV_SWITCH, None): "switch env ids with v0.env.reset",
    (Event.MODE_SWITCH, None): "switch modes with v0.env.reset",
}
_REALTIME_STEP_ADVICE: Final = (
    "this remote runs in real time; reset with mode 'lockstep' (or serve --mode lockstep) "
    "before sending v0.env.step"
)


class IllegalTransition(Exception):
    """An event the current state does not allow; the message says what to do instead."""

    def __init__(self, mode: str, state: State, event: Event) -> None:
        self.mode, self.state, self.event = mode, state, event
        if event is Event.STEP and mode == "realtime":
            advice = _REALTIME_STEP_ADVICE
        else:
            advice = _ADVICE.get((event, state)) or _ADVICE.get((event, None), "")
        super().__init__(
            f"{event.value} is not possible while the remote is {state.value} ({mode})"
            + (f": {advice}" if advice else "")
        )


class RemoteState:
    """The remote's state machine: a mode, a state, and the table of the mode.

    Call :meth:`fire` with each event; it returns the new state or raises
    :class:`IllegalTransition` and leaves the state as it was. :meth:`allows` asks first.
    """

    def __init__(self, mode: str = "realtime", state: State = State.STARTING) -> None:
        if mode not in TABLES:
            raise ValueError(f"mode must be one of {sorted(TABLES)}, not {mode!r}")
        self.mode = mode
        self.state = state

    def allows(self, event: Event) -> bool:
        return event in TABLES[self.mode].get(self.state, {})

    def fire(self, event: Event) -> State:
        try:
            self.state = TABLES[self.mode][self.state][event]
        except KeyError:
            raise IllegalTransition(self.mode, self.state, event) from None
        return self.state

    def process_error(self, changed: bool = True) -> State:
        """Something raised between an event and its completion (h11's ``process_error``):
        ``ERROR`` (to ``recovering``) if ``changed`` or no ``ABORT`` leads back, else
        ``ABORT`` (back to where the event found the machine). Never raises: from a state
        with neither (``closing``) the machine stays put."""
        if not changed and self.allows(Event.ABORT):
            return self.fire(Event.ABORT)
        if self.allows(Event.ERROR):
            return self.fire(Event.ERROR)
        return self.state

    def switch_mode(self, mode: str) -> None:
        """Change tables; only while resetting (a :data:`Event.MODE_SWITCH`)."""
        if mode not in TABLES:
            raise ValueError(f"mode must be one of {sorted(TABLES)}, not {mode!r}")
        self.fire(Event.MODE_SWITCH)
        self.mode = mode

    def __repr__(self) -> str:
        return f"RemoteState({self.mode!r}, {self.state})"


@dataclasses.dataclass(slots=True)
class Progress:
    """How far a reset or step under way got: the state its event moved the remote to,
    what it is doing, and whether anything has changed (frames drawn, an episode begun)
    that a failure now cannot take back (``changed``: the error exit goes to
    ``recovering``, else back)."""

    state: State
    what: str
    changed: bool
    #: The env a failure now is of, when not the runtime's (an env switch: the one it goes to).
    env_id: str | None = None
