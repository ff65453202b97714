"""Browser envs for tests, one per way of stepping (real time, settling, lockstep), made at
first use and closed with the module: what test_web_agent and test_browser_keys share."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import gymnasium
import pytest

from tests.optional import need_program

Env = gymnasium.Env[Any, Any]


@contextlib.contextmanager
def envs_by_way(env_id: str, ways: Mapping[str, Mapping[str, Any]]) -> Iterator[Callable[[str], Env]]:
    """``get(way)``: the env of ``env_id`` made with ``ways[way]``'s keywords (web agents'
    observations and actions); skips when MiniWoB, Xvnc or Chromium is missing."""
    pytest.importorskip("miniwob")
    need_program("Xvnc", "chromium")
    made: dict[str, Env] = {}

    def get(way: str) -> Env:
        if way not in made:
            made[way] = gymnasium.make(
                f"universe-remote/{env_id}", observations=("screen", "page"), actions="web", **ways[way],
            )
        return made[way]

    try:
        yield get
    finally:
        for env in made.values():
            env.close()


def start(env: Env, task: str, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Reset ``env`` to MiniWoB task ``task`` (its page name) with ``seed``."""
    from runtimes.registry import miniwob_env_id

    obs, info = env.reset(seed=seed, options={"env_id": miniwob_env_id(f"{task}.html")})
    return obs, info
