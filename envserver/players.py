"""Several agents in one world: who holds each player of a multi-player runtime, and the
lockstep barrier in front of the remote that advances a frame once every seated player
has stepped.

Holds :class:`Seats` (one per remote), :class:`Game` (what the barrier drives: the
remote's game core) and the functions the remote uses to address input and replies by
player. A *seat* is a player of the runtime (``Runtime.players``) held by an active agent: a
rewarder client (header ``openai-player: N``, none means player 0, so Universe's clients
play player 0) or a dm_env_rpc agent (JoinWorld setting ``player``). VNC viewers drive a
player through its VNC password and hold no seat (``docs/multiagent.md``).

Input and rewards are addressed by player: a player's events reach the runtime as
:class:`~runtimes.base.PlayerEvent` (player 0's stay bare), each seated agent's reward is
its own (``info["remote.player"]``), everyone sees all of them (``info["remote.rewards"]``).

**Joint steps.** The front ends (the rewarder, the dm_env_rpc port) step and reset
through :meth:`Seats.step` and :meth:`Seats.reset`. With fewer than two seated players,
or in real time, those call the remote at once. In lockstep with two or more seated,
they are a barrier: the frame advances when every seated player's request has arrived,
with one call of :meth:`Game.step` carrying every player's request, and each gets its
own reply. A player that does not step within :data:`JOINT_STEP_TIMEOUT` seconds of the
first one fails the round: every waiting player gets an error naming it, and nothing
advances. The remote never calls the barrier back.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from rewarder.protocol import PLAYER_INFO_KEY, REWARDS_INFO_KEY
from runtimes.base import StepResult

from .inputs import REWARDER_SOURCE
from .orders import LOCKSTEP, OBS_SHM, Refused, ResetOrder, StepOrder

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


def source_player(source: object, vnc_player: Callable[[int], int] | None) -> int:
    """The player an input source drives on a multi-player runtime: an agent's own, a VNC
    client's by its password (``vnc_player``), anything else player 0."""
    if isinstance(source, tuple) and len(source) == 2:
        kind, number = source
        if kind == AGENT_SOURCE:
            return int(number)
        if kind == "vnc" and vnc_player is not None:
            return vnc_player(int(number))
    return 0


def address(result: StepResult, body: dict[str, Any], player: int) -> None:
    """Make a step reply ``body`` ``player``'s: its own reward, every player's in
    ``info["remote.rewards"]`` (single-player results are left as they are)."""
    if result.rewards is None:
        return
    body["reward"] = result.rewards[player]
    body["info"] = {
        **body["info"], PLAYER_INFO_KEY: player, REWARDS_INFO_KEY: list(result.rewards)
    }


