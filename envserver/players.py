"""Several agents in one world: who holds each player of a multi-player runtime, and the
lockstep barrier that advances a frame once every seated player has stepped.

Holds :class:`Seats` (one per remote) and the constants of joint steps. A *seat* is a
player of the runtime (``Runtime.players``) held by an active agent: a rewarder client
(header ``openai-player: N``, none means player 0, so Universe's clients play player 0)
or a dm_env_rpc agent (JoinWorld setting ``player``). VNC viewers drive a player through
its VNC password and hold no seat (``docs/multiagent.md``).

Input and rewards are addressed by player: a player's events reach the runtime as
:class:`~runtimes.base.PlayerEvent` (player 0's stay bare), each seated agent's reward is
its own (``info["remote.player"]``), everyone sees all of them (``info["remote.rewards"]``).

**Joint steps.** In lockstep with two or more seated players, ``v0.env.step`` (and
``v0.env.reset``) is a barrier: the frame advances when every seated player's request has
arrived, with each player's events applied to its own paddle, and each gets its reply.
A player that does not step within :data:`JOINT_STEP_TIMEOUT` seconds of the first one
fails the round: every waiting player gets an error naming it, and nothing advances.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from rewarder import protocol
from rewarder.errors import BadRequest
from rewarder.protocol import PLAYER_INFO_KEY, REWARDS_INFO_KEY
from rewarder.server import PLAYER
from runtimes.base import StepResult

from .inputs import REWARDER_SOURCE, Inputs

if TYPE_CHECKING:
    from .remote import Remote

#: Seconds a joint lockstep step (or reset) waits, from its first player's request, for
#: the other seated players' before it fails naming the ones that did not come.
JOINT_STEP_TIMEOUT: Final = 30.0
#: Characters of a VNC password that count (VNC Authentication keys DES with 8 bytes).
VNC_PASSWORD_CHARS: Final = 8
#: The input source of player N's rewarder or dm_env_rpc agent (player 0's is
#: ``REWARDER_SOURCE``, as on a single-player remote); recordings name it ``agent:N``.
AGENT_SOURCE: Final = "agent"

Reply = tuple[int, dict[str, Any]]


def agent_source(player: int) -> object:
    """The input source of ``player``'s agent."""
    return REWARDER_SOURCE if player == 0 else (AGENT_SOURCE, player)


@dataclasses.dataclass
class _Round:
    """One joint step or reset being gathered: each player's request and its reply."""

    kind: str
    requests: dict[int, Any] = dataclasses.field(default_factory=dict)
    replies: dict[int, asyncio.Future[Any]] = dataclasses.field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None


