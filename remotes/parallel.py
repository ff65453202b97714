"""PettingZoo's ``ParallelEnv`` over multi-player remotes: several agents in one world.

    from remotes import start_local
    from remotes.parallel import RemoteParallelEnv

    with start_local("builtin.Duel-v0") as local:
        env = RemoteParallelEnv(local.address)
        observations, infos = env.reset(seed=1)
        while env.agents:
            actions = {agent: env.action_space(agent).sample() for agent in env.agents}
            observations, rewards, terminations, truncations, infos = env.step(actions)
        env.close()

Holds :class:`RemoteParallelEnv` (needs the ``multiagent`` extra: ``pettingzoo``). Each
player of a remote is one agent: the env holds one rewarder connection per player (header
``openai-player: N``) and one VNC connection per remote for the screen they share, and
steps in lockstep, so a step is one joint step of the remote (its barrier advances the
frame once every player's ``v0.env.step`` arrived; ``docs/multiagent.md``). Several
remotes are independent games: their agents are ``remote_I_player_N``, and a game that
ends drops its agents while the others play on.

Actions are ``Discrete(1 + len(keys))`` per agent: 0 holds nothing, ``k`` holds the
runtime's ``keys[k - 1]`` (Duel: 0 still, 1 Up, 2 Down) until another action. The
observation is the remote's screen, ``uint8[height, width, 3]``, the same for every agent
of a remote; rewards, terminations and infos are each agent's own.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from rewarder.client import RewarderClient
from rewarder.protocol import LOCKSTEP, OBS_VNC, StepReply
from vncdriver.addresses import is_loopback
from vncdriver.client import VNCClient

from .address import RemoteAddress
from .group import RemoteGroup
from .loop import LoopThread
from .session import process_client_id, resolve_addresses, tls_context
from .shared_frames import SharedFrames

#: Seconds a reset or a joint step may take, the remote's barrier included (it waits up
#: to ``envserver.players.JOINT_STEP_TIMEOUT`` for the slowest player).
STEP_TIMEOUT: Final = 60.0
#: Frames each step advances unless ``frameskip`` says otherwise.
DEFAULT_FRAMESKIP: Final = 4

AgentID = str


@dataclass
class _World:
    """One remote: the VNC client of its shared screen and a rewarder client per player."""

    address: RemoteAddress
    #: Agent ids of its players, player 0 first.
    agents: list[AgentID] = field(default_factory=list)
    vnc: VNCClient | None = None
    players: list[RewarderClient] = field(default_factory=list)
    keys: tuple[str, ...] = ()
    width: int = 0
    height: int = 0
    #: Keys each player holds now (actions are changes to it).
    held: list[set[str]] = field(default_factory=list)
    done: bool = False
    #: Player 0's steps take the frame through shared memory from a remote on this machine.
    shared: SharedFrames | None = None

    def frame(self) -> np.ndarray:
        """A copy of the screen as of the last step or reset."""
        if self.shared is not None and self.shared.stepped is not None:
            return self.shared.stepped[0].copy()
        assert self.vnc is not None
        return self.vnc.frame()

    async def connect(self, password: str | None, timeout: float, tls: ssl.SSLContext | None) -> None:
        """Both channels; a rewarder client per player the remote's describe counts."""
        address = self.address
        if address.vnc is None or address.rewarder is None:
            raise ValueError(
                f"{address}: a multi-player env needs both channels (vnc://host:VNC+REWARDER)"
            )
        self.vnc = VNCClient(address.vnc, password=password, frame_tags=True,
                             start_timeout=timeout, name=str(address), tls=tls)
        self.shared = SharedFrames(str(address), is_loopback(address.host))
        first = self._client(0, password, timeout, tls)
        self.players = [first]
        await asyncio.gather(self.vnc.start(), first.start())
        describe = dict(first.describe.body) if first.describe is not None else {}
        count = int(describe.get("players", 1))
        if not describe.get("frame_tags"):
            raise ValueError(f"{address} is not a universe-remote remote (no frame tags)")
        self.keys = tuple(describe.get("keys", ()))
        if not self.keys:
            raise ValueError(
                f"{address} serves {describe.get('env_id')}, which takes no keys: "
                "RemoteParallelEnv's actions hold keys"
            )
        self.width, self.height = self.vnc.width, self.vnc.height
        others = [self._client(p, password, timeout, tls) for p in range(1, count)]
        self.players += others
        await asyncio.gather(*(c.start() for c in others))
        self.held = [set() for _ in range(count)]

    def _client(self, player: int, password: str | None, timeout: float,
                tls: ssl.SSLContext | None) -> RewarderClient:
        assert self.address.rewarder is not None
        return RewarderClient(
            self.address.rewarder, password=password, start_timeout=timeout, reconnect=False,
            name=f"{self.address} player {player}", client_id=f"{process_client_id()}:p{player}",
            player=player, tls=tls,
        )

    async def reset(self, seed: int | None, env_id: str | None) -> None:
        """A joint reset (every player asks; the remote resets once) and its first frame."""
        assert self.vnc is not None and self.shared is not None
        self.shared.new_episode(self.vnc)
        episodes = await asyncio.gather(*(
            c.reset(env_id=env_id, seed=seed, mode=LOCKSTEP, timeout=STEP_TIMEOUT)
            for c in self.players
        ))
        episode = max(episodes)
        await self.players[0].wait_for_state("running", episode_id=episode, timeout=STEP_TIMEOUT)
        while (tag := self.vnc.tag) is None or tag.episode_id < episode:
            await self.vnc.wait_update(self.vnc.updates, timeout=STEP_TIMEOUT)
        self.held = [set() for _ in self.players]
        self.done = False

    async def step(self, actions: Sequence[int | None], frames: int) -> list[StepReply]:
        """One joint step: each player's keys to what its action holds; every reply once
        VNC shows the resulting frame."""
        assert self.vnc is not None and self.shared is not None
        events = [self._events(p, a) for p, a in enumerate(actions)]
        obs = [self.shared.obs] + [OBS_VNC] * (len(self.players) - 1)  # one asking is enough
        replies = await asyncio.gather(*(
            c.step(e, frames, timeout=STEP_TIMEOUT, obs=o)
            for c, e, o in zip(self.players, events, obs, strict=True)
        ))
        await self.shared.receive(replies[0], self.vnc, STEP_TIMEOUT)
        self.done = any(r.done for r in replies)
        return list(replies)

    def _events(self, player: int, action: int | None) -> list[tuple[str, str, bool]]:
        """The key events taking ``player``'s held keys to what ``action`` holds (None:
        the agent sent no action; it keeps holding what it held)."""
        held = self.held[player]
        if action is None:
            return []
        want = {self.keys[action - 1]} if action else set()
        events = [("KeyEvent", k, False) for k in sorted(held - want)]
        events += [("KeyEvent", k, True) for k in sorted(want - held)]
        self.held[player] = want
        return events

    async def close(self) -> None:
        if self.shared is not None:
            self.shared.forget()
        clients: list[Any] = [*self.players, *([self.vnc] if self.vnc is not None else [])]
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


