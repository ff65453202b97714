"""Snapshots from the agent's side (docs/snapshots.md): ``clone_state``/``restore_state``
on a gymnasium env as ale-py's, one Pong state forked into 8 running remotes that then
step identically, and a restore of a megabyte through the real client."""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterator

import numpy as np
import pytest

from envserver.snapshots import MAGIC, Snapshot, export, seal_key
from remotes import RemoteEnv, RemoteVectorEnv, start_local
from remotes.local import LocalRemotes
from rewarder.errors import RemoteError
from rewarder.snapshot_messages import shared_key
from tests.optional import needs_env

#: Remotes one state is forked into.
FORKS = 8


@pytest.fixture(scope="module")
def verified() -> Iterator[None]:
    """Every remote started here checks each restore against the snapshot's digest."""
    before = os.environ.get("UNIVERSE_REMOTE_VERIFY_RESTORES")
    os.environ["UNIVERSE_REMOTE_VERIFY_RESTORES"] = "1"
    yield
    if before is None:
        del os.environ["UNIVERSE_REMOTE_VERIFY_RESTORES"]
    else:
        os.environ["UNIVERSE_REMOTE_VERIFY_RESTORES"] = before


@pytest.fixture(scope="module")
def catch(verified: None) -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 2, extra_args=["--mode", "lockstep"]) as local:
        yield local


def test_clone_and_restore_state_as_ale_py(catch: LocalRemotes) -> None:
    env = RemoteEnv(catch.addresses[0], mode="lockstep")
    other = RemoteEnv(catch.addresses[1], mode="lockstep")
    try:
        env.reset(seed=4)
        script = [[("KeyEvent", "Left" if i % 5 < 2 else "Right", i % 3 != 0)] for i in range(300)]
        for events in script[:40]:
            env.step(events)
        state = env.unwrapped.clone_state()  # type: ignore[attr-defined]
        first = [env.step(events)[:3] for events in script]
        env.unwrapped.restore_state(state)  # type: ignore[attr-defined]
        again = [env.step(events)[:3] for events in script]
        assert all(np.array_equal(a[0], b[0]) and a[1:] == b[1:] for a, b in zip(first, again, strict=True))

        with pytest.raises(ValueError, match="export=True"):  # a token is its remote's
            other.restore_state(state)
        exported = env.clone_state(export=True)
        other.reset(seed=9)
        other.restore_state(exported)
        env.restore_state(exported)
        for events in script[:100]:
            a, b = env.step(events), other.step(events)
            assert np.array_equal(a[0], b[0]) and a[1:3] == b[1:3]
    finally:
        env.close()
        other.close()


@needs_env("atari.Pong-v0")
def test_one_pong_state_forked_into_eight_remotes(verified: None) -> None:
    with start_local("atari.Pong-v0", FORKS, extra_args=["--mode", "lockstep"]) as local:
        envs = RemoteVectorEnv(local.addresses, mode="lockstep", frameskip=4, render_mode="rgb_array")
        try:
            envs.reset(seed=list(range(FORKS)))
            up = [("KeyEvent", "Up", True)]
            for _ in range(30):
                obs, *_ = envs.step([up] * FORKS)
            assert len({o.tobytes() for o in obs}) > 1  # eight different games so far
            state = envs.fork(3)
            assert state.data is not None
            rows = envs.render()  # the restored frames
            assert rows is not None and all(np.array_equal(rows[i], rows[3]) for i in range(FORKS))
            script = [[("KeyEvent", k, True)] for k in ("Up", "Down", "Down", "Up", "space")] * 20
            for events in script:
                obs, reward, terminated, truncated, _ = envs.step([events] * FORKS)
                assert all(np.array_equal(o, obs[0]) for o in obs)
                assert len(set(reward.tolist())) == 1 and len(set(terminated.tolist())) == 1
        finally:
            envs.close()


def test_a_restore_of_a_megabyte_goes_through_the_real_client(catch: LocalRemotes) -> None:
    """A restore far over the 256 KiB any other message may have (a browser's state of a
    long episode) travels whole: sealed bytes of 1 MiB, sent by ``restore_state``, pass
    the remote's checks and reach its runtime, which says why they are not a Catch state;
    the refusal answers the request (RemoteError, not a timeout), and the env goes on."""
    env = RemoteEnv(catch.addresses[0], mode="lockstep")
    try:
        env.reset(seed=2)
        real = env.unwrapped.clone_state(export=True)  # type: ignore[attr-defined]
        data = real.data
        at = len(MAGIC) + 2
        env_id_len = struct.unpack_from("!H", data, at)[0]
        at += 2 + env_id_len
        version = data[at + 2:at + 2 + struct.unpack_from("!H", data, at)[0]].decode()
        size = 1 << 20
        sealed = export(Snapshot("builtin.Catch-v0", bytes(size), b"", 0, 0, 0), version,
                        seal_key(shared_key()))
        big = dataclasses.replace(real, remote="another remote", data=sealed)
        with pytest.raises(RemoteError, match=f"not {size}"):
            env.unwrapped.restore_state(big)  # type: ignore[attr-defined]
        env.unwrapped.restore_state(real)  # type: ignore[attr-defined]
        env.step([])
    finally:
        env.close()