class Seats:
    """The players of one remote's runtime and who holds each; the joint-step barrier."""

    def __init__(self, remote: Remote) -> None:
        self.remote = remote
        #: Seats held by dm_env_rpc agents: player -> who.
        self.dm_env_rpc: dict[int, str] = {}
        #: How long a joint step waits for the last player (tests shorten it).
        self.timeout = JOINT_STEP_TIMEOUT
        self._rounds: dict[str, _Round] = {}

    @property
    def players(self) -> int:
        return int(self.remote.runtime.players)

    def holder(self, player: int) -> str | None:
        """Who holds ``player``'s seat, or None."""
        client = self.remote.rewarder.seated.get(player)
        if client is not None:
            who = f" {client.client_id!r}" if client.client_id else ""
            return f"rewarder client{who}"
        return self.dm_env_rpc.get(player)

    def held_elsewhere(self, player: int) -> str | None:
        """Who holds ``player``'s seat on another front end than the rewarder."""
        return self.dm_env_rpc.get(player) if self.players > 1 else None

    def seated(self) -> list[int]:
        return [p for p in range(self.players) if self.holder(p) is not None]

    def free(self) -> list[int]:
        return [p for p in range(self.players) if self.holder(p) is None]

    def describe(self) -> list[dict[str, Any]]:
        """``describe["seats"]``: every player and who holds it (None: nobody)."""
        return [{"player": p, "holder": self.holder(p)} for p in range(self.players)]

    def check(self, player: int, what: str) -> None:
        """Refuse a player the runtime does not have, or a seat someone holds."""
        if not 0 <= player < self.players:
            raise ValueError(
                f"{self.remote.runtime.env_id} has {self.players} player(s), 0.."
                f"{self.players - 1}; {what} asked for player {player}"
            )
        holder = self.holder(player)
        if holder is not None:
            free = ", ".join(map(str, self.free())) or "none"
            raise ValueError(
                f"player {player} of {self.remote.runtime.env_id} is held by {holder}; free "
                f"players: {free}"
            )

    def check_passwords(
        self, passwords: Mapping[int, str] | None, password: str | None
    ) -> dict[int, str]:
        """Per-player VNC passwords, refused where they cannot work: a single-player
        runtime, a player it lacks, or two players (or a player and the full password)
        whose first :data:`VNC_PASSWORD_CHARS` characters agree, which VNC cannot tell
        apart."""
        passwords = dict(passwords or {})
        if not passwords:
            return passwords
        env_id = self.remote.runtime.env_id
        if self.players == 1:
            raise ValueError(
                f"{env_id} has one player: per-player VNC passwords are for multi-player "
                "envs such as builtin.Duel-v0; use --password"
            )
        seen: dict[str, str] = {}
        if password is not None:
            seen[password[:VNC_PASSWORD_CHARS]] = "the remote's password"
        for player, secret in sorted(passwords.items()):
            if not 0 <= player < self.players:
                raise ValueError(
                    f"{env_id} has players 0..{self.players - 1}; there is no player {player} "
                    "to give a VNC password"
                )
            if not secret:
                raise ValueError(f"player {player}'s VNC password is empty")
            key = secret[:VNC_PASSWORD_CHARS]
            if key in seen:
                raise ValueError(
                    f"player {player}'s VNC password is {seen[key]} in its first "
                    f"{VNC_PASSWORD_CHARS} characters (all VNC compares): make them differ"
                )
            seen[key] = f"player {player}'s"
        return passwords

    # Input and rewards ----------------------------------------------------------------------

    def player_of(self, source: object) -> int:
        """The player an input source drives (0 on single-player runtimes)."""
        if self.players == 1:
            return 0
        if isinstance(source, tuple) and len(source) == 2:
            kind, number = source
            if kind == AGENT_SOURCE:
                return int(number)
            if kind == "vnc" and self.remote.vnc is not None:
                return self.remote.vnc.player_of(int(number))
        return 0

    def source(self) -> object:
        """The input source of the rewarder or dm_env_rpc request being served: its
        agent's player (:data:`rewarder.server.PLAYER`)."""
        return agent_source(PLAYER.get())

    def address(self, result: StepResult, body: dict[str, Any]) -> None:
        """Make a step reply ``body`` the requester's: its own reward, every player's in
        ``info["remote.rewards"]``."""
        if result.rewards is None:
            return
        player = PLAYER.get()
        body["reward"] = result.rewards[player]
        body["info"] = {
            **body["info"], PLAYER_INFO_KEY: player, REWARDS_INFO_KEY: list(result.rewards)
        }

    # The barrier --------------------------------------------------------------------------

    def joint(self, request: Any = None) -> bool:
        """Whether steps and resets wait for every seated player: two or more seated, in
        lockstep or a reset into it (both players' resets switching a real-time remote to
        lockstep make one reset, as the steps after them make one step each)."""
        lockstep = protocol.LOCKSTEP in (self.remote.mode, getattr(request, "mode", None))
        return lockstep and len(self.seated()) > 1

    async def step(self, request: protocol.StepRequest) -> Reply:
        """One player's share of a joint step; its own reply once the frame advanced."""
        reply: Reply = await self._join("step", request, self._run_step)
        return reply

    async def reset(self, request: protocol.ResetRequest, reply: Callable[[int], None]) -> None:
        """One player's share of a joint reset: the world resets once every seated player
        asked; each is answered with the new episode id."""
        episode: int = await self._join("reset", request, self._run_reset)
        reply(episode)

    async def _join(
        self, kind: str, request: Any, run: Callable[[dict[int, Any]], Awaitable[dict[int, Any]]]
    ) -> Any:
        player = PLAYER.get()
        round_ = self._rounds.get(kind)
        if round_ is None:
            round_ = self._rounds[kind] = _Round(kind)
            loop = asyncio.get_running_loop()
            round_.timer = loop.call_later(self.timeout, self._expire, round_)
        if player in round_.requests:
            raise BadRequest(
                f"player {player} already sent v0.env.{kind} for this frame; wait for its "
                "reply (the frame advances when every seated player has sent one)",
                request.message_id,
            )
        round_.requests[player] = request
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        round_.replies[player] = future
        if set(self.seated()) <= set(round_.requests):
            self._close(round_)
            try:
                results = await run(round_.requests)
            except BadRequest as exc:
                for other, waiter in round_.replies.items():
                    if not waiter.done():
                        waiter.set_exception(
                            BadRequest(exc.message, round_.requests[other].message_id)
                        )
            except Exception as exc:
                for waiter in round_.replies.values():
                    if not waiter.done():
                        waiter.set_exception(exc)
            else:
                for other, waiter in round_.replies.items():
                    if not waiter.done():
                        waiter.set_result(results[other])
        return await future

    def _close(self, round_: _Round) -> None:
        if self._rounds.get(round_.kind) is round_:
            del self._rounds[round_.kind]
        if round_.timer is not None:
            round_.timer.cancel()

    def _expire(self, round_: _Round) -> None:
        """:data:`JOINT_STEP_TIMEOUT` passed: fail the round, naming who did not come."""
        self._close(round_)
        missing = [p for p in self.seated() if p not in round_.requests]
        names = ", ".join(f"player {p} ({self.holder(p)})" for p in missing) or "nobody"
        for player, waiter in round_.replies.items():
            if not waiter.done():
                waiter.set_exception(BadRequest(
                    f"joint v0.env.{round_.kind} timed out: {names} did not send "
                    f"v0.env.{round_.kind} within {self.timeout:g} s (JOINT_STEP_TIMEOUT); "
                    "nothing advanced: send it again when every seated player is stepping",
                    round_.requests[player].message_id,
                ))

    def left(self, player: int) -> None:
        """``player``'s agent left: a round waiting for it would wait in vain."""
        if self._rounds:
            self.cancel(f"player {player}'s agent left")

    def cancel(self, why: str) -> None:
        """Fail every round being gathered (a player left, the mode changed)."""
        for round_ in list(self._rounds.values()):
            self._close(round_)
            for player, waiter in round_.replies.items():
                if not waiter.done():
                    waiter.set_exception(BadRequest(
                        f"joint v0.env.{round_.kind} abandoned: {why}; send it again",
                        round_.requests[player].message_id,
                    ))

    async def _run_step(self, requests: dict[int, protocol.StepRequest]) -> dict[int, Reply]:
        """Every seated player stepped: push all but the last player's events, let the
        remote step with the last, and give each player its own reply."""
        remote = self.remote
        frames = {r.frames for r in requests.values()}
        if len(frames) > 1:
            asked = ", ".join(f"player {p}: {r.frames}" for p, r in sorted(requests.items()))
            raise BadRequest(
                f"the seated players asked for different frames per step ({asked}); "
                "a joint step advances one number of frames: step with the same 'frames'"
            )
        checked = {}
        for player, request in requests.items():
            if request.episode_id is not None and request.episode_id != remote.episode_id:
                raise BadRequest(
                    f"player {player} stepped episode {request.episode_id}, not the current "
                    f"one ({remote.episode_id}); step with the episode id of the last reset"
                )
            checked[player] = Inputs.check_action(remote.runtime, request.events, None)
        players = sorted(requests)
        last = players[-1]
        for player in players[:-1]:
            remote.inputs.push(agent_source(player), checked[player])
        step = requests[last]
        if any(r.obs == protocol.OBS_SHM for r in requests.values()):  # one asking is enough
            step = dataclasses.replace(step, obs=protocol.OBS_SHM)
        token = PLAYER.set(last)
        try:
            episode, body = await remote.step(step, joint=False)
        finally:
            PLAYER.reset(token)
        rewards = body["info"].get(REWARDS_INFO_KEY)
        replies = {}
        for player in players:
            own = {**body, "info": {**body["info"], PLAYER_INFO_KEY: player}}
            if rewards is not None:
                own["reward"] = rewards[player]
            replies[player] = (episode, own)
        return replies

    async def _run_reset(self, requests: dict[int, protocol.ResetRequest]) -> dict[int, int]:
        """Every seated player asked for a reset: reset once, with each field the lowest
        player gave (its seed, env, mode, fps), past every player's episode id."""
        merged: dict[str, Any] = {}
        for _, request in sorted(requests.items()):
            for field in ("env_id", "seed", "fps", "mode"):
                if merged.get(field) is None:
                    merged[field] = getattr(request, field)
        episodes = [r.episode_id for r in requests.values() if r.episode_id is not None]
        first = requests[min(requests)]
        request = dataclasses.replace(
            first, episode_id=max(episodes) if episodes else None, **merged
        )
        got: list[int] = []
        token = PLAYER.set(min(requests))
        try:
            await self.remote.reset(request, got.append, joint=False)
        finally:
            PLAYER.reset(token)
        return {player: got[0] for player in requests}
