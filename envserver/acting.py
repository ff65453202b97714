"""How agents and viewers act on a remote: input, action strings, properties, who drives.

Holds :class:`Acting` (a part of :class:`envserver.remote.Remote`) and
:data:`OBSERVATIONS`. Real-time input from agents (an :class:`~envserver.orders.ActOrder`)
and VNC viewers is queued for the next frame (:class:`~envserver.inputs.Inputs`); an
action string, or a wait for the screen to settle, runs as a task of its own whose end
the agent hears as a ``v0.env.observation`` with its ``action_id`` (docs/browser.md).
Properties (``v0.env.properties.*``, the dm_env_rpc extension) are read and written
through the remote's table.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final

from .inputs import REWARDER_SOURCE
from .orders import REALTIME, ActOrder, Refused
from .players import agent_source, source_player
from .remote_base import RemoteBase

#: What the ``observe`` property may ask a browser remote for (docs/browser.md).
OBSERVATIONS: Final = frozenset({"elements", "tree"})


class Acting(RemoteBase):
    """Input, action strings, page observations and properties of one remote."""

    _acts: set[asyncio.Task[None]]  # action strings, settling actions
    _acting: asyncio.Lock  # one at a time, in the order they came

    @property
    def held_keys(self) -> set[str]:
        """Keys some source holds down now (as the runtime will see them at the next frame)."""
        return self.inputs.held_keys

    def set_observe(self, value: str) -> None:
        """Which page observations to send (``"elements,tree"``; ``""``: none)."""
        wanted = frozenset(part.strip() for part in value.split(",") if part.strip())
        unknown = wanted - OBSERVATIONS
        if unknown:
            raise ValueError(
                f"observe takes a comma list of {', '.join(sorted(OBSERVATIONS))}, not "
                f"{', '.join(sorted(unknown))}"
            )
        if wanted and not self.runtime.action_strings:
            raise ValueError(f"{self.env_id} has no page to observe (browser remotes do)")
        self.runtime.observe = wanted

    # Agents' actions ----------------------------------------------------------------------

    def action(self, order: ActOrder) -> None:
        """Real time: queue the events for the next frame; an action string, or a
        request to be told when the screen settles, runs as a task of its own whose end
        the agent hears as a ``v0.env.observation`` with ``action_id`` (docs/browser.md).
        :class:`Refused` refuses the lot."""
        runtime, source = self.runtime, agent_source(order.player)
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
        self.inputs.push_action(runtime, order.events, source)
        if order.web is not None or order.settle:
            task = asyncio.get_running_loop().create_task(self._act(order, source))
            self._acts.add(task)
            task.add_done_callback(self._acts.discard)

    async def _act(self, order: ActOrder, source: object) -> None:
        """:meth:`act`, then tell everyone what happened, with the frame it shows (filed
        under the episode that frame belongs to: an action that ended its episode is
        answered with the next one's first page, as the real-time screen shows it)."""
        body = await self.act(order, source)
        self.rewarder.broadcast_observation(self.episode_id, body)

    async def act(self, order: ActOrder, source: object = None) -> dict[str, Any]:
        """Real time: run an action string (its events already queued are the caller's)
        and/or wait for the screen to settle, one at a time; what happened (the
        ``v0.env.observation`` body: ``action_id``, ``frame``, ``last_action*``,
        ``settle``, the page if asked for)."""
        source = source if source is not None else agent_source(order.player)
        async with self._acting:
            runtime = self.runtime
            body: dict[str, Any] = {"action_id": order.action_id}
            try:
                if order.web is not None:
                    body.update(await runtime.arun_action(
                        order.web, lambda events: self.inputs.push(source, events)
                    ))
                if order.settle:
                    body["settle"] = await runtime.asettle()
                body.update(await runtime.aobservation())
            except Exception as exc:  # the page went away under it: the agent must hear
                self._notes.log("act", logging.WARNING, "%s: an action failed: %r", self.env_id, exc)
                body.setdefault("last_action_error", f"the remote could not run it: {exc}")
            body["frame"] = self.frame
            return body

    async def page(self, parts: frozenset[str]) -> dict[str, Any]:
        """A browser's page structure now (``parts`` of :data:`OBSERVATIONS`), whatever
        the ``observe`` property says: the body's ``page``, or {} for other runtimes."""
        if not self.runtime.action_strings:
            return {}
        return await self.runtime.aobservation(parts)

    async def properties(self, op: str, key: str, value: Any = None) -> dict[str, Any]:
        """List (``op`` "list"), read or write the remote's properties; the reply body.
        :class:`~envserver.properties.PropertyError` refuses."""
        table = self.property_table
        if op == "list":
            return {"properties": table.specs()}
        if op == "write":
            await table.write(key, value)
        return {"key": key, "value": table.read(key)}

    # Agents and viewers leaving -----------------------------------------------------------

    def client_left(self, observer: bool) -> None:
        if not observer:
            self.inputs.release(REWARDER_SOURCE)
            self._left(0)

    def player_left(self, player: int) -> None:
        """Player ``player``'s agent (above 0) left: let go of what it held."""
        self.inputs.release(agent_source(player))
        self._left(player)

    def _left(self, player: int) -> None:
        for sink in self.leave_sinks:
            sink(player)

    # Input from VNC, and who drives what ----------------------------------------------------

    def _vnc_input(self, client_id: int, events: Sequence[Any]) -> None:
        self.inputs.push_vnc(self.runtime, client_id, events)

    def _vnc_left(self, client_id: int) -> None:
        self.inputs.release(("vnc", client_id))

    def _input_queued(self, events: Sequence[Any]) -> None:
        """Real time: hand a runtime that forwards input (an X program) each event as it
        comes, not at the next frame: its program keeps its own time, and a frame's wait
        was most of a viewer's action -> pixel latency."""
        if self.runtime.forwards_input and self.mode == REALTIME:
            try:
                self.runtime.forward(events)
            except Exception as exc:  # the next frame finds the runtime's fault
                self._notes.log(
                    "forward", logging.WARNING, "forwarding input to %s failed: %r", self.env_id, exc
                )

    def _player_of(self, source: object) -> int:
        """The player an input source drives (0 on single-player runtimes)."""
        if self.runtime.players == 1:
            return 0
        return source_player(source, self.vnc.player_of)

    def _rewarder_holder(self, player: int) -> str | None:
        """The rewarder client seated as ``player``, named for describe and errors."""
        client = self.rewarder.seated.get(player)
        if client is None:
            return None
        return "rewarder client" + (f" {client.client_id!r}" if client.client_id else "")
