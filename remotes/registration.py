"""``gymnasium.make`` for every environment a remote can serve.

Holds :func:`register` (run when :mod:`remotes` is imported), :func:`make_env` and
:func:`make_vector_env` (the ids' entry points) and :func:`action_wrapper` (the action
space each family gets). Ids are ``universe-remote/<env id>``, as ale-py registers
``ALE/...``::

    import gymnasium as gym
    import remotes

    gym.register_envs(remotes)
    env = gym.make("universe-remote/atari.Pong-v0")                 # starts a local remote
    env = gym.make("universe-remote/builtin.Catch-v0", remotes="vnc://host:5900+15900")
    envs = gym.make_vec("universe-remote/builtin.Catch-v0", num_envs=8, mode="lockstep")

or, without the import, ``gym.make("remotes:universe-remote/builtin.Catch-v0")``.
``make`` and ``make_vec`` give each family the same action space (:func:`action_wrapper`;
``discrete=False`` keeps VNC events). ``atari.*`` ids take ale-py's v5 keywords
(``frameskip``, ``repeat_action_probability``, ``full_action_space``) and build
:class:`~remotes.ale.RemoteAtariEnv` / :class:`~remotes.ale.RemoteAtariVectorEnv`;
``render_mode="human"`` opens a window on each remote (:mod:`remotes.human`).
``remotes="pool://HOST:PORT"`` leases them from a warm pool (:mod:`remotes.pool`),
follows each lease to its replacement and releases them when the env closes;
``remotes=`` an int starts that many local remotes (1 for ``make``, ``num_envs`` for
``make_vec``) and stops them when the env closes; ``"ray:N"`` starts them as Ray actors
(:func:`~remotes.ray.start_ray` on $RAY_ADDRESS's cluster, or a new local one) and
follows each to its replacement after a crash; an address string or list connects
to remotes already running (the remote is switched to the env id at each reset).
Every id is registered ``nondeterministic`` (real time is; ``mode="lockstep"`` is not,
but the flag belongs to the id, not to the mode).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import gymnasium

from runtimes import registry

from . import ale
from .address import RemoteAddress, resolve_addresses
from .ale import RemoteAtariEnv, RemoteAtariVectorEnv
from .env import ENV_ID, RemoteEnv
from .group import RemoteGroup
from .local import start_local
from .options import WEB_ACTIONS
from .pool.client import claim_remotes, is_pool
from .vector import RemoteVectorEnv
from .wrappers import DiscreteClicks, DiscreteKeys

#: ``remotes=`` that starts remotes on Ray: ``ray:`` and their number.
RAY_PREFIX: Final = "ray:"
#: gymnasium namespace of our ids.
NAMESPACE: Final = "universe-remote"
#: Catch: nothing, Left, Right.
CATCH_ACTIONS: Final[tuple[list[str], ...]] = ([], ["Left"], ["Right"])
#: Pixels between the click points of ClickTarget: its 24 px disc always covers a point
#: when they are at most 24 / sqrt(2) apart (an 8x8 grid, 40x30 px apart, missed most).
CLICK_TARGET_CELL: Final = 16
#: Pixels between the click points of a MiniWoB task: its smallest controls (checkboxes,
#: radio buttons) are ~13 px across.
MINIWOB_CELL: Final = 10


def click_points(area: Sequence[int], cell: int) -> list[tuple[int, int]]:
    """The centres of ``cell``-pixel squares tiling ``area`` (x, y, width, height), row by row."""
    x0, y0, width, height = area
    return [
        (x0 + x + cell // 2, y0 + y + cell // 2)
        for y in range(0, height - cell // 2, cell)
        for x in range(0, width - cell // 2, cell)
    ]


def gym_id(env_id: str) -> str:
    return f"{NAMESPACE}/{env_id}"


def register() -> None:
    """Register ``universe-remote/<env id>`` for every id this install knows, and the
    generic ``universe-remote/Remote-v0`` (any remote, by address); idempotent.

    The ids come from :func:`runtimes.registry.catalogue`, which imports neither ale-py
    nor a browser family: cheap, where building every runtime table made
    ``import remotes`` slow."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(ENV_ID, entry_point="remotes.env:RemoteEnv", nondeterministic=True)
    for env_id in registry.catalogue():
        if gym_id(env_id) in gymnasium.registry:
            continue
        gymnasium.register(
            gym_id(env_id),
            entry_point="remotes.registration:make_env",
            vector_entry_point="remotes.registration:make_vector_env",
            nondeterministic=True,
            kwargs={"env_id": env_id},
        )


