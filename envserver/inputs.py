"""Input for the runtime: events checked, queued for the next frame, and let go of.

Holds :class:`Inputs`. Input comes from the rewarder's active client (``v0.agent.action``
and ``v0.env.step``, checked strictly: a bad event is refused with an error that says
why) and from VNC clients (checked leniently: viewers send keys a game does not use, such
as Shift, and those are dropped). Every source's held keys and buttons are remembered, so
a source that leaves can be made to let go and no key stays stuck.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

from runtimes.base import InputEvent, KeyEvent, PlayerEvent, PointerEvent, Runtime
from vncdriver import keysyms, messages
from vncdriver.errors import UnknownKey

from .orders import Refused

log = logging.getLogger(__name__)

#: Input events waiting for the next frame; more means a client floods us faster than
#: any player could type. Rewarder actions past it are refused with an error; VNC input
#: past it is dropped and counted (releases always apply, so no key stays stuck).
MAX_PENDING_EVENTS: Final = 4096
#: The input source of the rewarder's active client (VNC clients are ``("vnc", id)``).
REWARDER_SOURCE: Final = "rewarder"
#: Distinct actions whose checked events :meth:`Inputs.checked` remembers (an agent steps
#: with a few: a game's action set); past it the memory starts over.
MAX_CHECKED_ACTIONS: Final = 1024


def source_name(source: object) -> str:
    """How recordings name a source: ``"agent"`` (the rewarder's client) or ``"vnc:N"``."""
    if source == REWARDER_SOURCE:
        return "agent"  # player N's agent of a multi-player remote: "agent:N"
    if isinstance(source, tuple) and len(source) == 2:
        return f"{source[0]}:{source[1]}"
    return str(source)


class Inputs:
    """Pending events for the next frame and what each source holds down."""

    def __init__(self) -> None:
        self.pending: list[InputEvent] = []
        #: Who sent each pending event (``name_source`` of its source), for recordings.
        self.pending_sources: list[str] = []
        #: Names sources; the remote's recorder sets one that tells browser viewers apart.
        self.name_source: Callable[[object], str] = source_name
        #: The sources of the events the last :meth:`take` returned, and how many takes
        #: there have been (a recorder tells a new take from the one it saw).
        self.taken: Sequence[InputEvent] = []
        self.taken_sources: list[str] = []
        self.takes = 0
        #: VNC events dropped because too many were pending.
        self.dropped = 0
        #: The player a source drives (multi-player remotes: ``envserver.players``); the
        #: events of players above 0 are queued as ``PlayerEvent``.
        self.player_of: Callable[[object], int] = lambda source: 0
        #: Called with every batch of events as it is queued (a remote forwards a real-time
        #: X program's input at once: ``Runtime.forwards_input``).
        self.on_queue: Callable[[Sequence[InputEvent]], None] | None = None
        self._held: dict[object, tuple[set[str], list[int]]] = {}
        #: :meth:`checked`'s memory: an action (a tuple of event tuples) -> its events as
        #: runtime input, for the runtime (at the size) in :attr:`_checked_for` only.
        self._checked: dict[tuple[Any, ...], tuple[InputEvent, ...]] = {}
        self._checked_for: tuple[Runtime, int, int] | None = None

    @property
    def held_keys(self) -> set[str]:
        """Keys some source holds down now (as the runtime will see them at the next frame)."""
        return set().union(*(keys for keys, _ in self._held.values()))

    def take(self) -> list[InputEvent]:
        """The events for the frame about to be drawn; the queue starts empty again."""
        events, self.pending = self.pending, []
        self.taken = events
        self.taken_sources, self.pending_sources = self.pending_sources, []
        self.takes += 1
        return events

    def clear(self) -> None:
        """A new episode: nothing pending, nothing held (the runtime let go on reset)."""
        self.pending.clear()
        self.pending_sources.clear()
        self._held.clear()

    def hold(self, source: object, keys: set[str] | frozenset[str], pointer: tuple[int, int, int]) -> None:
        """Record ``source`` as holding ``keys`` and ``pointer`` (x, y, buttons) without
        queueing anything: the runtime holds them already (a restore brought them back),
        and :meth:`release` lets go of them when ``source`` leaves."""
        self._held[source] = (set(keys), list(pointer))

    def push(self, source: object, events: Sequence[InputEvent]) -> None:
        """Queue checked events from ``source`` for the next frame."""
        self._note_held(source, events)
        self._queue(source, events)

    def _note_held(self, source: object, events: Sequence[InputEvent]) -> None:
        """What ``source`` holds down once ``events`` apply (:meth:`release` lets go)."""
        held = self._held.get(source)
        if held is None:  # (not setdefault: that makes the set and list every step)
            held = self._held[source] = (set(), [0, 0, 0])
        keys, pointer = held
        for event in events:
            if isinstance(event, KeyEvent):
                (keys.add if event.down else keys.discard)(event.key)
            else:
                pointer[:] = event

    def push_take(self, source: object, events: Sequence[InputEvent]) -> Sequence[InputEvent]:
        """:meth:`push` then :meth:`take` (a lockstep step's own input, applied at once):
        the same events and state after, without the queue when nothing else waits in it."""
        if self.pending or self.player_of(source):
            self.push(source, events)
            return self.take()
        if events:
            self._note_held(source, events)
            self.taken_sources = [self.name_source(source)] * len(events)
            if self.on_queue is not None:
                self.on_queue(events)
        else:
            self.taken_sources = []
        self.taken = events  # (read, never changed)
        self.takes += 1
        return events

    def checked(self, runtime: Runtime, events: Sequence[Sequence[Any]]) -> Sequence[InputEvent]:
        """:meth:`check_action`, remembered for actions parsed as tuples of tuples (a
        step's, which an agent repeats from a small set): the same events, or the same
        :class:`Refused`, each time (they depend on the runtime and its screen's size only)."""
        if type(events) is not tuple:
            return self.check_action(runtime, events)
        made_for = self._checked_for
        if (made_for is None or made_for[0] is not runtime or made_for[1] != runtime.width
                or made_for[2] != runtime.height or len(self._checked) >= MAX_CHECKED_ACTIONS):
            self._checked = {}
            self._checked_for = (runtime, runtime.width, runtime.height)
        try:
            return self._checked[events]
        except KeyError:
            pass
        except TypeError:  # (an event holding a list: not remembered)
            return self.check_action(runtime, events)
        done = self._checked[events] = tuple(self.check_action(runtime, events))
        return done

    def _queue(self, source: object, events: Sequence[InputEvent]) -> None:
        player = self.player_of(source)
        if player:
            self.pending.extend(PlayerEvent(player, e) for e in events)  # type: ignore[misc]
        else:
            self.pending.extend(events)
        self.pending_sources.extend([self.name_source(source)] * len(events))
        if self.on_queue is not None and events:
            self.on_queue(events)

    def release(self, source: object) -> None:
        """Let go of every key and button ``source`` holds (it is gone)."""
        keys, pointer = self._held.pop(source, (set(), [0, 0, 0]))
        released: list[InputEvent] = [KeyEvent(k, False) for k in sorted(keys)]
        if pointer[2]:
            released.append(PointerEvent(pointer[0], pointer[1], 0))
        self._queue(source, released)

    def push_action(
        self, runtime: Runtime, events: Sequence[Sequence[Any]], source: object = REWARDER_SOURCE,
    ) -> None:
        """Queue an agent's events, refusing the lot (:class:`Refused`) if one is bad or
        too many wait."""
        checked = self.check_action(runtime, events)
        if len(self.pending) + len(checked) > MAX_PENDING_EVENTS:
            raise Refused(
                f"more than {MAX_PENDING_EVENTS} input events (MAX_PENDING_EVENTS) are waiting "
                "for the next frame; send fewer events per frame"
            )
        self.push(source, checked)

    def push_vnc(self, runtime: Runtime, client_id: int, events: Sequence[Any]) -> None:
        """VNC input: keys the runtime does not use are dropped (unless it takes any,
        ``Runtime.any_vnc_key``), pointers clamped to the screen.

        Past :data:`MAX_PENDING_EVENTS` presses and moves are dropped and counted, but
        releases still apply, so a flood can't leave a key stuck down.
        """
        checked: list[InputEvent] = []
        room = MAX_PENDING_EVENTS - len(self.pending)
        for event in events:
            if isinstance(event, messages.KeyEvent):
                name = keysyms.name(event.key)
                if name not in runtime.keys and not runtime.any_vnc_key:
                    continue
                key = KeyEvent(name, event.down)
                if len(checked) < room or not event.down:
                    checked.append(key)
                    continue
            else:
                x = min(max(event.x, 0), runtime.width - 1)
                y = min(max(event.y, 0), runtime.height - 1)
                if len(checked) < room:
                    checked.append(PointerEvent(x, y, event.button_mask))
                    continue
            self.dropped += 1
            if self.dropped == 1 or self.dropped % MAX_PENDING_EVENTS == 0:
                log.warning(
                    "VNC client %d floods input: %d events dropped so far (MAX_PENDING_EVENTS "
                    "%d); releases still apply", client_id, self.dropped, MAX_PENDING_EVENTS,
                )
        self.push(("vnc", client_id), checked)

    @staticmethod
    def check_action(runtime: Runtime, events: Sequence[Sequence[Any]]) -> list[InputEvent]:
        """An agent's events as runtime input; :class:`Refused` naming the first bad one."""
        checked: list[InputEvent] = []
        for i, event in enumerate(events):
            if event[0] == "KeyEvent":
                _, key, down = event
                try:
                    name = keysyms.name(key) if isinstance(key, int) else keysyms.canonical(key)
                except UnknownKey as exc:
                    raise Refused(f"action[{i}]: {exc}") from None
                if name not in runtime.keys and not runtime.any_key:
                    raise Refused(
                        f"action[{i}]: {runtime.env_id} does not use key {name!r}; it takes "
                        f"{', '.join(runtime.keys) or 'no keys (use PointerEvent)'}"
                    )
                checked.append(KeyEvent(name, down))
            else:
                _, x, y, mask = event
                if not (0 <= x < runtime.width and 0 <= y < runtime.height):
                    raise Refused(
                        f"action[{i}]: pointer ({x}, {y}) is off the {runtime.width}x"
                        f"{runtime.height} screen; x must be in 0..{runtime.width - 1}, "
                        f"y in 0..{runtime.height - 1}"
                    )
                checked.append(PointerEvent(x, y, mask))
        return checked
