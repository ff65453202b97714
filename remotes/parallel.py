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

Holds :class:`RemoteParallelEnv` (needs the ``multiagent`` extra: ``pettingzoo``), a
per-player view of the stepping core (:class:`~remotes.stepper.Stepper`) that
``RemoteEnv`` and ``RemoteVectorEnv`` drive: each player of a remote is one of its slots,
with a rewarder connection of its own (header ``openai-player: N``); player 0's slot also
holds the VNC connection of the screen they share, and its frames (through shared memory
from a local remote) are every player's. It steps in lockstep, so a step is one joint
step of the remote (its barrier advances the frame once every player's ``v0.env.step``
arrived; ``docs/multiagent.md``), and a dropped remote is truncated and reconnected like
any other (``info["remote.error"]``; ``reset()`` waits for it). Several remotes are
independent games: their agents are ``remote_I_player_N``, and a game that ends drops its
agents while the others play on.

Actions are ``Discrete(1 + len(keys))`` per agent: 0 holds nothing, ``k`` holds the
runtime's ``keys[k - 1]`` (Duel: 0 still, 1 Up, 2 Down) until another action. The
observation is the remote's screen, ``uint8[height, width, 3]``, the same for every agent
of a remote; rewards, terminations and infos are each agent's own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from rewarder.client import RewarderClient
from rewarder.protocol import LOCKSTEP

from .address import RemoteAddress, resolve_addresses, tls_context
from .env import close_all
from .faults import STALL_TIMEOUT
from .group import RemoteGroup
from .loop import LoopThread, shared_loop
from .options import EnvOptions
from .session import RemoteSession
from .stepper import Stepper

#: Frames each step advances unless ``frameskip`` says otherwise.
DEFAULT_FRAMESKIP: Final = 4

AgentID = str


@dataclass
class _World:
    """One remote: its players' slots in the stepping core (player 0's first)."""

    address: RemoteAddress
    slots: list[int]
    agents: list[AgentID] = field(default_factory=list)
    keys: tuple[str, ...] = ()
    #: Keys each player holds now (actions are changes to it).
    held: list[set[str]] = field(default_factory=list)
    done: bool = False

    def events(self, player: int, action: int | None) -> list[tuple[str, str, bool]]:
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


async def _describe(address: RemoteAddress, password: str | None, timeout: float, tls: Any) -> dict[str, Any]:
    """What the remote serves (players, keys, frame tags): one observer connection's
    first describe, before the players take their seats."""
    if address.vnc is None or address.rewarder is None:
        raise ValueError(
            f"{address}: a multi-player env needs both channels (vnc://host:VNC+REWARDER)"
        )
    client = RewarderClient(address.rewarder, password=password, observer=True,
                            start_timeout=timeout, reconnect=False, name=str(address), tls=tls)
    try:
        await client.start()
        return dict(client.describe.body) if client.describe is not None else {}
    finally:
        await client.close()


async def _describes(
    addresses: Sequence[RemoteAddress], password: str | None, timeout: float, tls: Any
) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(_describe(a, password, timeout, tls) for a in addresses)))