def check_passwords(
    env_id: str, players: int, passwords: Mapping[int, str] | None, password: str | None
) -> dict[int, str]:
    """Per-player VNC passwords, refused where they cannot work: a single-player runtime,
    a player it lacks, or two players (or a player and the full password) whose first
    :data:`VNC_PASSWORD_CHARS` characters agree, which VNC cannot tell apart."""
    passwords = dict(passwords or {})
    if not passwords:
        return passwords
    if players == 1:
        raise ValueError(
            f"{env_id} has one player: per-player VNC passwords are for multi-player "
            "envs such as builtin.Duel-v0; use --password"
        )
    seen: dict[str, str] = {}
    if password is not None:
        seen[password[:VNC_PASSWORD_CHARS]] = "the remote's password"
    for player, secret in sorted(passwords.items()):
        if not 0 <= player < players:
            raise ValueError(
                f"{env_id} has players 0..{players - 1}; there is no player {player} "
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


class Game(Protocol):
    """What the barrier drives: the remote's game core (:class:`envserver.game_core.GameCore`)."""

    episode_id: int
    #: Called with the player whose agent left (a round waiting for it fails).
    leave_sinks: list[Callable[[int], None]]

    @property
    def mode(self) -> str: ...
    @property
    def env_id(self) -> str: ...
    @property
    def players(self) -> int: ...

    def step_now(self, order: StepOrder) -> Reply | None:
        """One lockstep step of ``order.player`` done at once if it fits one slice; None
        having done nothing if not; :class:`Refused` to refuse."""

    async def step(self, order: StepOrder, others: Mapping[int, StepOrder] | None = None) -> Reply:
        """One lockstep step of ``order.player`` with ``others``' orders (player -> order)
        applied in the same frames; :class:`Refused` to refuse."""

    async def reset(self, order: ResetOrder, reply: Callable[..., None]) -> None:
        """One reset; ``reply(new episode id, body)`` before it goes running."""


@dataclasses.dataclass
class _Round:
    """One joint step or reset being gathered: each player's order and its reply."""

    kind: str
    requests: dict[int, Any] = dataclasses.field(default_factory=dict)
    replies: dict[int, asyncio.Future[Any]] = dataclasses.field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None


class Seats:
    """The players of one remote's runtime and who holds each; the joint-step barrier the
    front ends step and reset through.

    ``rewarder_holder(player)`` names the rewarder client seated as ``player`` (None: no
    rewarder client is); dm_env_rpc agents are kept in :attr:`dm_env_rpc`.
    """

    def __init__(self, game: Game, rewarder_holder: Callable[[int], str | None]) -> None:
        self.game = game
        self.rewarder_holder = rewarder_holder
        #: Seats held by dm_env_rpc agents: player -> who.
        self.dm_env_rpc: dict[int, str] = {}
        #: How long a joint step waits for the last player (tests shorten it).
        self.timeout = JOINT_STEP_TIMEOUT
        self._rounds: dict[str, _Round] = {}
        game.leave_sinks.append(self.left)

    @property
    def players(self) -> int:
        return int(self.game.players)

    def holder(self, player: int) -> str | None:
        """Who holds ``player``'s seat, or None."""
        return self.rewarder_holder(player) or self.dm_env_rpc.get(player)

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
        env_id = self.game.env_id
        if not 0 <= player < self.players:
            raise ValueError(
                f"{env_id} has {self.players} player(s), 0..{self.players - 1}; {what} asked "
                f"for player {player}"
            )
        holder = self.holder(player)
        if holder is not None:
            free = ", ".join(map(str, self.free())) or "none"
            raise ValueError(
                f"player {player} of {env_id} is held by {holder}; free players: {free}"
            )

    # What the front ends call ---------------------------------------------------------------

    def joint(self, mode: str | None = None) -> bool:
        """Whether steps and resets wait for every seated player: two or more seated, in
        lockstep or a reset into it (``mode``: both players' resets switching a real-time
        remote to lockstep make one reset, as the steps after them make one step each).
        Asked before every step: a single-player runtime answers without counting seats."""
        if self.game.players == 1:
            return False
        lockstep = LOCKSTEP in (self.game.mode, mode)
        return lockstep and len(self.seated()) > 1

    def step_now(self, order: StepOrder) -> Reply | None:
        """``order.player``'s lockstep step done at once (synchronously), if it is no
        joint step and fits one slice (:meth:`Game.step_now`); None having done nothing."""
        return None if self.joint() else self.game.step_now(order)

    async def step(self, order: StepOrder) -> Reply:
        """``order.player``'s lockstep step: at once (in one piece if it fits one slice,
        else sliced), or its share of a joint step (its own reply once the frame advanced)."""
        if not self.joint():
            return self.game.step_now(order) or await self.game.step(order)
        reply: Reply = await self._join("step", order.player, order, self._run_step)
        return reply

    async def reset(
        self, order: ResetOrder, reply: Callable[..., None], player: int = 0
    ) -> None:
        """``player``'s reset: at once, or its share of a joint reset (the world resets
        once every seated player asked; each is answered with the new episode id)."""
        if not self.joint(order.mode):
            return await self.game.reset(order, reply)
        episode, body = await self._join("reset", player, order, self._run_reset)
        reply(episode, body)

    def left(self, player: int) -> None:
        """``player``'s agent left: a round waiting for it would wait in vain."""
        if self._rounds:
            self.cancel(f"player {player}'s agent left")

    def cancel(self, why: str) -> None:
        """Fail every round being gathered (a player left)."""
        for round_ in list(self._rounds.values()):
            self._close(round_)
            for waiter in round_.replies.values():
                if not waiter.done():
                    waiter.set_exception(Refused(
                        f"joint v0.env.{round_.kind} abandoned: {why}; send it again"
                    ))

    # The barrier --------------------------------------------------------------------------

    async def _join(
        self, kind: str, player: int, order: Any,
        run: Callable[[dict[int, Any]], Awaitable[dict[int, Any]]],
    ) -> Any:
        round_ = self._rounds.get(kind)
        if round_ is None:
            round_ = self._rounds[kind] = _Round(kind)
            loop = asyncio.get_running_loop()
            round_.timer = loop.call_later(self.timeout, self._expire, round_)
        if player in round_.requests:
            raise Refused(
                f"player {player} already sent v0.env.{kind} for this frame; wait for its "
                "reply (the frame advances when every seated player has sent one)"
            )
        round_.requests[player] = order
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        round_.replies[player] = future
        if set(self.seated()) <= set(round_.requests):
            self._close(round_)
            try:
                results = await run(round_.requests)
            except Exception as exc:
                for waiter in round_.replies.values():
                    if not waiter.done():
                        waiter.set_exception(exc)
            except BaseException:  # the runner's request was cancelled: the others hear why
                for other, waiter in round_.replies.items():
                    if other != player and not waiter.done():
                        waiter.set_exception(Refused(
                            f"joint v0.env.{kind} abandoned: player {player}'s request was "
                            "cancelled; send it again"
                        ))
                raise
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
        for waiter in round_.replies.values():
            if not waiter.done():
                waiter.set_exception(Refused(
                    f"joint v0.env.{round_.kind} timed out: {names} did not send "
                    f"v0.env.{round_.kind} within {self.timeout:g} s (JOINT_STEP_TIMEOUT); "
                    "nothing advanced: send it again when every seated player is stepping"
                ))

    async def _run_step(self, requests: dict[int, StepOrder]) -> dict[int, Reply]:
        """Every seated player stepped: step the remote once, as the last player with the
        others' requests, and give each player its own reply."""
        frames = {r.frames for r in requests.values()}
        if len(frames) > 1:
            asked = ", ".join(f"player {p}: {r.frames}" for p, r in sorted(requests.items()))
            raise Refused(
                f"the seated players asked for different frames per step ({asked}); "
                "a joint step advances one number of frames: step with the same 'frames'"
            )
        players = sorted(requests)
        last = players[-1]
        step = requests[last]
        if any(r.obs == OBS_SHM for r in requests.values()):  # one asking is enough
            step = dataclasses.replace(step, obs=OBS_SHM)
        others = {p: requests[p] for p in players[:-1]}
        episode, body = await self.game.step(dataclasses.replace(step, player=last), others)
        rewards = body["info"].get(REWARDS_INFO_KEY)
        replies = {}
        for player in players:
            own = {**body, "info": {**body["info"], PLAYER_INFO_KEY: player}}
            if rewards is not None:
                own["reward"] = rewards[player]
            replies[player] = (episode, own)
        return replies

    async def _run_reset(
        self, requests: dict[int, ResetOrder]
    ) -> dict[int, tuple[int, dict[str, Any] | None]]:
        """Every seated player asked for a reset: reset once, with each field the lowest
        player gave (its seed, env, mode, fps), past every player's episode id."""
        merged: dict[str, Any] = {}
        for _, request in sorted(requests.items()):
            for field in ("env_id", "seed", "fps", "mode"):
                if merged.get(field) is None:
                    merged[field] = getattr(request, field)
        episodes = [r.episode_id for r in requests.values() if r.episode_id is not None]
        first = requests[min(requests)]
        if any(r.obs == OBS_SHM for r in requests.values()):  # one asking is enough
            merged["obs"] = OBS_SHM
        request = dataclasses.replace(
            first, episode_id=max(episodes) if episodes else None, **merged
        )
        got: list[tuple[int, dict[str, Any] | None]] = []
        await self.game.reset(request, lambda episode, body=None: got.append((episode, body)))
        return {player: got[0] for player in requests}