def action_wrapper(env_id: str, describe: dict[str, Any]) -> Callable[[Any], Any] | None:
    """The wrapper that gives ``env_id`` a simple action space, or None (VNC events).

    Atari: ``Discrete`` over the game's minimal action set (the remote's describe says
    which keys play each action); Catch: nothing/Left/Right; ClickTarget: a click every
    :data:`CLICK_TARGET_CELL` pixels of the screen (action *i* is point *i*, as before the
    no-op existed: a game whose targets wait for a click needs none); MiniWoB: action 0
    (:data:`~remotes.wrappers.NOOP`) does nothing — a task's page may need a moment, and
    a real-time agent must be able to wait — then a click every :data:`MINIWOB_CELL`
    pixels of the task area (``task_area`` in the describe), not of the whole screen.
    """
    family = env_id.split(".", 1)[0]
    if family == "atari" and describe.get("action_keys"):
        combos = [keys for keys in describe["action_keys"]]
        return lambda env: DiscreteKeys(env, combos)
    if env_id == "builtin.Catch-v0":
        return lambda env: DiscreteKeys(env, [list(c) for c in CATCH_ACTIONS])
    screen = (0, 0, int(describe.get("width", 0)), int(describe.get("height", 0)))
    if env_id == "builtin.ClickTarget-v0":
        return lambda env: DiscreteClicks(env, click_points(screen, CLICK_TARGET_CELL))
    if family == "miniwob":
        area = describe.get("task_area") or screen
        return lambda env: DiscreteClicks(env, click_points(area, MINIWOB_CELL), noop=True)
    return None


def _ray_count(spec: str) -> int:
    count = spec.removeprefix(RAY_PREFIX)
    if not count.isdigit():
        raise ValueError(f"remotes={spec!r}: write ray:N, the number of remotes to start on Ray")
    return int(count)


def _serve_args(mode: str, options: dict[str, Any], render_mode: str | None) -> list[str]:
    """What ``serve`` is given for the remotes an env starts: its mode, the runtime options
    asked for, and for ``render_mode="human"`` a browser viewer (where no window opens)."""
    viewer = ["--http-port", "0"] if render_mode == "human" else []
    return ["--mode", mode, *ale.serve_args(options), *viewer]


