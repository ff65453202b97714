"""One dm_env_rpc connection: its requests, answered in order, against the remote's world.

A connection is unjoined, or joined at a sequence's first step, or running; the table
:data:`ALLOWED` says which requests each phase takes (others are refused with what to
do, and the stream stays open). A step in real time sends the action's input events and
returns the screen at the next frame boundary (``frameskip`` frames after the last step
at least); in lockstep it advances exactly ``frameskip`` frames through the same
state machine and ``Runtime.advance`` the rewarder drives. A step whose sequence ended
says TERMINATED; one whose sequence was ended by someone else (ResetWorld, a ``mode``
write) says INTERRUPTED; either way the next step starts the next sequence, its actions
ignored, as dm_env_rpc specifies.

A browser remote's ``page`` observation (the JSON of a ``v0.env.observation`` body) is
made only when a step requests it: the page an advance made for the frame returned (a
lockstep step's, once the remote's ``observe`` property asks for one), else the page
now (the parts ``observe`` names, or all of them). Its ``web_action`` (a BrowserGym
action string) runs after the step's events, as the rewarder's action strings do: in
lockstep inside the step, in real time before the step waits for its frame, once the
page is still again; ``last_action_error`` says what it could not do.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import orjson
from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb
from dm_env_rpc.v1.extensions import properties_pb2 as props
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2

from runtimes.base import StepResult

from .. import agent_port
from ..agent_port import CALLER, STEP_TIMEOUT, Held, Ledger, RemoteLike
from ..orders import LOCKSTEP, REALTIME, ActOrder, Refused, StepOrder
from ..properties import PropertyError
from . import properties
from .specs import (
    EPISODE_ID,
    FRAME,
    LAST_ACTION_ERROR,
    PAGE,
    REWARD,
    RGB,
    TEXT,
    WEB_ACTION,
    SpecError,
    Specs,
    action_events,
    check_requested,
    pack_observations,
)
from .world import World, WorldError, unpack_join_settings, unpack_settings

_worlds = itertools.count(1)
#: What a requested ``page`` holds while the remote's ``observe`` property names nothing.
PAGE_PARTS: Final = frozenset({"elements", "tree"})


class Phase(enum.Enum):
    UNJOINED = "unjoined"
    FIRST = "at a sequence's first step"
    RUNNING = "running"


#: The requests each phase takes. Every other pair is refused (FAILED_PRECONDITION).
ALLOWED: Final[Mapping[Phase, frozenset[str]]] = {
    Phase.UNJOINED: frozenset(
        {"create_world", "join_world", "leave_world", "reset_world", "destroy_world", "extension"}
    ),
    Phase.FIRST: frozenset(
        {"create_world", "step", "reset", "leave_world", "reset_world", "destroy_world", "extension"}
    ),
    Phase.RUNNING: frozenset(
        {"create_world", "step", "reset", "leave_world", "reset_world", "destroy_world", "extension"}
    ),
}
_HINTS: Final = {
    Phase.UNJOINED: "join a world first (CreateWorld, then JoinWorld)",
    Phase.FIRST: "this connection has joined a world already: LeaveWorld first",
    Phase.RUNNING: "this connection has joined a world already: LeaveWorld first",
}


class Endpoint:
    """What every connection of one remote shares: the remote and its world, if any."""

    def __init__(self, remote: RemoteLike) -> None:
        self.remote = remote
        self.world: World | None = None

    def named(self, name: str) -> World:
        world = self.world
        if world is None or world.name != name:
            have = f"its world is {world.name!r}" if world is not None else "it has no world (CreateWorld)"
            raise WorldError(code_pb2.NOT_FOUND, f"this remote has no world {name!r}: {have}")
        return world

    def held_by(self) -> str | None:
        """Which dm_env_rpc agent holds the remote (the rewarder refuses agents meanwhile)."""
        world = self.world
        if world is None or world.joined is None:
            return None
        return f"a dm_env_rpc agent (joined to world {world.name!r})"

    def free(self) -> None:
        """Refuse to change the remote under an agent of the rewarder (on a multi-player
        remote agents of both front ends share it, a player each)."""
        if self.remote.seats.players > 1:
            return
        agent = self.remote.agent()
        if agent is not None:
            raise WorldError(
                code_pb2.FAILED_PRECONDITION,
                f"{agent} drives this remote; one agent at a time: wait until it leaves",
            )


@dataclass
class Session:
    """One connection's state; :meth:`handle` answers each request."""

    endpoint: Endpoint
    phase: Phase = Phase.UNJOINED
    specs: Specs | None = None
    held: Held = field(default_factory=Held)
    episode: int = 0
    needs_reset: bool = True
    last_frame: int = 0
    text: str = ""
    seen: Ledger = field(default_factory=Ledger)
    #: The player this connection joined as (multi-player runtimes; 0 otherwise).
    player: int = 0
    #: The newest page an advance made: (episode, frame, observation body).
    heard_page: tuple[int, int, dict[str, Any]] | None = None
    #: What the last step's ``web_action`` could not do ("" when it ran, or none came).
    action_error: str = ""

    @property
    def remote(self) -> RemoteLike:
        return self.endpoint.remote

    async def handle(self, request: pb.EnvironmentRequest) -> pb.EnvironmentResponse:
        """The response to ``request``: its payload's, or an error (the stream goes on)."""
        which = request.WhichOneof("payload")
        CALLER.set(self.player)  # whose share of a joint reset a world's reset is
        try:
            if which is None:
                raise WorldError(code_pb2.INVALID_ARGUMENT, "an EnvironmentRequest with no payload")
            if which not in ALLOWED[self.phase]:
                if which == "join_world":
                    raise WorldError(code_pb2.FAILED_PRECONDITION, _HINTS[self.phase])
                raise WorldError(
                    code_pb2.FAILED_PRECONDITION,
                    f"{which} needs a joined world; {_HINTS[self.phase]}",
                )
            result = await getattr(self, f"_{which}")(getattr(request, which))
            return pb.EnvironmentResponse(**{which: result})
        except WorldError as exc:
            return _error(exc.code, str(exc))
        except PropertyError as exc:
            return _error(properties.CODES[exc.refusal], str(exc))
        except (SpecError, ValueError) as exc:
            return _error(code_pb2.INVALID_ARGUMENT, str(exc))
        except Refused as exc:  # the remote refused (its state machine, its runtime)
            return _error(code_pb2.FAILED_PRECONDITION, exc.reason)
        except TimeoutError:
            return _error(
                code_pb2.UNAVAILABLE,
                f"no frame within {STEP_TIMEOUT:g} s (STEP_TIMEOUT): the remote is stalled",
            )

    def close(self) -> None:
        """The stream ended: leave the world (held keys are released)."""
        if self.phase is not Phase.UNJOINED:
            self._leave()

    # Worlds ------------------------------------------------------------------------------

    async def _create_world(self, request: pb.CreateWorldRequest) -> pb.CreateWorldResponse:
        endpoint = self.endpoint
        if endpoint.world is not None:
            raise WorldError(
                code_pb2.FAILED_PRECONDITION,
                f"this remote has a world already, {endpoint.world.name!r} (one per remote): "
                "join it, or destroy it first",
            )
        settings = unpack_settings(request.settings)
        endpoint.free()
        env_id = settings.get("env_id") or self.remote.describe()["env_id"]
        world = World(self.remote, name=f"{env_id}/{next(_worlds)}")
        await world.apply(settings, start=False)
        endpoint.world = world
        return pb.CreateWorldResponse(world_name=world.name)

    async def _reset_world(self, request: pb.ResetWorldRequest) -> pb.ResetWorldResponse:
        world = self.endpoint.named(request.world_name)
        settings = unpack_settings(request.settings)
        self._may_change(world, "ResetWorld")
        await world.apply(settings, start=True)
        return pb.ResetWorldResponse()

    def _may_change(self, world: World, what: str) -> None:
        """Only the agent that holds the world changes it (ResetWorld, property writes): a
        connection joined to it (on a multi-player world, any seated one), or anyone while
        nobody holds the remote. Others may read; they are refused with PERMISSION_DENIED
        naming the holder. (Measured before: a stream that never joined took a joined
        agent's game from 59.9 to 2.0 fps with one write, and ResetWorld switched it to
        lockstep.)"""
        if world.joined is self or any(s is self for s in world.seated.values()):
            return
        holder: str | None
        if world.joined is not None:
            holder = f"the dm_env_rpc agent joined to world {world.name!r}"
        elif self.remote.seats.players > 1:
            seated = self.remote.seats.seated()
            holder = self.remote.seats.holder(seated[0]) if seated else None
        else:
            holder = self.remote.agent()
        if holder is not None:
            raise WorldError(
                code_pb2.PERMISSION_DENIED,
                f"{what}: {holder} holds this remote, and only the agent that holds the world "
                "changes it (this connection may read properties); JoinWorld once it has left",
            )

    async def _destroy_world(self, request: pb.DestroyWorldRequest) -> pb.DestroyWorldResponse:
        world = self.endpoint.named(request.world_name)
        if world.joined is not None:
            raise WorldError(
                code_pb2.FAILED_PRECONDITION,
                f"an agent has joined world {world.name!r}: it must LeaveWorld before the world goes",
            )
        self.endpoint.world = None
        return pb.DestroyWorldResponse()

    async def _join_world(self, request: pb.JoinWorldRequest) -> pb.JoinWorldResponse:
        world = self.endpoint.named(request.world_name)
        player = unpack_join_settings(request.settings).get("player", 0)
        seats = self.remote.seats
        if seats.players > 1:
            return await self._join_seat(world, player)
        if player != 0:
            raise WorldError(
                code_pb2.INVALID_ARGUMENT,
                f"{self.remote.describe()['env_id']} has one player (0); JoinWorld asked for "
                f"player {player}",
            )
        if world.joined is not None:
            raise WorldError(
                code_pb2.FAILED_PRECONDITION,
                f"another agent has joined world {world.name!r}; one agent at a time",
            )
        self.endpoint.free()
        world.joined = self
        self.remote.result_sinks.append(self._on_result)
        self.remote.episode_sinks.append(self._on_episode)
        self.held = Held()
        self._begin(needs_reset=True)
        return pb.JoinWorldResponse(specs=self._specs().proto)

    async def _join_seat(self, world: World, player: int) -> pb.JoinWorldResponse:
        """Join a multi-player world as ``player``, if that seat is free."""
        try:
            self.remote.seats.check(player, "JoinWorld")
        except ValueError as exc:
            raise WorldError(code_pb2.FAILED_PRECONDITION, str(exc)) from None
        self.player = player
        world.seated[player] = self
        world.joined = world.joined or self
        self.remote.seats.dm_env_rpc[player] = f"a dm_env_rpc agent (world {world.name!r})"
        self.remote.result_sinks.append(self._on_result)
        self.remote.episode_sinks.append(self._on_episode)
        self.held = Held()
        self._begin(needs_reset=True)
        return pb.JoinWorldResponse(specs=self._specs().proto)

    async def _leave_world(self, request: pb.LeaveWorldRequest) -> pb.LeaveWorldResponse:
        if self.phase is not Phase.UNJOINED:
            self._leave()
        return pb.LeaveWorldResponse()

    def _leave(self) -> None:
        world = self.endpoint.world
        if world is not None and world.seated.get(self.player) is self:
            del world.seated[self.player]
            self.remote.seats.dm_env_rpc.pop(self.player, None)
        if world is not None and world.joined is self:
            world.joined = next(iter(world.seated.values()), None)
        if self._on_result in self.remote.result_sinks:
            self.remote.result_sinks.remove(self._on_result)
        if self._on_episode in self.remote.episode_sinks:
            self.remote.episode_sinks.remove(self._on_episode)
        if self.player:
            self.remote.player_left(self.player)  # let go of what its player held
        else:
            self.remote.client_left(observer=False)  # let go of the keys and buttons it held
        self.phase, self.specs = Phase.UNJOINED, None

    async def _reset(self, request: pb.ResetRequest) -> pb.ResetResponse:
        world = self._world()
        await world.apply(unpack_settings(request.settings), start=True)
        self.specs = None  # an env switch changes them
        self._begin(needs_reset=False)
        return pb.ResetResponse(specs=self._specs().proto)

    async def _extension(self, request: any_pb2.Any) -> any_pb2.Any:
        if not request.Is(props.PropertyRequest.DESCRIPTOR):
            raise WorldError(
                code_pb2.UNIMPLEMENTED,
                f"unknown extension {request.type_url!r}; this remote has the Properties extension",
            )
        world = self.endpoint.world
        if world is None:
            raise WorldError(code_pb2.FAILED_PRECONDITION, "properties belong to a world: CreateWorld first")
        unpacked = props.PropertyRequest()
        request.Unpack(unpacked)
        if unpacked.WhichOneof("payload") == "write_property":
            self._may_change(world, f"writing property {unpacked.write_property.key!r}")
        packed = any_pb2.Any()
        packed.Pack(await properties.handle(world.properties, unpacked))
        return packed

    # Steps ----------------------------------------------------------------------------------

    async def _step(self, request: pb.StepRequest) -> pb.StepResponse:
        specs = self._specs()
        check_requested(specs, request.requested_observations)
        remote = self.remote
        self.action_error = ""
        if self.phase is Phase.FIRST:  # the actions are ignored, as the protocol says
            if self.needs_reset:
                await self._world().reset()
            self._start_sequence(remote.episode_id)
            return await self._respond(request, pb.EnvironmentStateType.RUNNING, 0.0)
        if remote.episode_id != self.episode and not self.seen.get(self.episode).done:
            self._begin(needs_reset=False)  # someone else began a new one
            return await self._respond(request, pb.EnvironmentStateType.INTERRUPTED, 0.0)
        actions = specs.unpack_actions(request.actions)
        web = str(actions.pop(WEB_ACTION)) if WEB_ACTION in actions else None
        events = action_events(self.held, specs, actions)
        frameskip = self._world().frameskip
        if remote.mode == LOCKSTEP:
            _, body = await agent_port.step(remote, StepOrder(
                events=tuple(events), frames=frameskip, episode_id=self.episode,
                player=self.player, web=web or None,
            ))
            self.action_error = str(body["info"].get("web.last_action_error") or "")
        else:
            if events:
                remote.action(ActOrder(events=tuple(events), player=self.player))
            if web:  # run it, and wait until the page is still again (as OpenEnv's port)
                done = await remote.act(ActOrder(web=web, settle=True, player=self.player))
                self.action_error = str(done.get("last_action_error") or "")
            after = max(remote.frame, self.last_frame + frameskip - 1)
            async with asyncio.timeout(STEP_TIMEOUT):
                await remote.wait_frame(after)
        seen = self.seen.pop(self.episode)
        if seen.done:
            self._begin(needs_reset=remote.mode == LOCKSTEP)
            return await self._respond(request, pb.EnvironmentStateType.TERMINATED, seen.reward,
                                       seen.final_screen)
        return await self._respond(request, pb.EnvironmentStateType.RUNNING, seen.reward)

    def _on_result(self, episode_id: int, result: StepResult) -> None:
        """The remote's result sink: every advance, in either mode, as it happens."""
        if result.text is not None:
            self.text = result.text
        observation = result.observation
        if isinstance(observation, dict) and PAGE in observation:
            self.heard_page = (episode_id, self.remote.frame, observation)
        own = result.reward if result.rewards is None else result.rewards[self.player]
        if not (own or result.done):
            return
        realtime = self.remote.mode == REALTIME  # the remote draws the next episode next
        self.seen.heard(episode_id, own, result.done, self.remote.screen if realtime else None)

    def _on_episode(self, episode_id: int, seed: int, text: str | None) -> None:
        """The remote's episode sink: a new episode's text (a MiniWoB task's instruction
        comes only with its reset, never with an advance)."""
        if text is not None:
            self.text = text

    def _begin(self, needs_reset: bool) -> None:
        self.phase, self.needs_reset = Phase.FIRST, needs_reset

    def _start_sequence(self, episode_id: int) -> None:
        self.phase, self.episode, self.needs_reset = Phase.RUNNING, episode_id, False
        self.seen.forget_before(episode_id)

    async def _respond(self, request: pb.StepRequest, state: int, reward: float,
                       screen: np.ndarray | None = None) -> pb.StepResponse:
        """:meth:`_response`, with the page made first when the step requests it."""
        specs = self._specs()
        wanted = specs.page and any(
            specs.observations_by_uid[uid].name == PAGE for uid in request.requested_observations
        )
        page = await self._page(final=screen is not None) if wanted else None
        return self._response(request, state, reward, screen, page)

    async def _page(self, final: bool) -> str:
        """The ``page`` observation: the page an advance made for the current frame (or,
        for an episode's final screen, its last), else the runtime's page now."""
        remote, heard = self.remote, self.heard_page
        frame = remote.frame
        if heard is not None and (heard[:2] == (remote.episode_id, frame)
                                  or (final and heard[0] == self.episode)):
            body, frame = heard[2], heard[1]
        elif final:
            body = {}  # the next episode shows already: its page is not this one's
        else:
            body = await remote.page(remote.runtime.observe or PAGE_PARTS)
            frame = remote.frame  # (real time moved on meanwhile: the frame returned)
        return orjson.dumps({**body, "frame": frame}).decode()

    def _response(self, request: pb.StepRequest, state: int, reward: float,
                  screen: np.ndarray | None = None, page: str | None = None) -> pb.StepResponse:
        remote = self.remote
        self.last_frame = remote.frame
        requested = request.requested_observations
        if not requested:
            return pb.StepResponse(state=state)
        values = {
            RGB: remote.screen() if screen is None else screen,
            REWARD: reward, TEXT: self.text, EPISODE_ID: self.episode, FRAME: remote.frame,
            PAGE: page or "", LAST_ACTION_ERROR: self.action_error,
        }
        return pb.StepResponse(state=state, observations=pack_observations(self._specs(), requested, values))

    def _world(self) -> World:
        world = self.endpoint.world
        if world is None or (world.joined is not self and world.seated.get(self.player) is not self):
            raise WorldError(code_pb2.FAILED_PRECONDITION, "the world this connection joined is gone")
        return world

    def _specs(self) -> Specs:
        if self.specs is None:
            runtime = self.remote.runtime
            self.specs = Specs.of(self.remote.describe(), page=bool(runtime.action_strings))
        return self.specs


def _error(code: int, message: str) -> pb.EnvironmentResponse:
    return pb.EnvironmentResponse(error=status_pb2.Status(code=code, message=message))