def _rewarder_only(address: RemoteAddress) -> RemoteAddress:
    """The address a player other than 0 dials: the rewarder alone (the screen is player 0's)."""
    return RemoteAddress(address.host, None, address.rewarder_port, address.tls)


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
        stall_timeout: float = STALL_TIMEOUT,
        loop: LoopThread | None = None,
    ) -> None:
        """Connects to every player of every remote, and reads what each serves.

        Args:
            remotes: an address (``vnc://host:5900+15900``), a list of them, or a group
                (``start_local("builtin.Duel-v0")``).
            password: the remotes' password (None: the address's or group's).
            frameskip: frames each joint step advances.
            env_id: switch the remotes to it at each reset.
            max_cycles: truncate every agent after that many steps.
            start_timeout: seconds to wait for the remotes to answer.
            tls_ca: a CA bundle for ``vnc+tls://`` remotes.
            render_mode: ``"rgb_array"`` or None.
            stall_timeout: seconds a joint step may wait for a remote's reply before the
                remote is truncated and reconnected.
            loop: the loop thread for this env's sockets (default: the process's).

        Raises:
            ValueError: a bad ``frameskip`` or address, or a remote that is not ours or
                takes no keys.
            ConnectTimeout: a remote's rewarder did not answer within ``start_timeout``
                (:class:`rewarder.errors.ConnectTimeout`).
            Refused: a remote refused (wrong password, busy: the message says).
            RemoteUnavailable: a player's seat could not be connected.
        """
        if not (isinstance(frameskip, int) and frameskip >= 1):
            raise ValueError(f"frameskip must be a positive integer, not {frameskip!r}")
        group = remotes if isinstance(remotes, RemoteGroup) else None
        if group is not None:
            password = password or group.password
            remotes = list(group.addresses)
        addresses, given = resolve_addresses(remotes)  # type: ignore[arg-type]
        self.password = password or given
        self.frameskip, self.env_id, self.max_cycles = frameskip, env_id, max_cycles
        self.render_mode = render_mode
        self._loop = loop or shared_loop()
        self._stepping = threading.Lock()
        self._closed = True
        tls = tls_context(addresses, tls_ca)
        describes = self._loop.run(_describes(addresses, self.password, start_timeout, tls),
                                   start_timeout + 10)
        sessions: list[RemoteSession] = []
        self._worlds: list[_World] = []
        several = len(addresses) > 1
        for i, (address, describe) in enumerate(zip(addresses, describes, strict=True)):
            if not describe.get("frame_tags"):
                raise ValueError(f"{address} is not a universe-remote remote (no frame tags)")
            keys = tuple(describe.get("keys", ()))
            if not keys:
                raise ValueError(
                    f"{address} serves {describe.get('env_id')}, which takes no keys: "
                    "RemoteParallelEnv's actions hold keys"
                )
            count = int(describe.get("players", 1))
            prefix = f"remote_{i}_" if several else ""
            world = _World(address, list(range(len(sessions), len(sessions) + count)), keys=keys,
                           agents=[f"{prefix}player_{p}" for p in range(count)])
            for p in range(count):
                # Player 0 holds the screen; the others' frames are player 0's.
                where = address if p == 0 else _rewarder_only(address)
                session = RemoteSession(where, self.password, start_timeout=start_timeout, tls=tls,
                                        lockstep=True, player=p)
                session.name = f"{address} player {p}"
                if group is not None:
                    session.locate = partial(_relocate, group, i, p)
                sessions.append(session)
            self._worlds.append(world)
        options = EnvOptions(mode=LOCKSTEP, frameskip=frameskip, env_id=env_id, max_episode_steps=max_cycles,
                             start_timeout=start_timeout, stall_timeout=stall_timeout)
        self._core = Stepper(sessions, options, self._loop)
        states = self._core.connect(start_timeout + 10)
        self._closed = False
        self.possible_agents: list[AgentID] = [a for w in self._worlds for a in w.agents]
        self.agents: list[AgentID] = []
        self._where = {a: (w, p) for w in self._worlds for p, a in enumerate(w.agents)}
        self.observation_spaces = {
            a: spaces.Box(0, 255, (states[w.slots[0]].height, states[w.slots[0]].width, 3), np.uint8)
            for a, (w, _) in self._where.items()
        }
        self.action_spaces = {a: spaces.Discrete(1 + len(w.keys)) for a, (w, _) in self._where.items()}
        self._last: np.ndarray | None = None

    # Spaces ------------------------------------------------------------------------------

    def observation_space(self, agent: AgentID) -> spaces.Box:
        """The agent's screen (one object per agent, as PettingZoo asks).

        Args:
            agent: the agent's name.

        Returns:
            Its ``Box`` of the screen.
        """
        return self.observation_spaces[agent]

    def action_space(self, agent: AgentID) -> spaces.Discrete:
        """0: hold nothing; k: hold the runtime's ``keys[k - 1]``.

        Args:
            agent: the agent's name.

        Returns:
            Its ``Discrete(1 + len(keys))``.
        """
        return self.action_spaces[agent]

    # Episodes ----------------------------------------------------------------------------

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[AgentID, np.ndarray], dict[AgentID, dict[str, Any]]]:
        """A new episode on every remote (remote ``i`` under ``seed + i``; a remote that is
        away is reconnected first).

        Args:
            seed: the first remote's seed (None: the runtimes pick).
            options: unused (PettingZoo's signature).

        Returns:
            Each agent's observation and info.

        Raises:
            RemoteUnavailable: a remote is not back within ``start_timeout``.
            RuntimeError: the env is closed.
        """
        if self._closed:
            raise RuntimeError("reset() on a closed RemoteParallelEnv")
        seeds: list[int | None] = []
        for i, world in enumerate(self._worlds):
            seeds += [None if seed is None else seed + i] * len(world.slots)
            world.held = [set() for _ in world.slots]
            world.done = False
        with self._stepping:
            batch, _ = self._core.reset(seeds, self.env_id)
        self.agents = list(self.possible_agents)
        observations: dict[AgentID, np.ndarray] = {}
        infos: dict[AgentID, dict[str, Any]] = {}
        for world in self._worlds:
            for agent, slot in zip(world.agents, world.slots, strict=True):
                observations[agent] = batch.obs[world.slots[0]].copy()
                infos[agent] = dict(batch.infos[slot])
        self._last = batch.obs[self._worlds[0].slots[0]]
        return observations, infos

    def step(self, actions: dict[AgentID, int]) -> tuple[
        dict[AgentID, np.ndarray], dict[AgentID, float], dict[AgentID, bool],
        dict[AgentID, bool], dict[AgentID, dict[str, Any]],
    ]:
        """One joint step of every remote whose game goes on; agents of a game that
        ended (or was truncated by ``max_cycles``, or lost its remote) leave :attr:`agents`.

        Args:
            actions: ``{agent: action}`` for agents now playing (one left out keeps holding
                what it held).

        Returns:
            ``(observations, rewards, terminations, truncations, infos)``, each by agent.

        Raises:
            ValueError: an action for an agent not playing, or outside its space.
            RuntimeError: the env is closed.
        """
        if self._closed:
            raise RuntimeError("step() on a closed RemoteParallelEnv")
        unknown = set(actions) - set(self.agents)
        if unknown:
            raise ValueError(
                f"actions for {sorted(unknown)}, which are not playing now; the agents are "
                f"{self.agents} (reset() starts a new episode)"
            )
        for agent, given in actions.items():
            if not self.action_space(agent).contains(given):
                raise ValueError(
                    f"action {given!r} of {agent} is not in {self.action_space(agent)}"
                )
        playing = set(self.agents)
        live = [w for w in self._worlds if not w.done and playing & set(w.agents)]
        events: list[list[Any]] = [[] for _ in range(self._core.num)]
        active = [False] * self._core.num
        for world in live:
            for player, (agent, slot) in enumerate(zip(world.agents, world.slots, strict=True)):
                action = actions.get(agent)
                events[slot] = world.events(player, None if action is None else int(action))
                active[slot] = True
        with self._stepping:
            batch = self._core.step(events, active=active)
        observations, rewards, terminations, truncations, infos = {}, {}, {}, {}, {}
        for world in live:
            frame = batch.obs[world.slots[0]]
            for agent, slot in zip(world.agents, world.slots, strict=True):
                observations[agent] = frame.copy()
                rewards[agent] = float(batch.rewards[slot])
                terminations[agent] = bool(batch.terminated[slot])
                truncations[agent] = bool(batch.truncated[slot])
                infos[agent] = dict(batch.infos[slot])
            world.done = any(terminations[a] or truncations[a] for a in world.agents)
        if live:
            self._last = batch.obs[self._worlds[0].slots[0]]
        self.agents = [a for a in self.agents if a in observations
                       and not (terminations[a] or truncations[a])]
        return observations, rewards, terminations, truncations, infos

    def render(self) -> np.ndarray | None:
        """The first remote's screen as of the last reset or step.

        Returns:
            A copy of the screen, or None before the first reset.
        """
        return None if self._last is None else self._last.copy()

    def close(self) -> None:
        """Close every connection (idempotent)."""
        core = None if self._closed else self._core
        self._closed = True
        close_all(self._loop, core, None)


def _relocate(group: RemoteGroup, index: int, player: int) -> Any:
    """Where remote ``index`` of ``group`` is now, as player ``player``'s session dials it."""
    async def locate() -> RemoteAddress:
        address = await asyncio.to_thread(group.address_of, index)
        return address if player == 0 else _rewarder_only(address)

    return locate()


__all__ = ["DEFAULT_FRAMESKIP", "RemoteParallelEnv"]
