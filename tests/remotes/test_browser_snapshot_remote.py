"""Browser snapshots end to end: real MiniWoB remotes in lockstep, ``RemoteEnv``'s
``clone_state``/``restore_state`` (docs/snapshots.md, "Browser tasks").

Covers: a state cloned at step 5, the rest of the episode, a restore on the same remote
and, from exported bytes, on another remote of the same task give the same frames,
rewards and ends (each restore checked against the snapshot's digest by the remote);
describe says a lockstep browser remote can snapshot.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

from remotes import RemoteEnv, start_local
from remotes.local import LocalRemotes
from tests.runtimes.test_browser import MISSING

pytestmark = pytest.mark.timeout(300)

TASK = "miniwob.ClickCheckboxes-v0"
#: The pointer over the task, then clicks down the left (boxes) and over the rest.
STEPS: list[list[tuple[Any, ...]]] = [
    [("PointerEvent", 30 + 20 * (i % 6), 70 + 15 * (i % 8), 0)] for i in range(6)
] + [
    [("PointerEvent", x, y, 0), ("PointerEvent", x, y, 1), ("PointerEvent", x, y, 0)]
    for x, y in [(10, y) for y in range(58, 200, 12)]
    + [(x, y) for y in range(70, 210, 22) for x in range(40, 160, 29)]
]
AT = 5


@pytest.fixture(scope="module")
def browsers() -> Iterator[LocalRemotes]:
    """Two lockstep remotes of the task, each restore checked against its digest."""
    if MISSING is not None:
        pytest.skip(MISSING)  # (conftest fails the skip in CI)
    before = os.environ.get("UNIVERSE_REMOTE_VERIFY_RESTORES")
    os.environ["UNIVERSE_REMOTE_VERIFY_RESTORES"] = "1"
    try:
        with start_local(TASK, 2, extra_args=["--mode", "lockstep"]) as local:
            yield local
    finally:
        if before is None:
            del os.environ["UNIVERSE_REMOTE_VERIFY_RESTORES"]
        else:
            os.environ["UNIVERSE_REMOTE_VERIFY_RESTORES"] = before


def play(env: RemoteEnv, steps: list[list[tuple[Any, ...]]]) -> list[tuple[str, float, bool]]:
    out = []
    for action in steps:
        obs, reward, terminated, truncated, _ = env.step(action)
        out.append((hashlib.sha256(obs.tobytes()).hexdigest(), float(reward), terminated))
        if terminated or truncated:
            break
    return out


def test_a_browser_state_restores_here_and_on_another_remote(browsers: LocalRemotes) -> None:
    env = RemoteEnv(browsers.addresses[0], mode="lockstep")
    other = RemoteEnv(browsers.addresses[1], mode="lockstep")
    try:
        env.reset(seed=7)
        other.reset(seed=3)
        play(env, STEPS[:AT])
        state = env.unwrapped.clone_state(export=True)
        first = play(env, STEPS[AT:])
        assert first[-1][2] and len({h for h, *_ in first}) > 2
        env.unwrapped.restore_state(state)
        assert play(env, STEPS[AT:]) == first
        other.unwrapped.restore_state(state)
        assert play(other, STEPS[AT:]) == first
    finally:
        env.close()
        other.close()
