"""How agents and viewers act on a remote: input, action strings, who drives what.

Holds :class:`Acting` (a part of a remote, holding its game core), :class:`Actable` (what
it uses of the core) and :data:`OBSERVATIONS`. Real-time input from agents (an
:class:`~envserver.orders.ActOrder`) and VNC viewers is queued for the next frame
(:class:`~envserver.inputs.Inputs`); an action string, or a wait for the screen to
settle, runs as a task of its own whose end the agent hears as a ``v0.env.observation``
with its ``action_id`` (docs/browser.md). It also answers for who drives what: which
player an input source drives, which rewarder client holds a seat, what VNC viewers send
and let go of.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from rewarder.lograte import RateLimitedLog
from runtimes.base import Runtime

from .inputs import REWARDER_SOURCE, Inputs
from .orders import REALTIME, ActOrder, Refused
from .players import agent_source, source_player

if TYPE_CHECKING:
    from rewarder.server import RewarderServer
    from vncdriver.server import VNCServer

log = logging.getLogger("envserver.remote")

#: What the ``observe`` property may ask a browser remote for (docs/browser.md).
OBSERVATIONS: Final = frozenset({"elements", "tree"})


class Actable(Protocol):
    """What :class:`Acting` uses of the game core (:class:`envserver.game_core.GameCore`)."""

    runtime: Runtime
    episode_id: int
    frame: int
    inputs: Inputs
    leave_sinks: list[Callable[[int], None]]

    @property
    def mode(self) -> str: ...
    @property
    def env_id(self) -> str: ...
    @property
    def vnc(self) -> VNCServer: ...
    @property
    def rewarder(self) -> RewarderServer: ...


class Acting:
    """Input, action strings, page observations, and who drives what, of one game core."""

    def __init__(self, core: Actable) -> None:
        self.core = core
        #: Action strings and settling actions under way (cancelled on close).
        self.acts: set[asyncio.Task[None]] = set()
        self._acting = asyncio.Lock()  # one at a time, in the order they came
        #: One line per kind of trouble per interval.
        self.notes = RateLimitedLog(log)
        core.inputs.player_of = self._player_of
        core.inputs.on_queue = self._input_queued

    @property
    def held_keys(self) -> set[str]:
        """Keys some source holds down now (as the runtime will see them at the next frame)."""
        return self.core.inputs.held_keys

    def set_observe(self, value: str) -> None:
        """Which page observations to send (``"elements,tree"``; ``""``: none)."""
        wanted = frozenset(part.strip() for part in value.split(",") if part.strip())
        unknown = wanted - OBSERVATIONS
        if unknown:
            raise ValueError(
                f"observe takes a comma list of {', '.join(sorted(OBSERVATIONS))}, not "
                f"{', '.join(sorted(unknown))}"
            )
        runtime = self.core.runtime
        if wanted and not runtime.action_strings:
            raise ValueError(f"{runtime.env_id} has no page to observe (browser remotes do)")
        runtime.observe = wanted

    # Agents' actions ----------------------------------------------------------------------

    def action(self, order: ActOrder) -> None:
        """Real time: queue the events for the next frame; an action string, or a
        request to be told when the screen settles, runs as a task of its own whose end
        the agent hears as a ``v0.env.observation`` with ``action_id`` (docs/browser.md).
        :class:`Refused` refuses the lot."""
        runtime, source = self.core.runtime, agent_source(order.player)
        if order.web is not None and not runtime.action_strings:
            raise Refused(
                f"{runtime.env_id} takes input events, not action strings like "
                f"{order.web[:40]!r}: those are for browser remotes (miniwob.*)"
            )
        if order.settle and not runtime.settles:
            raise Refused(
                f"{runtime.env_id} cannot tell when its screen settles: 'settle' is for "
                "browser and desktop remotes (miniwob.*, x11.*)"
            )
        self.core.inputs.push_action(runtime, order.events, source)
        if order.web is not None or order.settle:
            task = asyncio.get_running_loop().create_task(self._act(order, source))
            self.acts.add(task)
            task.add_done_callback(self.acts.discard)

    async def _act(self, order: ActOrder, source: object) -> None:
        """:meth:`act`, then tell everyone what happened, with the frame it shows (filed
        under the episode that frame belongs to: an action that ended its episode is
        answered with the next one's first page, as the real-time screen shows it)."""
        body = await self.act(order, source)
        self.core.rewarder.broadcast_observation(self.core.episode_id, body)

    async def act(self, order: ActOrder, source: object = None) -> dict[str, Any]:
        """Real time: run an action string (its events already queued are the caller's)
        and/or wait for the screen to settle, one at a time; what happened (the
        ``v0.env.observation`` body: ``action_id``, ``frame``, ``last_action*``,
        ``settle``, the page if asked for)."""
        source = source if source is not None else agent_source(order.player)
        core = self.core
        async with self._acting:
            runtime = core.runtime
            body: dict[str, Any] = {"action_id": order.action_id}
            try:
                if order.web is not None:
                    body.update(await runtime.arun_action(
                        order.web, lambda events: core.inputs.push(source, events)
                    ))
                if order.settle:
                    body["settle"] = await runtime.asettle()
                body.update(await runtime.aobservation())
            except Exception as exc:  # the page went away under it: the agent must hear
                self.notes.log("act", logging.WARNING, "%s: an action failed: %r", runtime.env_id,
                               exc)
                body.setdefault("last_action_error", f"the remote could not run it: {exc}")
            body["frame"] = core.frame
            return body

    async def page(self, parts: frozenset[str]) -> dict[str, Any]:
        """A browser's page structure now (``parts`` of :data:`OBSERVATIONS`), whatever
        the ``observe`` property says: the body's ``page``, or {} for other runtimes."""
        runtime = self.core.runtime
        if not runtime.action_strings:
            return {}
        return await runtime.aobservation(parts)

    # Agents and viewers leaving -----------------------------------------------------------

    def client_left(self, observer: bool) -> None:
        if not observer:
            self.core.inputs.release(REWARDER_SOURCE)
            self._left(0)

    def player_left(self, player: int) -> None:
        """Player ``player``'s agent (above 0) left: let go of what it held."""
        self.core.inputs.release(agent_source(player))
        self._left(player)

    def _left(self, player: int) -> None:
        for sink in self.core.leave_sinks:
            sink(player)

    # Input from VNC, and who drives what ----------------------------------------------------

    def vnc_input(self, client_id: int, events: Sequence[Any]) -> None:
        """A VNC viewer's input (the VNC server's ``on_input``)."""
        self.core.inputs.push_vnc(self.core.runtime, client_id, events)

    def vnc_left(self, client_id: int) -> None:
        """A VNC viewer left: let go of what it held (the VNC server's ``on_disconnect``)."""
        self.core.inputs.release(("vnc", client_id))

    def _input_queued(self, events: Sequence[Any]) -> None:
        """Real time: hand a runtime that forwards input (an X program) each event as it
        comes, not at the next frame: its program keeps its own time, and a frame's wait
        was most of a viewer's action -> pixel latency."""
        runtime = self.core.runtime
        if runtime.forwards_input and self.core.mode == REALTIME:
            try:
                runtime.forward(events)
            except Exception as exc:  # the next frame finds the runtime's fault
                self.notes.log(
                    "forward", logging.WARNING, "forwarding input to %s failed: %r",
                    runtime.env_id, exc,
                )

    def _player_of(self, source: object) -> int:
        """The player an input source drives (0 on single-player runtimes)."""
        core = self.core
        if core.runtime.players == 1:
            return 0
        return source_player(source, core.vnc.player_of)

    def rewarder_holder(self, player: int) -> str | None:
        """The rewarder client seated as ``player``, named for describe and errors (the
        seats' ``rewarder_holder``)."""
        client = self.core.rewarder.seated.get(player)
        if client is None:
            return None
        return "rewarder client" + (f" {client.client_id!r}" if client.client_id else "")