def _addresses(
    env_id: str, remotes: int | str | Sequence[str], wanted: int, extra: list[str],
    password: str | None, mode: str = "realtime", options: dict[str, Any] | None = None,
) -> tuple[list[RemoteAddress], str | None, RemoteGroup | None]:
    """The ``wanted`` remotes ``remotes=`` names (started here, with ``serve`` arguments
    ``extra``, if it is a number or ``ray:N``; leased, if it is ``pool://HOST:PORT``:
    ``password`` is then the pool's), their password, and the group started or leased
    here, to stop or release on close."""
    registry.check(env_id)  # before any process starts: the closest ids, not all of them
    if isinstance(remotes, bool) or not isinstance(remotes, int | str | list | tuple):
        raise TypeError(
            f"remotes must be a number of local remotes to start, 'ray:N' (N remotes on Ray), an address "
            f"('vnc://host:5900+15900') or a list of addresses, not {remotes!r}"
        )
    if is_pool(remotes):
        assert isinstance(remotes, str)
        served = ale.serve_args(options or {})  # the pool's kinds name them as serve does
        claim = dict(arg.split("=", 1) for arg in served[1::2])
        pooled = claim_remotes(remotes, wanted, env_id, mode, claim or None, password)
        return pooled.addresses, pooled.password, pooled
    if isinstance(remotes, str) and remotes.startswith(RAY_PREFIX):
        count = _ray_count(remotes)
        if count != wanted:
            raise ValueError(
                f"remotes={remotes!r} starts {count}, but this env drives {wanted}: use "
                f"gymnasium.make_vec(id, num_envs={count}, remotes={remotes!r})"
            )
        from .ray import start_ray

        group = start_ray(env_id, count, password=password, extra_args=extra)
        return group.addresses, group.password, group
    if isinstance(remotes, int):
        if remotes != wanted:
            raise ValueError(
                f"remotes={remotes}, but this env drives {wanted}: use gymnasium.make for "
                "one remote and gymnasium.make_vec(id, num_envs=n) for n"
            )
        local = start_local(env_id, remotes, password=password, extra_args=extra)
        return local.addresses, local.password, local
    addresses, address_password = resolve_addresses(remotes)
    if len(addresses) != wanted:
        raise ValueError(
            f"remotes= names {len(addresses)} remotes, but this env drives {wanted}: use "
            f"gymnasium.make for one remote and gymnasium.make_vec(id, num_envs={len(addresses)}, "
            "remotes=...) for several"
        )
    return addresses, password if password is not None else address_password, None


def make_env(
    env_id: str,
    remotes: int | str | Sequence[str] = 1,
    *,
    mode: str = "realtime",
    frameskip: int = 1,
    password: str | None = None,
    discrete: bool = True,
    render_mode: str | None = None,
    **kwargs: Any,
) -> gymnasium.Env[Any, Any]:
    """One remote of ``env_id`` as a gymnasium env (``gymnasium.make``'s entry point).

    ``discrete=False`` keeps the raw VNC action space (lists of key and pointer events);
    ``actions="web"`` gives a browser remote's BrowserGym action strings instead, and
    ``observations=("screen", "page")`` its page structure (:mod:`remotes.web`).
    ``atari.*`` ids take ale-py's ``repeat_action_probability`` and ``full_action_space``
    and the remote's ``noop_max`` (:mod:`remotes.ale`): remotes started here are served
    with them, remotes given by address must run them already. ``render_mode="human"``
    opens a window on the remote (:mod:`remotes.human`). Other keyword arguments go to
    :class:`~remotes.env.RemoteEnv`.

    Args:
        env_id: a registered id (``builtin.Catch-v0``, ``atari.Pong-v0``...).
        remotes: remotes to start here (an int), or the address of running ones
            (``vnc://...``, ``pool://...``, ``ray:N``).
        mode: ``"realtime"`` or ``"lockstep"``.
        frameskip: frames each lockstep step advances.
        password: the remotes' password.
        discrete: the family's discrete action space (``False``: VNC events).
        render_mode: ``"rgb_array"`` or ``"human"``.
        **kwargs: :class:`~remotes.env.RemoteEnv`'s settings, and the family's own.

    Returns:
        The env, wrapped in its family's action wrapper; closing it stops the remotes it
        started.

    Raises:
        UnknownEnvironment: ``env_id`` is not registered (the message names the closest ids).
        RemoteUnavailable: the remote did not answer.
    """
    options = ale.runtime_options(env_id, kwargs)
    extra = _serve_args(mode, options, render_mode)
    addresses, password, local = _addresses(env_id, remotes, 1, extra, password, mode, options)
    kind = RemoteAtariEnv if env_id.startswith("atari.") else RemoteEnv
    try:
        env = kind(
            local if local is not None else addresses[0], password, env_id=env_id, mode=mode,
            frameskip=frameskip, render_mode=render_mode, **kwargs,
        )
    except BaseException:
        if local is not None:
            local.close()
        raise
    env.owned = local
    try:
        if env.describe.get("env_id") != env_id:
            env.reset()  # a remote serving another env switches at reset: the spaces must fit
        ale.check_served(env_id, options, [(env.remote.name, env.describe)])
    except BaseException:
        env.close()
        raise
    strings = env.options.actions == WEB_ACTIONS  # action strings: no discrete space
    wrap = action_wrapper(env_id, dict(env.remote.describe)) if discrete and not strings else None
    wrapped = wrap(env) if wrap is not None else env
    if render_mode == "human":
        env.render()  # the window opens now, as ale-py's does
    return wrapped


