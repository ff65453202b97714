"""The rewarder's view of a remote: its wire requests as the game's orders, and back.

Holds :class:`RewarderFront`, what :class:`rewarder.server.RewarderServer` drives (its
``EnvHandler``). It makes each request an order of :mod:`envserver.orders` — the
requester's player from :data:`rewarder.server.PLAYER` — and turns the game's
:class:`~envserver.orders.Refused` (and a property's refusal) into
:class:`~rewarder.errors.BadRequest` with the request's message id: the only place of
the remote that knows message ids.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from rewarder import protocol
from rewarder.batch_messages import BatchStepRequest
from rewarder.errors import BadRequest
from rewarder.lograte import RateLimitedLog
from rewarder.server import PLAYER
from rewarder.snapshot_messages import RestoreRequest, SnapshotRequest, snapshot_body

from .orders import LOCKSTEP, REALTIME, ActOrder, Refused, ResetOrder, StepOrder
from .properties import PropertyError

if TYPE_CHECKING:
    from .players import Seats

log = logging.getLogger(__name__)

Reply = tuple[int, dict[str, Any]]


class Served(Protocol):
    """What :class:`RewarderFront` drives of :class:`envserver.remote.Remote` (named here so
    this module, below the remote, never imports it)."""

    #: The batch's games (:mod:`envserver.batch`), None until the remote serves a batch.
    batch_games: Any

    @property
    def episode_id(self) -> int: ...
    @property
    def mode(self) -> str: ...
    @property
    def env_id(self) -> str: ...
    @property
    def seats(self) -> Seats: ...
    def describe(self) -> dict[str, Any]: ...
    def action(self, order: ActOrder) -> None: ...
    async def properties(self, op: str, key: str, value: Any = None) -> dict[str, Any]: ...
    async def snapshot(self, export_bytes: bool = False) -> tuple[str, int, int, bytes | None]: ...
    async def restore(self, token: str | None, data: bytes | None, obs: str,
                      reply: Callable[..., None]) -> None: ...
    def client_left(self, observer: bool) -> None: ...
    def player_left(self, player: int) -> None: ...


def step_order(request: protocol.StepRequest, player: int) -> StepOrder:
    """``v0.env.step`` as the game's order."""
    return StepOrder(
        events=request.events, frames=request.frames, obs=request.obs, web=request.web,
        episode_id=request.episode_id, player=player,
    )


def reset_order(request: protocol.ResetRequest) -> ResetOrder:
    """``v0.env.reset`` as the game's order."""
    return ResetOrder(
        episode_id=request.episode_id, env_id=request.env_id, seed=request.seed,
        fps=request.fps, mode=request.mode, obs=request.obs,
    )


class RewarderFront:
    """What the rewarder server drives: the remote, with steps and resets through the
    seats' barrier (:class:`~envserver.players.Seats`).

    A reset without ``mode`` — all Universe's client ever sends — asks for real time, the
    only world Universe's clients know: on a lockstep remote it switches the remote to
    real time (logged), so such a client is served as ``docs/rewarder.md`` promises instead
    of waiting in a world that never moves. Our clients keep a lockstep remote in
    lockstep by saying so (``ClientConnection.reset`` sends the mode the remote last
    described when the caller names none).
    """

    def __init__(self, remote: Served) -> None:
        #: One line per interval for what a client may repeat (a fuzzer does, thousands
        #: of times).
        self.notes = RateLimitedLog(log)
        self.remote = remote

    @property
    def episode_id(self) -> int:
        return self.remote.episode_id

    @episode_id.setter
    def episode_id(self, value: int) -> None:
        raise AttributeError("a remote numbers its own episodes (a reset or restore moves on)")

    def describe(self) -> dict[str, Any]:
        return self.remote.describe()

    async def reset(self, request: protocol.ResetRequest, reply: Callable[..., None]) -> None:
        remote = self.remote
        order = reset_order(request)
        if order.mode is None and remote.mode == LOCKSTEP:
            self.notes.log(
                "reset without mode", logging.WARNING,
                "a reset without 'mode' (a Universe client's) on a lockstep remote: switching "
                "%s to real time, the only mode such a client knows (our clients reset with "
                "mode 'lockstep' to keep it)", remote.env_id,
            )
            order = dataclasses.replace(order, mode=REALTIME)
        try:
            await remote.seats.reset(order, reply, PLAYER.get())
        except Refused as exc:
            raise BadRequest(exc.reason, request.message_id) from exc

    def action(self, request: protocol.ActionRequest) -> None:
        order = ActOrder(
            events=request.events, web=request.web, settle=request.settle,
            action_id=request.message_id, player=PLAYER.get(),
        )
        try:
            self.remote.action(order)
        except Refused as exc:
            raise BadRequest(exc.reason, request.message_id) from None

    def step_now(self, request: protocol.StepRequest) -> Reply | None:
        """The whole step at once (synchronous), if it fits one slice and is no joint
        step: ``(episode id, reply body)``; None having done nothing (then await
        :meth:`step`); :class:`BadRequest` refuses it."""
        try:
            return self.remote.seats.step_now(step_order(request, PLAYER.get()))
        except Refused as exc:
            raise BadRequest(exc.reason, request.message_id) from exc

    async def step(self, request: protocol.StepRequest) -> Reply:
        try:
            return await self.remote.seats.step(step_order(request, PLAYER.get()))
        except Refused as exc:
            raise BadRequest(exc.reason, request.message_id) from exc

    def batch_step(self, request: BatchStepRequest, client_id: str, owner: Any) -> Any:
        """``v0.batch.step`` (envserver.batch): the reply's body, or a coroutine making it."""
        games = self.remote.batch_games
        if games is None:
            raise BadRequest("this process serves one game: v0.batch.step steps several games of "
                             "one `serve --games K` process; step this one with v0.env.step",
                             request.message_id)
        return games.step(request, client_id, owner)

    async def properties(self, request: protocol.PropertiesRequest) -> dict[str, Any]:
        try:
            return await self.remote.properties(request.op, request.key, request.value)
        except PropertyError as exc:
            raise BadRequest(str(exc), request.message_id) from None

    async def snapshot(self, request: SnapshotRequest) -> dict[str, Any]:
        """``v0.env.snapshot``: the reply's body (token, episode, frame, bytes if asked)."""
        try:
            token, episode_id, frame, data = await self.remote.snapshot(request.export)
        except Refused as exc:
            raise BadRequest(exc.reason, request.message_id) from None
        return snapshot_body(token, episode_id, frame, data)

    async def restore(self, request: RestoreRequest, reply: Callable[..., None]) -> None:
        """``v0.env.restore``: replied to as a reset is (``v0.reply.env.reset``)."""
        try:
            await self.remote.restore(request.token, request.state, request.obs, reply)
        except Refused as exc:
            raise BadRequest(exc.reason, request.message_id) from None

    def client_left(self, observer: bool) -> None:
        self.remote.client_left(observer)

    def player_left(self, player: int) -> None:
        self.remote.player_left(player)
