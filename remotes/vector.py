"""``RemoteVectorEnv``: many remotes as one gymnasium ``VectorEnv``, on one event loop.

All remotes are stepped by one :class:`~remotes.stepper.Stepper` on the process's single
loop thread (no thread or process per remote): a step sends every remote its events,
waits until each shows its next frame (by the remote's own frame tags) and gathers every
newest frame and reward. The agent's thread gets fresh arrays; session state stays on
the loop thread (:mod:`remotes.loop`).

Browser remotes take the web settings here as in :class:`~remotes.env.RemoteEnv`
(:mod:`remotes.web`): with ``observations=("screen", "page")`` the observation is
gymnasium's batch of the single env's ``Dict`` (``obs["screen"]`` stacked frames,
``obs["instruction"]``, ``obs["tree"]`` and ``obs["url"]`` tuples of one string per
remote, as ``batch_space`` makes a ``Text`` space a ``Tuple``) and ``info["page"]`` each
remote's elements; with ``actions="web"`` an action per remote is an action string
(``""``: none) or, as always, a list of VNC events; ``step_mode="settle"`` settles each
remote's step. Each remote's string runs on its own page, concurrently.

Autoreset: gymnasium's ``NEXT_STEP`` by default — the step after ``terminated`` or
``truncated`` for env *i* does not send env *i*'s action: it returns the first frame of
its new episode (checked to belong to it) with reward 0. ``autoreset_mode=SAME_STEP``
returns that frame in the step that ended the episode, with the last frame in
``info["final_obs"]`` and the last info in ``info["final_info"]``. Infos are dicts of
arrays with ``_key`` masks, as gymnasium's vector envs give them.

Faults (:mod:`remotes.stepper` has the details): a remote that drops, or whose frames
stop for ``stall_timeout`` seconds, returns ``truncated=True`` with
``info["remote.error"]``, keeps its last frame with reward 0 and
``info["remote.connected"] = False`` while away, and is reconnected in the background
within about :data:`~remotes.faults.RECONNECT_POLL` seconds of greeting again, without
stopping the others; ``info["remote.stalled"]`` flags one whose frames stopped for
``stall_frames`` periods.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from itertools import chain
from typing import Any, Final

import numpy as np
from gymnasium import spaces
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rewarder.protocol import LOCKSTEP
from runtimes.errors import UnknownEnvironment

from .address import RemoteAddress, resolve_addresses
from .env import CONNECT_GRACE, action_space, claim_from_pool, close_all, sessions, spaces_differ
from .group import RemoteGroup
from .loop import LoopThread, shared_loop
from .options import PAGE, WEB_ACTIONS, EnvOptions, check_env_id
from .session import RemoteSession, RemoteSnapshot
from .states import AgentParts, EnvState, SnapshotPart, make_state, restore_args
from .stepper import DEFAULT_FPS, Batch, Stepper
from .vector_infos import batch_infos
from .web import MAX_ACTION_CHARS, AnyText, check_served, dict_observation, observation_space

__all__ = ["DEFAULT_FPS", "RemoteVectorEnv"]

_MODES = {AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP}
#: Events a vector remembers as checked (by identity: an agent that reuses its action
#: objects is not checked again each step); past this many it forgets them all, so an
#: agent that makes new events each step holds no more than this alive.
MAX_CHECKED_EVENTS: Final = 4096
#: The kinds of action whose events :meth:`RemoteVectorEnv._all_checked` looks up at once.
_SEQUENCES: Final = frozenset({list, tuple})
#: What a checked event may hold to be remembered: immutable values only, so the same
#: object is the same event for as long as it lives.
_IMMUTABLE: Final = (str, int, bool, np.bool_, np.integer)


class RemoteVectorEnv(VectorEnv[np.ndarray, Any, np.ndarray]):
    """``num_envs`` remotes named by one address string (or a list of them), or the
    remotes of a :class:`~remotes.group.RemoteGroup` (``start_local``, ``start_ray``...:
    its password, and each remote's current address when one comes back elsewhere).

    Takes :class:`~remotes.env.RemoteEnv`'s arguments (an
    :class:`~remotes.options.EnvOptions`, or its settings as keywords), and ``autoreset_mode``
    (``NEXT_STEP``, the default, or ``SAME_STEP``). All remotes must share one screen
    size (the observations are stacked). ``batch_size`` (lockstep): the results a
    :meth:`recv` returns, of whichever remotes answer first (remotes.arrivals); default
    all of them.

    Args:
        addresses: Universe's grammar naming every remote (``?password=`` may carry the
            password), a list of such strings or of RemoteAddresses, a
            ``pool://HOST:PORT`` address, or a :class:`~remotes.group.RemoteGroup`.
        password: the remotes' password (overrides the address's).
        fps: real-time steps per second (default: the remotes' own fps).
        options: an :class:`~remotes.options.EnvOptions`; keywords of the same names win.
        render_mode: ``"rgb_array"`` or ``"human"``.
        loop: the loop thread for this env's sockets (default: the process's).
        autoreset_mode: ``NEXT_STEP`` or ``SAME_STEP`` (gymnasium's).
        num_envs: remotes to claim from a ``pool://`` address (only there).
        batch_size: lockstep only: how many results a :meth:`recv` returns (default all).
        **settings: :class:`~remotes.options.EnvOptions` fields as keywords.

    Raises:
        RemoteUnavailable: remotes did not answer within ``start_timeout`` (names each).
        ValueError: a bad setting, address or mode (the message says which).
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["human", "rgb_array"]}

    def __init__(
        self,
        addresses: str | Sequence[str] | Sequence[RemoteAddress] | RemoteGroup,
        password: str | None = None,
        fps: float | None = None,
        *,
        options: EnvOptions | None = None,
        render_mode: str | None = None,
        loop: LoopThread | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        num_envs: int | None = None,
        batch_size: int | None = None,
        **settings: Any,
    ) -> None:
        opts = EnvOptions.of(options, settings, password=password, fps=fps)
        self.options = opts
        autoreset = AutoresetMode(autoreset_mode)
        if autoreset not in _MODES:
            raise ValueError(
                f"autoreset_mode {autoreset.value!r} is not supported: remotes start their "
                "next episode by themselves; use NEXT_STEP or SAME_STEP"
            )
        self.mode, self.frameskip = opts.mode, opts.frameskip
        if num_envs is not None and not isinstance(addresses, str):
            raise ValueError(
                "num_envs= is for a pool address (pool://HOST:PORT); other addresses name their remotes"
            )
        pooled = claim_from_pool(addresses, num_envs or 1, opts)
        if pooled is None and num_envs is not None:
            raise ValueError(f"num_envs= is for a pool address (pool://HOST:PORT), not {addresses!r}")
        group = pooled or (addresses if isinstance(addresses, RemoteGroup) else None)
        if group is not None:
            remotes, address_password = list(group.addresses), group.password
        else:
            remotes, address_password = resolve_addresses(addresses)  # type: ignore[arg-type]
        seen: set[str] = set()
        for remote in remotes:
            if str(remote) in seen:
                raise ValueError(
                    f"remote {remote} is listed twice: a remote serves one agent at a time"
                )
            seen.add(str(remote))
        self.num_envs = len(remotes)
        #: Results a :meth:`recv` returns (``batch_size`` < ``num_envs``: whichever remotes
        #: answer first, remotes.arrivals); ``num_envs`` unless asked.
        self.batch_size = self._batch_size(batch_size, opts, autoreset)
        if render_mode not in (None, "rgb_array", "human"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use 'rgb_array' or 'human'")
        self.render_mode = render_mode
        self.env_id = opts.env_id
        self.start_timeout = opts.start_timeout
        self.max_episode_steps = opts.max_episode_steps
        self.autoreset_mode = autoreset
        self.metadata = {**self.metadata, "autoreset_mode": autoreset}
        self._closed = True  # until connected: close() has nothing to do
        #: What the agent's side keeps that a snapshot must carry (wrappers add theirs).
        self.snapshot_parts = AgentParts()
        #: What this env started and stops on close (``gymnasium.make_vec``'s local
        #: remotes, a pool's leases).
        self.owned: Any = pooled
        self._loop = loop or shared_loop()
        # (a pool's password is the pool's; its remotes' comes with the claim)
        pw = address_password if pooled is not None or opts.password is None else opts.password
        live = sessions(remotes, pw, opts)
        if group is not None:
            group.follow(live)
        self._core = Stepper(live, opts, self._loop)
        self._stepping = threading.Lock()  # one call at a time (threads queue up here)
        #: A step sent by step_async() whose step_wait() is still to come.
        self._step_sent: Any = None
        try:
            states = self._core.connect(opts.start_timeout + CONNECT_GRACE)
        except BaseException:
            if pooled is not None:
                pooled.close()
            raise
        self._closed = False
        try:  # a mistyped env_id= is refused here, not at the first reset()
            check_env_id(opts.env_id, [s.describe.get("env_id") for s in states])
            for state in states:
                check_served(opts.env_id or state.describe.get("env_id"), opts)
        except (UnknownEnvironment, ValueError):
            self.close()
            raise
        self._configure_spaces(states)
        shape = self.screen_space.shape
        assert shape is not None
        self._frames = np.zeros((self.num_envs, *shape), np.uint8)
        self._arrivals = self._core.arrivals(self.batch_size) if self.batch_size < self.num_envs else None

    def _batch_size(self, batch_size: int | None, opts: EnvOptions, autoreset: AutoresetMode) -> int:
        """``batch_size`` checked against what send/recv with fewer than all remotes needs."""
        n = self.num_envs
        if batch_size is None or batch_size == 0:
            return n
        if not isinstance(batch_size, int) or not 1 <= batch_size <= n:
            raise ValueError(f"batch_size={batch_size!r}: give 1..{n} (the results a recv() returns), "
                             "or None for all of them")
        if batch_size < n:
            if opts.mode != LOCKSTEP:
                raise ValueError(f"batch_size={batch_size} < {n} remotes needs mode='lockstep': in real "
                                 "time every remote moves on whether or not it is sent a step")
            if opts.web:
                raise ValueError(f"batch_size={batch_size} < {n} remotes is for VNC actions and frames; "
                                 "browser remotes' pages and action strings step all together")
            if autoreset is not AutoresetMode.NEXT_STEP:
                raise ValueError(f"batch_size={batch_size} < {n} remotes autoresets with NEXT_STEP only")
        return batch_size

    def _configure_spaces(self, states: tuple[RemoteSnapshot, ...]) -> None:
        """Spaces from snapshots of the remotes (taken on the loop thread)."""
        self._states = states
        first = states[0]
        self.fps = self._core.fps
        #: One remote's screen (the observation, or its ``"screen"``), and its VNC events.
        self.screen_space = spaces.Box(0, 255, (first.height, first.width, 3), np.uint8)
        self.vnc_space = action_space(first)
        page = PAGE in self.options.observations
        self.single_observation_space = observation_space(self.screen_space) if page else self.screen_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        strings = self.options.actions == WEB_ACTIONS
        self.single_action_space = AnyText(MAX_ACTION_CHARS) if strings else self.vnc_space
        self.action_space = spaces.Tuple([self.single_action_space] * self.num_envs)
        #: Events found valid for this action space, by id (:meth:`_all_checked`).
        self._good_events: dict[int, tuple[Any, ...]] = {}
        self.metadata = {**self.metadata, "render_fps": self.fps}

    def _observations(self, batch: Batch) -> Any:
        """The step's observations: the stacked frames, or the batched ``Dict`` (its
        strings a tuple per key, one per remote, as gymnasium's ``concatenate`` gives)."""
        self._frames = batch.obs
        if PAGE not in self.options.observations:
            return batch.obs
        each = [dict_observation(batch.obs[i], info) for i, info in enumerate(batch.infos)]
        return {key: batch.obs if key == "screen" else tuple(o[key] for o in each)
                for key in self.single_observation_space}  # type: ignore[attr-defined]

    @property
    def sessions(self) -> list[RemoteSession]:
        """The live sessions underneath: **loop thread only** (for coroutines run with
        ``env.loop.run``); from your own thread read :attr:`remotes` instead."""
        return self._core.sessions

    @property
    def loop(self) -> LoopThread:
        """The loop thread this env's sockets live on."""
        return self._loop

    @property
    def remotes(self) -> tuple[RemoteSnapshot, ...]:
        """Fresh snapshots of every remote (name, screen, describe, connected, error)."""
        return self._loop.run(self._core.snapshot())  # type: ignore[no-any-return]

    @property
    def names(self) -> list[str]:
        """Each remote's address, as errors and logs name it."""
        return [s.name for s in self._states]

    @property
    def describes(self) -> list[dict[str, Any]]:
        """Each remote's describe as of the last connect or reset (copies)."""
        return [dict(s.describe) for s in self._states]

    # gymnasium API ---------------------------------------------------------------------------

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every remote (env *i* gets ``seed + i`` when ``seed`` is an int).

        Remotes that are away are reconnected first (each waiting up to
        ``start_timeout``); :class:`RemoteUnavailable` names any that are not back.

        Args:
            seed: one seed (env *i* gets ``seed + i``), one per env, or None.
            options: ``{"env_id": ...}`` to switch every remote's environment.

        Returns:
            The stacked observations and the batched info.

        Raises:
            RemoteUnavailable: remotes not back within ``start_timeout`` (each named).
            ValueError: a list of seeds of another length than ``num_envs``.
            RuntimeError: the env is closed.
        """
        if self._closed:
            raise RuntimeError("reset() on a closed RemoteVectorEnv")
        super().reset(seed=seed if isinstance(seed, int) or seed is None else None)
        self._step_sent = None  # (a reset drops a step still out: its replies are of no use)
        if seed is None or isinstance(seed, int):
            seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"{len(seeds)} seeds for {self.num_envs} remotes")
        env_id = (options or {}).get("env_id")
        with self._stepping:
            batch, states = self._core.reset(seeds, env_id)
            if self._arrivals is not None:
                self._arrivals.restart()
        if any(spaces_differ(new, old) for new, old in zip(states, self._states, strict=True)):
            self._configure_spaces(states)
        self._states = states
        return self._observations(batch), batch_infos(batch.infos, self.num_envs)

    def step(
        self, actions: Sequence[Sequence[tuple[Any, ...]] | str]
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One step of every remote. With ``actions="web"`` each remote's action is an
        action string (``""``: none) or a list of VNC events; a string a remote cannot
        run comes back in its ``info["last_action_error"]``, not as an exception. With
        ``batch_size`` < ``num_envs``: :meth:`send` (to the remotes the last recv
        returned) then :meth:`recv`, as ALE's ``AtariVectorEnv.step``.

        Args:
            actions: one action per remote (a list of VNC events, or with ``actions="web"`` an
                action string); with ``batch_size`` < ``num_envs``, one per remote the last
                :meth:`recv` returned.

        Returns:
            ``(observations, rewards, terminated, truncated, infos)`` batched as gymnasium's; a
            lost remote ends its episode (``truncated``; its info says why) rather than raise.

        Raises:
            ValueError: not one action per remote, or an action the space does not allow.
            AlreadyPendingCallError: a :meth:`step_async` waits for its :meth:`step_wait`.
            RuntimeError: the env is closed.
        """
        if self._closed:
            raise RuntimeError("step() on a closed RemoteVectorEnv")
        if self._arrivals is not None:  # (ALE's step with batch_size: send, then recv)
            self.send(actions)
            return self.recv()
        if isinstance(actions, str) or len(actions) != self.num_envs:
            raise ValueError(
                f"{1 if isinstance(actions, str) else len(actions)} actions for "
                f"{self.num_envs} remotes: give one per remote (a tuple or list)"
            )
        if self._step_sent is not None:
            raise AlreadyPendingCallError("step() while a step_async() waits for its step_wait()", "step")
        sent = self._all_checked(actions)
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        with self._stepping:
            batch: Batch = self._core.step(sent, same_step)
        return self._stepped(batch)

    def step_async(self, actions: Sequence[Sequence[tuple[Any, ...]]]) -> None:
        """Lockstep: send every remote its step and return at once (gymnasium's
        ``AsyncVectorEnv.step_async``): the remotes step while the agent computes; the
        step's results come from :meth:`step_wait`.

        Args:
            actions: one list of VNC events per remote.

        Raises:
            AlreadyPendingCallError: called twice without :meth:`step_wait`.
            ValueError: not one action per remote, or an invalid action.
            RuntimeError: the env is closed.
        """
        if self._closed:
            raise RuntimeError("step_async() on a closed RemoteVectorEnv")
        if self._step_sent is not None:
            raise AlreadyPendingCallError("step_async() twice: call step_wait() first", "step")
        if self._arrivals is not None:
            raise ValueError(f"step_async() steps all {self.num_envs} remotes; with batch_size="
                             f"{self.batch_size} use send(actions, env_ids) and recv()")
        if isinstance(actions, str) or len(actions) != self.num_envs:
            raise ValueError(f"{len(actions)} actions for {self.num_envs} remotes: give one per remote")
        sent = self._all_checked(actions)
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        with self._stepping:
            self._step_sent = self._core.step_send(sent, same_step)

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The results of the step :meth:`step_async` sent, as :meth:`step` returns them.

        Returns:
            What :meth:`step` returns.

        Raises:
            NoAsyncCallError: no :meth:`step_async` before it.
        """
        if self._step_sent is None:
            raise NoAsyncCallError("step_wait() without a step_async() before it", "step")
        with self._stepping:
            sent, self._step_sent = self._step_sent, None
            batch: Batch = self._core.step_finish(sent)
        return self._stepped(batch)

    def send(self, actions: Sequence[Any], env_ids: Sequence[int] | None = None) -> None:
        """Lockstep: send ``actions[j]`` to remote ``env_ids[j]`` and return at once (ALE's
        ``AtariVectorEnv.send``, EnvPool's); ``env_ids`` defaults to the remotes the last
        :meth:`recv` (or :meth:`reset`) returned. With ``batch_size`` = ``num_envs``, a
        :meth:`step_async` of all of them (``env_ids`` any order of all).

        Args:
            actions: one action per env id.
            env_ids: the remotes to step (default: those the last recv returned).

        Raises:
            ValueError: not one action per env id, or (with ``batch_size`` = ``num_envs``)
                env ids that are not all of the remotes.
            RuntimeError: the env is closed.
        """
        if self._closed:
            raise RuntimeError("send() on a closed RemoteVectorEnv")
        if isinstance(actions, str):
            raise ValueError("send() takes a sequence of actions, one per env id")
        arrivals = self._arrivals
        if arrivals is None:
            if env_ids is not None:
                order = [int(i) for i in env_ids]
                if sorted(order) != list(range(self.num_envs)) or len(actions) != len(order):
                    raise ValueError(f"env_ids {order}: with batch_size = num_envs every remote "
                                     f"steps; give all {self.num_envs} once, an action each")
                placed: list[Any] = [None] * self.num_envs
                for i, action in zip(order, actions, strict=True):
                    placed[i] = action
                actions = placed
            self.step_async(actions)
            return
        ids = arrivals.ready if env_ids is None else [int(i) for i in env_ids]
        if len(actions) != len(ids):
            raise ValueError(f"{len(actions)} actions for env ids {list(ids)}: give one per env id")
        checked = self._all_checked(actions, ids)
        with self._stepping:
            arrivals.send(checked, list(ids))

    def recv(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Lockstep: the results of ``batch_size`` remotes once they are in, whichever
        answered first (ALE's ``recv``).

        Returns:
            ``(observations, rewards, terminated, truncated, infos)`` of ``batch_size`` rows;
            ``infos["env_id"]`` names each row's remote.

        Raises:
            RuntimeError: the env is closed.
        """
        arrivals = self._arrivals
        if arrivals is None:
            obs, rewards, terminated, truncated, infos = self.step_wait()
            infos["env_id"], infos["_env_id"] = np.arange(self.num_envs), np.ones(self.num_envs, bool)
            return obs, rewards, terminated, truncated, infos
        if self._closed:
            raise RuntimeError("recv() on a closed RemoteVectorEnv")
        with self._stepping:
            frames, rewards, terminated, truncated, each, ids = arrivals.recv()
            self._frames = self._core.frames if self._core.frames is not None else self._frames
        infos = batch_infos(each, len(ids))
        infos["env_id"], infos["_env_id"] = ids, np.ones(len(ids), bool)
        return frames, rewards, terminated, truncated, infos

    def _stepped(self, batch: Batch) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if batch.columns is not None and not batch.final:  # (built by the step: the batched lane's)
            return self._observations(batch), batch.rewards, batch.terminated, batch.truncated, batch.columns
        page = PAGE in self.options.observations
        per_remote = list(batch.infos)
        for i, (final_obs, final_info) in batch.final.items():  # as SyncVectorEnv puts them
            final = dict_observation(final_obs, final_info) if page else final_obs
            per_remote[i] = {"final_obs": final, "final_info": final_info, **per_remote[i]}
        infos = batch_infos(per_remote, self.num_envs)
        return self._observations(batch), batch.rewards, batch.terminated, batch.truncated, infos

    def _all_checked(self, actions: Sequence[Any], ids: Sequence[int] | None = None) -> list[Any]:
        """Every remote's action checked (:meth:`_checked`; ``ids``: the remotes they are
        for, else one each in order; an id out of range is the caller's to refuse). Lists
        or tuples of events that were all checked before (the same tuple objects) are
        looked at once, together: the ids of events held in :attr:`_good_events` (held,
        so no other object has their id meanwhile)."""
        if _SEQUENCES.issuperset(map(type, actions)) and all(
                map(self._good_events.__contains__, map(id, chain.from_iterable(actions)))):
            return list(map(list, actions))
        rows = range(len(actions)) if ids is None else ids
        return [self._checked(i, action) if 0 <= i < self.num_envs else action
                for i, action in zip(rows, actions, strict=True)]

    def _checked(self, i: int, action: Any) -> Any:
        """Remote ``i``'s action as the stepper takes it (a string, or a list of events),
        or a ValueError naming the remote and what is wrong."""
        if isinstance(action, str):
            if self.options.actions != WEB_ACTIONS:
                raise ValueError(
                    f"remote {i}: action strings such as {action[:40]!r} need actions='web' "
                    "(browser remotes); here an action is a list of events such as "
                    "[('KeyEvent', 'Left', True)]"
                )
            return action
        problem = self.vnc_space.check(action)
        if problem is not None:
            raise ValueError(f"invalid action for remote {i} ({self._states[i].name}): {problem}")
        good = self._good_events
        if len(good) + len(action) > MAX_CHECKED_EVENTS:
            good.clear()
        for event in action:
            if type(event) is tuple and all(isinstance(value, _IMMUTABLE) for value in event):
                good[id(event)] = event  # (held here: its id is not reused while remembered)
        return list(action)

    # Snapshots (docs/snapshots.md) -------------------------------------------------------

    def keep_with_snapshots(self, part: SnapshotPart) -> None:
        """Save ``part``'s agent-side state of an env (a wrapper's held keys) in every
        state cloned from it, and set it back on every restore (docs/snapshots.md).

        Args:
            part: a :class:`~remotes.states.SnapshotPart` holding one value per env.
        """
        self.snapshot_parts.keep(part)

    def clone_state(self, index: int, export: bool = False) -> EnvState:
        """Remote ``index``'s state now (lockstep), with what the agent's side keeps of it
        (the episode's steps; wrappers' held keys); ``export``: with its bytes, so it
        restores on the other remotes too. Refused (ValueError) while env ``index``'s
        episode has ended: its next step starts a new one, which no state of the ended
        one would replay.

        Args:
            index: the env.
            export: carry the state's bytes, so it restores on other remotes.

        Returns:
            An :class:`~remotes.states.EnvState` for :meth:`restore_state`,
            :meth:`set_states` or another env's ``restore_state``.

        Raises:
            ValueError: not lockstep, or env ``index``'s episode ended in the last step.
            RemoteError: the remote refused (the message says why).
            RuntimeError: the env is closed or remote ``index`` not connected.
        """
        if self._closed:
            raise RuntimeError("clone_state() on a closed RemoteVectorEnv")
        with self._stepping:
            self._core.check_running(index, f"env {index}")
            agent = self.snapshot_parts.save(index)
            steps = self._core.slots[index].steps
            reply = self._core.save_state(index, export)
        name = self._states[index].name
        return make_state(name, self._states[index].describe.get("env_id", ""), reply, steps, agent)

    def restore_state(self, index: int, state: EnvState) -> None:
        """Set remote ``index`` to ``state`` (a new episode there, the branch).

        Args:
            index: the env.
            state: an :class:`~remotes.states.EnvState` (exported, if it was cloned elsewhere).

        Raises:
            ValueError: as :meth:`set_states` (not lockstep, a state that cannot go there).
            RemoteError: the remote refused the state.
        """
        self.set_states({index: state})

    def set_states(self, states: dict[int, EnvState]) -> None:
        """Set each remote named to its state, all at once, the agent's side with it (the
        episode's steps, wrappers' held keys; an env whose episode had ended is running
        the restored one: its next step sends its action); :meth:`render` and the next
        step's observations show the restored frames.

        Args:
            states: ``{env index: state}``; exported states for envs other than their own.

        Raises:
            ValueError: not lockstep; a state holding only its token, for another remote
                than its own (clone with ``export=True``); or one taken without a part this
                env's wrappers keep.
            TypeError: a state is not what :meth:`clone_state` returned.
            RemoteError: a remote refused its state (the message says why).
            RuntimeError: the env is closed.
        """
        if self._closed:
            raise RuntimeError("set_states() on a closed RemoteVectorEnv")
        sent = {i: restore_args(state, self._states[i].name) for i, state in states.items()}
        values = {i: self.snapshot_parts.values(state) for i, state in states.items()}
        with self._stepping:
            self._core.restore_states(sent)
            frames = self._core.frames
            for i, state in states.items():
                self._core.slots[i].steps = state.steps
                if frames is not None:
                    self._frames[i] = frames[i]
                self.snapshot_parts.load(i, values[i])

    def fork(self, index: int, to: Sequence[int] | None = None) -> EnvState:
        """Put remote ``index``'s state on the remotes ``to`` (default: all the others),
        at once: k attempts from one state (GRPO's groups, Go-Explore's returns). The
        state moves as exported bytes; remote ``index`` goes on as it was. The state.

        Args:
            index: the env whose state is copied.
            to: the envs that take it (default: every other).

        Returns:
            The exported state, to fork from again later.
        """
        targets = [i for i in range(self.num_envs) if i != index] if to is None else list(to)
        state = self.clone_state(index, export=True)
        self.set_states(dict.fromkeys(targets, state))
        return state

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """``"rgb_array"``: a copy of the last observations. ``"human"``: a window on each
        remote (or where to watch it, printed), opened by the first call (:mod:`remotes.human`).

        Returns:
            The stacked last observations with ``"rgb_array"``; None otherwise.
        """
        if self.render_mode == "human":
            from .human import show

            if not self._closed:
                self.owned = show(self._loop, self.sessions, self.owned)
            return None
        return self._frames.copy() if self.render_mode == "rgb_array" else None

    def close_extras(self, **kwargs: Any) -> None:
        """Close every connection and stop reconnecting (idempotent); stop what this env
        started.

        Args:
            **kwargs: gymnasium's; unused.
        """
        core = None if self._closed else self._core
        self._closed = True
        owned, self.owned = self.owned, None
        close_all(self._loop, core, owned)