def make_vector_env(
    env_id: str,
    num_envs: int = 1,
    remotes: int | str | Sequence[str] | None = None,
    *,
    mode: str = "realtime",
    frameskip: int = 1,
    password: str | None = None,
    discrete: bool = True,
    render_mode: str | None = None,
    **kwargs: Any,
) -> gymnasium.vector.VectorEnv:  # type: ignore[type-arg]
    """``num_envs`` remotes of ``env_id`` as one :class:`RemoteVectorEnv`
    (``gymnasium.make_vec``'s entry point), with the action space ``make`` gives each env
    (:func:`action_wrapper`'s vector form: ``MultiDiscrete`` where ``make`` gives
    ``Discrete``; ``discrete=False`` keeps VNC events). Takes :func:`make_env`'s keywords.

    Args:
        env_id: a registered id.
        num_envs: how many remotes.
        remotes: as :func:`make_env`'s, naming ``num_envs`` remotes (None: start them here).
        mode: ``"realtime"`` or ``"lockstep"``.
        frameskip: frames each lockstep step advances.
        password: the remotes' password.
        discrete: the family's discrete action space (``False``: VNC events).
        render_mode: ``"rgb_array"`` or ``"human"``.
        **kwargs: :class:`~remotes.vector.RemoteVectorEnv`'s settings.

    Returns:
        The vector env, wrapped in its family's vector action wrapper.

    Raises:
        UnknownEnvironment: ``env_id`` is not registered.
        RemoteUnavailable: remotes did not answer.
    """
    options = ale.runtime_options(env_id, kwargs)
    extra = _serve_args(mode, options, render_mode)
    addresses, password, local = _addresses(
        env_id, num_envs if remotes is None else remotes, num_envs, extra, password, mode, options
    )
    kind = RemoteAtariVectorEnv if env_id.startswith("atari.") else RemoteVectorEnv
    try:
        envs = kind(
            local if local is not None else addresses, password, env_id=env_id, mode=mode,
            frameskip=frameskip, render_mode=render_mode, **kwargs,
        )
    except BaseException:
        if local is not None:
            local.close()
        raise
    envs.owned = local
    serving = {remote.name: remote.describe.get("env_id") for remote in envs.remotes}
    others = {name: served for name, served in serving.items() if served != env_id}
    if others:
        # RemoteVectorEnv sizes its frames once, so it cannot switch its remotes' env.
        envs.close()
        listed = ", ".join(f"{name} serves {served}" for name, served in others.items())
        raise ValueError(
            f"{listed}, not {env_id}: start remotes of {env_id} (universe-remote serve "
            f"{env_id}, or remotes={num_envs} to start them here)"
        )
    try:
        ale.check_served(env_id, options, [(s.name, s.describe) for s in envs.remotes])
    except BaseException:
        envs.close()
        raise
    strings = envs.options.actions == WEB_ACTIONS  # action strings: no discrete space
    wrap = action_wrapper(env_id, dict(envs.remotes[0].describe)) if discrete and not strings else None
    wrapped = wrap(envs) if wrap is not None else envs
    if render_mode == "human":
        envs.render()
    return wrapped  # type: ignore[no-any-return]
