"""``RemoteEnv``: one remote as a gymnasium env — a one-wide view of the stepping core.

The observation is the remote's screen, ``uint8[H, W, 3]``; an action is a list of VNC
events (:class:`~remotes.spaces.VNCActionSpace`). A browser remote can give its page's
structure too (``observations=("screen", "page")``: a ``Dict`` observation), take
BrowserGym action strings (``actions="web"``) and end each step once its screen settled
(``step_mode="settle"``): :mod:`remotes.web`. Stepping is real time, like Universe's
Throttle: :meth:`RemoteEnv.step` sends the events at once, then waits for the remote's
next frame (by its frame tag; by our clock at the remote's fps for remotes without tags)
and returns it with the reward the current episode earned since the last step. How
steps, episodes and faults go is :mod:`remotes.stepper`'s, shared with
:class:`~remotes.vector.RemoteVectorEnv`; every socket is read on the loop thread and the
agent gets snapshots (:mod:`remotes.loop`).

Faults, as a single env sees them: a remote that drops or stalls past ``stall_timeout``
ends the episode — that step returns ``truncated=True`` with ``info["remote.error"]`` —
and is reconnected in the background as soon as it greets again; :meth:`RemoteEnv.reset`
waits for that (up to ``start_timeout``). ``info["remote.stalled"]`` flags a remote whose
frames stopped advancing before that.

One remote, one agent: a remote serves one active client. A new env of this process on
the same remote takes it over (``gymnasium.utils.env_checker.check_env`` builds such
envs); the older env's next step says so in ``info["remote.error"]``, it does not take
the remote back by itself, and its :meth:`~RemoteEnv.reset` does.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from rewarder.protocol import LOCKSTEP
from runtimes.errors import UnknownEnvironment

from .address import RemoteAddress, resolve_addresses, tls_context
from .group import RemoteGroup
from .loop import LoopThread, shared_loop
from .options import PAGE, WEB_ACTIONS, EnvOptions, check_env_id
from .session import RemoteSession, RemoteSnapshot, RemoteUnavailable, VNCOptions
from .spaces import VNCActionSpace
from .states import AgentParts, EnvState, SnapshotPart, make_state, restore_args
from .stepper import DEFAULT_FPS, Batch, Stepper
from .web import MAX_ACTION_CHARS, AnyText, check_served, dict_observation, observation_space

__all__ = ["DEFAULT_FPS", "ENV_ID", "RemoteEnv"]

#: The id RemoteEnv registers under (``gymnasium.make("universe-remote/Remote-v0", ...)``);
#: real-time remotes are nondeterministic by nature.
ENV_ID: Final = "universe-remote/Remote-v0"
#: Seconds connecting may take on top of ``start_timeout`` before we give up waiting.
CONNECT_GRACE: Final = 5.0


def _spec(kwargs: dict[str, Any]) -> EnvSpec:
    """The spec ``gymnasium.make`` needs to build this env again (``check_env`` does)."""
    return EnvSpec(
        ENV_ID,
        entry_point="remotes.env:RemoteEnv",
        nondeterministic=True,
        kwargs={k: v for k, v in kwargs.items() if v is not None},
    )


def sessions(remotes: Sequence[RemoteAddress], password: str | None, opts: EnvOptions) -> list[RemoteSession]:
    """One session per remote, as ``opts`` asks (both envs' constructors)."""
    vnc = VNCOptions(encoding=opts.encoding, quality=opts.quality)
    tls = tls_context(remotes, opts.tls_ca)
    return [
        RemoteSession(r, password, vnc=vnc, start_timeout=opts.start_timeout, tls=tls,
                      lockstep=opts.mode == LOCKSTEP)
        for r in remotes
    ]


def action_space(state: RemoteSnapshot) -> VNCActionSpace:
    """The VNC action space a remote's describe calls for (its keys and buttons)."""
    describe = state.describe
    return VNCActionSpace(
        describe.get("keys", ()), state.width, state.height, int(describe.get("buttons", 1)),
        any_key=bool(describe.get("any_key", False)),
    )


def spaces_differ(new: RemoteSnapshot, old: RemoteSnapshot) -> bool:
    """Whether a reset changed what the spaces are made of (an env switch does)."""
    keys = ("keys", "any_key", "buttons", "fps")
    return new.screen_size != old.screen_size or any(
        new.describe.get(k) != old.describe.get(k) for k in keys
    )


#: Seconds close() waits for the connections to close.
CLOSE_TIMEOUT: Final = 10.0


def claim_from_pool(address: Any, n: int, opts: EnvOptions) -> RemoteGroup | None:
    """``n`` remotes leased from the pool ``address`` names (``pool://HOST:PORT``), or
    None for any other address (:mod:`remotes.pool.client`)."""
    from .pool.client import claim_remotes, is_pool

    if not is_pool(address):
        return None
    return claim_remotes(address, n, opts.env_id, opts.mode, password=opts.password,
                         tls_ca=None if opts.tls_ca is None else str(opts.tls_ca))


def close_all(loop: LoopThread, core: Stepper | None, owned: Any) -> None:
    """From the agent's thread: close the stepper's connections (if ``core``), then stop
    what the env started (``owned``: local remotes or containers). Both envs' close()."""
    if loop.forked:  # a fork's child: the parent's connections are the parent's to close
        return
    if core is not None:
        try:
            core.close(CLOSE_TIMEOUT)
        except (RuntimeError, TimeoutError, RemoteUnavailable):
            pass
    if owned is not None:
        owned.close()


class RemoteEnv(gymnasium.Env[np.ndarray, list[tuple[Any, ...]]]):
    """A gymnasium env over one remote at ``address`` (``vnc://host:5900+15900``).

    Args:
        address: Universe's grammar; ``?password=`` may carry the password. Or a
            :class:`~remotes.group.RemoteGroup` of one remote (its password, and its
            address after a restart elsewhere).
        password: the remote's password (overrides the address's).
        fps: real-time steps per second (default: the remote's own fps).
        options: an :class:`~remotes.options.EnvOptions`; the same settings may be given
            as keywords (``mode="lockstep"``, ``frameskip=4``, ``env_id=...``,
            ``encoding``, ``quality``, ``start_timeout``, ``max_episode_steps``,
            ``stall_frames``, ``stall_timeout``, ``tls_ca``), which win over ``options``.
        render_mode: ``"rgb_array"`` (render() returns the last frame) or ``"human"``
            (render() shows the remote: a viewer window, else where to watch it).
        loop: the loop thread for this env's sockets (default: the process's).
        **settings: :class:`~remotes.options.EnvOptions` fields as keywords.

    Raises:
        RemoteUnavailable: the remote did not answer within ``start_timeout`` (the
            message says why and what to do).
        ValueError: a bad setting, or an address naming other than one remote.
    """

    metadata = {"render_modes": ["human", "rgb_array"], "render_fps": DEFAULT_FPS}

    def __init__(
        self,
        address: str | RemoteAddress | RemoteGroup = "vnc://127.0.0.1:5900+15900",
        password: str | None = None,
        fps: float | None = None,
        *,
        options: EnvOptions | None = None,
        render_mode: str | None = None,
        loop: LoopThread | None = None,
        **settings: Any,
    ) -> None:
        opts = EnvOptions.of(options, settings, password=password, fps=fps)
        self.options = opts
        self.mode, self.frameskip = opts.mode, opts.frameskip
        pooled = claim_from_pool(address, 1, opts)
        group = pooled or (address if isinstance(address, RemoteGroup) else None)
        if group is not None:  # its password, and where its remote is after a restart
            remotes, address_password = list(group.addresses), group.password
        else:
            remotes, address_password = resolve_addresses(address)  # type: ignore[arg-type]
        if len(remotes) != 1:
            raise ValueError(
                f"RemoteEnv drives one remote and {address!r} names {len(remotes)}; "
                "use RemoteVectorEnv for several"
            )
        if render_mode not in (None, "rgb_array", "human"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use 'rgb_array' or 'human'")
        self.render_mode = render_mode
        self.env_id = opts.env_id
        self.start_timeout = opts.start_timeout
        self.max_episode_steps = opts.max_episode_steps
        self._closed = True  # until connected: close() has nothing to do
        #: What the agent's side keeps that a snapshot must carry (wrappers add theirs).
        self.snapshot_parts = AgentParts()
        #: What this env started and stops on close (``gymnasium.make``'s local remotes,
        #: a pool's leases).
        self.owned: Any = pooled
        self._loop = loop or shared_loop()
        # (a pool's password is the pool's; its remotes' comes with the claim)
        pw = address_password if pooled is not None or opts.password is None else opts.password
        (session,) = sessions(remotes, pw, opts)
        if group is not None:
            group.follow([session])
        self._core = Stepper([session], opts, self._loop)
        self._stepping = threading.Lock()  # one call at a time (threads queue up here)
        try:
            (state,) = self._core.connect(opts.start_timeout + CONNECT_GRACE)
        except BaseException:
            if pooled is not None:
                pooled.close()
            raise
        self._closed = False
        try:  # a mistyped env_id= is refused here, not at the first reset()
            check_env_id(opts.env_id, [state.describe.get("env_id")])
            check_served(opts.env_id or state.describe.get("env_id"), opts)
        except (UnknownEnvironment, ValueError):
            self.close()
            raise
        spec = {**opts.changed(), "address": str(remotes[0]), "password": pw}  # vnc+tls://...
        self.spec = _spec(spec)
        self._configure_spaces(state)
        self._frame = np.zeros(self.screen_space.shape or (), np.uint8)

    # Helpers ---------------------------------------------------------------------------

    def _configure_spaces(self, state: RemoteSnapshot) -> None:
        """Spaces and fps from a snapshot of the remote (taken on the loop thread)."""
        self._state = state
        self.fps = self._core.fps
        self.metadata = {**self.metadata, "render_fps": self.fps}
        #: The screen's space (the observation, or its ``"screen"``), and the VNC events'.
        self.screen_space = spaces.Box(0, 255, (state.height, state.width, 3), np.uint8)
        self.vnc_space = action_space(state)
        page = PAGE in self.options.observations
        self._page = page
        observations: Any = observation_space(self.screen_space) if page else self.screen_space
        self.observation_space = observations
        strings = self.options.actions == WEB_ACTIONS
        actions: Any = AnyText(MAX_ACTION_CHARS) if strings else self.vnc_space
        self.action_space = actions

    @property
    def session(self) -> RemoteSession:
        """The live session underneath: **loop thread only** (pass it to coroutines you run
        with ``env.loop.run``); from your own thread read :attr:`remote` instead."""
        return self._core.sessions[0]

    @property
    def loop(self) -> LoopThread:
        """The loop thread this env's sockets live on."""
        return self._loop

    @property
    def remote(self) -> RemoteSnapshot:
        """A fresh snapshot of the remote (name, screen, describe, connected, error)."""
        (state,) = self._loop.run(self._core.snapshot())
        return state

    @property
    def describe(self) -> dict[str, Any]:
        """The remote's describe as of the last connect or reset (a copy)."""
        return dict(self._state.describe)

    # gymnasium API -----------------------------------------------------------------------

    def _observation(self, batch: Batch) -> Any:
        """The step's observation: the frame, or the ``Dict`` with the page's parts."""
        self._frame = batch.obs[0]
        if self._page:
            return dict_observation(self._frame, batch.infos[0])
        return self._frame

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start a new episode (``options={"env_id": ...}`` switches environment).

        A remote that is away (dropped, stalled, or taken by a newer env) is reconnected
        first, waiting up to ``start_timeout``; :class:`RemoteUnavailable` if it is not back.

        Args:
            seed: the episode's seed, sent with the reset (the remote's runtime seeds with it).
            options: ``{"env_id": ...}`` to switch environment; nothing else is read.

        Returns:
            The first observation and its info (``info["episode_id"]``, diagnostics).

        Raises:
            RemoteUnavailable: the remote is not back within ``start_timeout``, or the reset
                failed; the message says which and what to do.
            RuntimeError: the env is closed.
        """
        if self._closed:
            raise RuntimeError("reset() on a closed RemoteEnv")
        super().reset(seed=seed)
        env_id = (options or {}).get("env_id")
        with self._stepping:
            batch, (state,) = self._core.reset([seed], env_id)
        if spaces_differ(state, self._state):
            self._configure_spaces(state)
        self._state = state
        return self._observation(batch), batch.infos[0]

    def step(
        self, action: Sequence[tuple[Any, ...]] | str
    ) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """One step. With ``actions="web"`` an action is an action string (``""``: none)
        or, as always, a list of VNC events; a string the remote cannot run comes back in
        ``info["last_action_error"]``, not as an exception.

        Args:
            action: a list of VNC events (``[("KeyEvent", "Left", True)]``), or an action
                string with ``actions="web"``.

        Returns:
            ``(observation, reward, terminated, truncated, info)`` as gymnasium's; a lost remote
            ends its episode (``truncated``, ``info["remote.error"]`` says why) rather than raise.

        Raises:
            ValueError: the action is not one the space allows (the message says what is wrong).
            RuntimeError: the env is closed.
        """
        if self._closed:
            raise RuntimeError("step() on a closed RemoteEnv")
        sent: Any
        if isinstance(action, str):
            if self.options.actions != WEB_ACTIONS:
                raise ValueError(
                    f"action strings such as {action[:40]!r} need actions='web' (a browser "
                    "remote); here an action is a list of events such as [('KeyEvent', 'Left', True)]"
                )
            sent = action
        else:
            problem = self.vnc_space.check(action)
            if problem is not None:
                raise ValueError(f"invalid action for remote {self._state.name}: {problem}")
            sent = list(action)
        with self._stepping:
            batch: Batch = self._core.step([sent])
        self._frame = frame = batch.obs[0]
        return (
            dict_observation(frame, batch.infos[0]) if self._page else frame,
            batch.rewards.item(0), batch.terminated.item(0), batch.truncated.item(0), batch.infos[0],
        )

    # Snapshots (docs/snapshots.md) -------------------------------------------------------

    def keep_with_snapshots(self, part: SnapshotPart) -> None:
        """Save ``part``'s agent-side state (a wrapper's held keys) in every state this env
        clones, and set it back on every restore (docs/snapshots.md).

        Args:
            part: a :class:`~remotes.states.SnapshotPart` (``snapshot_name``,
                ``snapshot_value``, ``restore_value``).
        """
        self.snapshot_parts.keep(part)

    def clone_state(self, include_rng: bool = True, export: bool = False) -> EnvState:
        """The whole state now, as ale-py's ``clone_state`` (lockstep): the remote's, and
        what the agent's side keeps (the episode's steps; wrappers' held keys); refused
        (ValueError) once the episode has ended: reset first. The generator is always
        included (``include_rng`` is accepted for ale-py's callers); ``export``: with the
        state's bytes, so it restores on other remotes too.

        Args:
            include_rng: accepted for ale-py's callers; the generator is always included.
            export: carry the state's bytes too, so it restores on other remotes.

        Returns:
            An :class:`~remotes.states.EnvState` for :meth:`restore_state`.

        Raises:
            ValueError: not lockstep, or the episode ended in the last step.
            RemoteError: the remote refused (its runtime cannot save states; the message says why).
            RuntimeError: the env is closed or not connected.
        """
        if self._closed:
            raise RuntimeError("clone_state() on a closed RemoteEnv")
        with self._stepping:
            self._core.check_running(0, "the episode")
            agent = self.snapshot_parts.save(0)
            steps = self._core.slots[0].steps
            reply = self._core.save_state(0, export)
        return make_state(self._state.name, self._state.describe.get("env_id", ""), reply, steps, agent)

    def restore_state(self, state: EnvState) -> None:
        """Go back to ``state`` (a new episode, the branch: ``info["episode_id"]`` of the
        next step says so), the agent's side with it; :meth:`render` shows the restored
        frame, the next :meth:`step` plays on from it as it did after the clone.

        Args:
            state: what :meth:`clone_state` returned (here or, exported, on a remote of the
                same env id).

        Raises:
            ValueError: not lockstep; a state holding only its token, taken on another
                remote (clone with ``export=True``); or one taken without a part this env's
                wrappers keep.
            TypeError: ``state`` is not what :meth:`clone_state` returned.
            RemoteError: the remote refused the state (the message says why).
            RuntimeError: the env is closed.
        """
        if self._closed:
            raise RuntimeError("restore_state() on a closed RemoteEnv")
        args = restore_args(state, self._state.name)
        values = self.snapshot_parts.values(state)  # (refuses before anything changes)
        with self._stepping:
            self._core.restore_states({0: args})
            self._core.slots[0].steps = state.steps
            frames = self._core.frames
            if frames is not None:
                self._frame = frames[0].copy()
            self.snapshot_parts.load(0, values)

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """``"rgb_array"``: the last frame. ``"human"``: a window on the remote (or where to
        watch it, printed), opened by the first call (:mod:`remotes.human`).

        Returns:
            The last frame (H, W, 3) with ``"rgb_array"``; None with ``"human"`` or no render mode.
        """
        if self.render_mode == "human":
            from .human import show

            if not self._closed:
                self.owned = show(self._loop, [self.session], self.owned)
            return None
        return self._frame if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        """Close the connections (idempotent), and stop what this env started."""
        core = None if self._closed else self._core
        self._closed = True
        owned, self.owned = self.owned, None
        close_all(self._loop, core, owned)