class RemoteParallelEnv(ParallelEnv[AgentID, np.ndarray, int]):  # type: ignore[misc]
    """Every player of one multi-player remote (or of several, as independent games) as a
    PettingZoo agent, stepping in lockstep."""

    metadata: dict[str, Any] = {  # noqa: RUF012 (PettingZoo's class attribute)
        "name": "universe_remote_parallel_v0",
        "render_modes": ["rgb_array"],
        "is_parallelizable": True,
    }

    def __init__(
        self,
        remotes: str | RemoteAddress | Sequence[str] | Sequence[RemoteAddress] | RemoteGroup,
        *,
        password: str | None = None,
        frameskip: int = DEFAULT_FRAMESKIP,
        env_id: str | None = None,
        max_cycles: int | None = None,
        start_timeout: float = 30.0,
        tls_ca: str | None = None,
        render_mode: str | None = "rgb_array",
    ) -> None:
        """``remotes``: an address (``vnc://host:5900+15900``), a list of them, or a group
        (``start_local("builtin.Duel-v0")``). ``env_id``: switch the remotes to it at each
        reset. ``max_cycles``: truncate every agent after that many steps."""
        if not (isinstance(frameskip, int) and frameskip >= 1):
            raise ValueError(f"frameskip must be a positive integer, not {frameskip!r}")
        if isinstance(remotes, RemoteGroup):
            password = password or remotes.password
            remotes = [remotes.address_of(i) for i in range(len(remotes))]
        addresses, given = resolve_addresses(remotes)
        self.password = password or given
        self.frameskip, self.env_id, self.max_cycles = frameskip, env_id, max_cycles
        self.render_mode = render_mode
        self._loop = LoopThread("universe-remote-parallel")
        self._worlds = [_World(a) for a in addresses]
        self._steps = 0
        self._last_frames: list[np.ndarray | None] = [None] * len(addresses)
        try:
            self._loop.run(self._connect(start_timeout, tls_ca), start_timeout + 10)
        except BaseException:
            self.close()
            raise
        several = len(self._worlds) > 1
        for i, world in enumerate(self._worlds):
            prefix = f"remote_{i}_" if several else ""
            world.agents = [f"{prefix}player_{p}" for p in range(len(world.players))]
        self.possible_agents: list[AgentID] = [a for w in self._worlds for a in w.agents]
        self.agents: list[AgentID] = []
        self._where = {a: (w, p) for w in self._worlds for p, a in enumerate(w.agents)}
        self.observation_spaces = {
            a: spaces.Box(0, 255, (w.height, w.width, 3), np.uint8) for a, (w, _) in self._where.items()
        }
        self.action_spaces = {a: spaces.Discrete(1 + len(w.keys)) for a, (w, _) in self._where.items()}

    async def _connect(self, timeout: float, tls_ca: str | None) -> None:
        tls = tls_context([w.address for w in self._worlds], tls_ca)
        await asyncio.gather(*(w.connect(self.password, timeout, tls) for w in self._worlds))

    # Spaces ------------------------------------------------------------------------------

    def observation_space(self, agent: AgentID) -> spaces.Box:
        """The agent's screen (one object per agent, as PettingZoo asks)."""
        return self.observation_spaces[agent]

    def action_space(self, agent: AgentID) -> spaces.Discrete:
        """0: hold nothing; k: hold the runtime's ``keys[k - 1]``."""
        return self.action_spaces[agent]

    # Episodes ----------------------------------------------------------------------------

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[AgentID, np.ndarray], dict[AgentID, dict[str, Any]]]:
        """A new episode on every remote (remote ``i`` under ``seed + i``)."""
        frames = self._loop.run(self._reset(seed), STEP_TIMEOUT * 2)
        self.agents = list(self.possible_agents)
        self._steps = 0
        observations: dict[AgentID, np.ndarray] = {}
        infos: dict[AgentID, dict[str, Any]] = {}
        for world, frame in zip(self._worlds, frames, strict=True):
            for agent in world.agents:
                observations[agent] = frame.copy()
                infos[agent] = {}
        return observations, infos

    async def _reset(self, seed: int | None) -> list[np.ndarray]:
        await asyncio.gather(*(
            w.reset(None if seed is None else seed + i, self.env_id)
            for i, w in enumerate(self._worlds)
        ))
        frames = [w.frame() for w in self._worlds if w.vnc is not None]
        self._last_frames = list(frames)
        return frames

    def step(self, actions: dict[AgentID, int]) -> tuple[
        dict[AgentID, np.ndarray], dict[AgentID, float], dict[AgentID, bool],
        dict[AgentID, bool], dict[AgentID, dict[str, Any]],
    ]:
        """One joint step of every remote whose game goes on; agents of a game that
        ended (or was truncated by ``max_cycles``) leave :attr:`agents`."""
        unknown = set(actions) - set(self.agents)
        if unknown:
            raise ValueError(
                f"actions for {sorted(unknown)}, which are not playing now; the agents are "
                f"{self.agents} (reset() starts a new episode)"
            )
        for agent, action in actions.items():
            if not self.action_space(agent).contains(action):
                raise ValueError(
                    f"action {action!r} of {agent} is not in {self.action_space(agent)}"
                )
        live = [w for w in self._worlds if not w.done and set(w.agents) & set(self.agents)]
        results = self._loop.run(self._step(live, actions), STEP_TIMEOUT * 2)
        self._steps += 1
        truncate = self.max_cycles is not None and self._steps >= self.max_cycles
        observations, rewards, terminations, truncations, infos = {}, {}, {}, {}, {}
        for world, (frame, replies) in zip(live, results, strict=True):
            for agent, reply in zip(world.agents, replies, strict=True):
                observations[agent] = frame.copy()
                rewards[agent] = float(reply.reward)
                terminations[agent] = bool(reply.done)
                truncations[agent] = truncate and not reply.done
                infos[agent] = {**reply.info, "episode_id": reply.episode_id}
        self.agents = [a for a in self.agents if a in observations
                       and not (terminations[a] or truncations[a])]
        return observations, rewards, terminations, truncations, infos

    async def _step(
        self, live: list[_World], actions: dict[AgentID, int]
    ) -> list[tuple[np.ndarray, list[StepReply]]]:
        async def one(world: _World) -> tuple[np.ndarray, list[StepReply]]:
            own = [
                None if a not in actions else int(actions[a]) for a in world.agents
            ]
            replies = await world.step(own, self.frameskip)
            return world.frame(), replies

        results = await asyncio.gather(*(one(w) for w in live))
        for world, (frame, _) in zip(live, results, strict=True):
            self._last_frames[self._worlds.index(world)] = frame
        return list(results)

    def render(self) -> np.ndarray | None:
        """The first remote's screen as of the last reset or step."""
        return self._last_frames[0]

    def close(self) -> None:
        if self._loop.loop.is_closed():
            return
        try:
            self._loop.run(self._close(), 10)
        finally:
            self._loop.close()

    async def _close(self) -> None:
        await asyncio.gather(*(w.close() for w in self._worlds), return_exceptions=True)
