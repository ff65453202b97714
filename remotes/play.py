"""``universe-remote play``: run an agent against remotes and show how it goes.

Holds :func:`play` and the agents it knows (:data:`AGENTS`). With an env id it starts
``-n`` local remotes itself (``--ray``: as actors on a Ray cluster); with ``--remote
ADDRESS`` it drives remotes already running.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from .group import RemoteGroup
from .local import start_local
from .pool.client import is_pool
from .vector import RemoteVectorEnv

#: Seconds between progress lines.
PROGRESS_INTERVAL = 1.0

__all__ = ["AGENTS", "noop_agent", "play", "random_agent"]


def random_agent(env: RemoteVectorEnv) -> Callable[[np.ndarray], list[Any]]:
    """Samples each remote's action space: keys pressed and released, clicks anywhere.

    Args:
        env: the vector env played.

    Returns:
        The agent: observations in, one action per remote out.
    """
    spaces = [env.single_action_space] * env.num_envs
    for i, space in enumerate(spaces):
        space.seed(i)
    return lambda observations: [space.sample() for space in spaces]


def noop_agent(env: RemoteVectorEnv) -> Callable[[np.ndarray], list[Any]]:
    """Does nothing: how the game goes on by itself.

    Args:
        env: the vector env played.

    Returns:
        The agent: observations in, an empty action per remote out.
    """
    return lambda observations: [[] for _ in range(env.num_envs)]


AGENTS: dict[str, Callable[[RemoteVectorEnv], Callable[[np.ndarray], list[Any]]]] = {
    "random": random_agent,
    "noop": noop_agent,
}


def play(
    env_id: str | None,
    *,
    remote: str | None = None,
    n: int = 1,
    agent: str = "random",
    steps: int | None = None,
    seconds: float | None = None,
    fps: float | None = None,
    password: str | None = None,
    dashboard: int | None = None,
    out: TextIO = sys.stdout,
    tls_ca: str | None = None,
    ray: str | None = None,
) -> dict[str, Any]:
    """Run ``agent`` for ``steps`` steps (or ``seconds``); print progress; return a summary.

    Args:
        env_id: what to start here (None with ``remote``).
        remote: the address of running remotes, instead of starting them.
        n: remotes to start (or to lease from a ``pool://`` ``remote``).
        agent: a name in :data:`AGENTS`.
        steps: steps to play (None: until ``seconds``, or Ctrl-C).
        seconds: seconds to play.
        fps: the remotes' frame rate.
        password: the remotes' password.
        dashboard: serve the live dashboard (:mod:`remotes.dashboard`) on this port of
            127.0.0.1 (0 picks a free one) while playing.
        out: where progress goes.
        tls_ca: a CA bundle for ``vnc+tls://`` remotes.
        ray: start the remotes on this Ray cluster instead ("" for $RAY_ADDRESS or a new
            local one; :func:`remotes.ray.start_ray`).

    Returns:
        ``steps``, ``remotes``, ``steps_per_second``, ``episodes`` and each finished
        episode's return (``returns``).

    Raises:
        ValueError: ``remote`` with ``ray``, neither ``env_id`` nor ``remote``, or a
            dashboard port that cannot be served.
        KeyboardInterrupt: Ctrl-C, after the summary is printed.
    """
    local: RemoteGroup | None = None
    if remote is not None and ray is not None:
        raise ValueError("--ray starts remotes and --remote names running ones: give one")
    if remote is None:
        if env_id is None:
            raise ValueError("give an ENV_ID to start local remotes, or --remote ADDRESS")
        if ray is not None:
            from .ray import start_ray

            print(f"starting {n} remote(s) of {env_id} on Ray ...", file=out, flush=True)
            local = start_ray(env_id, n, address=ray or None, password=password)
        else:
            print(f"starting {n} local remote(s) of {env_id} ...", file=out, flush=True)
            local = start_local(env_id, n, password=password)
        print(f"remotes: {local.address}", file=out, flush=True)
    try:
        env = RemoteVectorEnv(
            local if local is not None else remote,  # type: ignore[arg-type]
            password=password, fps=fps, env_id=env_id if local is None else None, tls_ca=tls_ca,
            num_envs=n if is_pool(remote) else None,  # pool://: lease n remotes of env_id
        )
    except BaseException:
        if local is not None:
            local.close()
        raise
    board = None
    try:
        if dashboard is not None:
            from .dashboard import Dashboard

            board = Dashboard.for_env(env)
            try:
                url = board.start(dashboard)
            except OSError as exc:
                raise ValueError(
                    f"cannot serve the dashboard on port {dashboard}: {exc.strerror or exc}; "
                    "pick another with --dashboard PORT (0 picks a free one)"
                ) from None
            print(f"dashboard: {url}", file=out, flush=True)
        act = AGENTS[agent](env)
        observations, _ = env.reset(seed=0)
        if board is not None:
            board.record(observations)
        returns = np.zeros(env.num_envs)
        finished: list[float] = []
        started = last = time.monotonic()
        done_steps = last_steps = 0
        interrupted = False
        try:
            while (steps is None or done_steps < steps) and (
                seconds is None or time.monotonic() - started < seconds
            ):
                observations, rewards, terminated, truncated, info = env.step(act(observations))
                if board is not None:
                    board.record(observations, rewards, terminated, truncated, info)
                returns += rewards
                for i in np.flatnonzero(terminated | truncated):
                    finished.append(float(returns[i]))
                    returns[i] = 0.0
                done_steps += 1
                now = time.monotonic()
                if now - last >= PROGRESS_INTERVAL:
                    rate = (done_steps - last_steps) / (now - last)
                    recent = finished[-20:]
                    mean = f"{np.mean(recent):+.2f}" if recent else "n/a"
                    print(
                        f"step {done_steps:6d}  {rate:5.1f} steps/s per remote ({env.fps:g} target)"
                        f"  episodes {len(finished):4d}  mean return (last 20) {mean}"
                        f"  current {np.round(returns, 1).tolist()}",
                        file=out,
                        flush=True,
                    )
                    last, last_steps = now, done_steps
        except KeyboardInterrupt:  # Ctrl-C: the summary of what was played, then stop
            interrupted = True
        elapsed = time.monotonic() - started
        summary = {
            "steps": done_steps,
            "remotes": env.num_envs,
            "steps_per_second": done_steps / elapsed if elapsed else 0.0,
            "episodes": len(finished),
            "returns": finished,
        }
        print(
            f"{'stopped (Ctrl-C)' if interrupted else 'done'}: {done_steps} steps x "
            f"{env.num_envs} remote(s) in {elapsed:.1f} s "
            f"({summary['steps_per_second']:.1f} steps/s per remote), {len(finished)} episodes",
            file=out,
            flush=True,
        )
        if interrupted:
            raise KeyboardInterrupt  # the remotes close below; the command exits 130
        return summary
    finally:
        if board is not None:
            board.close()
        env.close()
        if local is not None:
            local.close()
