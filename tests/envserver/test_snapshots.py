"""Snapshots over the rewarder (docs/snapshots.md): a restore is a new branch that plays
on exactly as the original did, is recorded as one, and bad tokens and bytes are refused
clearly while the remote serves on."""

from __future__ import annotations

import asyncio
import base64
import pickle
from pathlib import Path

import pytest

from envserver.recorder import Recorder
from envserver.remote import Remote
from envserver.snapshots import Snapshot, SnapshotError, SnapshotStore, export, open_export, seal_key
from envserver.version import server_version
from recordings.reader import Recording
from rewarder.client import RewarderClient, connect
from rewarder.errors import RemoteError
from rewarder.snapshot_messages import SNAPSHOT_KEY_ENV
from runtimes import registry
from tests.conftest import StartRemote

#: Steps after the snapshot, and again after the restore.
STEPS = 1000
TIMEOUT = 120
#: The events each step of :func:`play` sent, in order.
played: list[list[tuple[str, str, bool]]] = []


@pytest.fixture(autouse=True)
def shared_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """One key for every remote of a test, as start_local gives its remotes."""
    monkeypatch.setenv(SNAPSHOT_KEY_ENV, "test key")
    return "test key"


def script(n: int, keys: tuple[str, ...] = ("Left", "Right")) -> list[list[tuple[str, str, bool]]]:
    return [[("KeyEvent", keys[(i * 7 + i // 3) % len(keys)], i % 4 != 3)] for i in range(n)]


Events = list[tuple[str, str, bool]]


def steer(remote: Remote, i: int) -> Events:
    """Catch: move towards the ball (a game that lasts); other games: a fixed script."""
    runtime = remote.runtime
    ball = getattr(runtime, "ball_x", None)
    if ball is None:
        return script(i + 1)[i]
    paddle = runtime.paddle_x + 10  # type: ignore[attr-defined]
    return [("KeyEvent", "Left", ball + 3 < paddle), ("KeyEvent", "Right", ball + 3 > paddle)]


Trace = list[tuple[float, bool, bytes]]


async def play(client: RewarderClient, remote: Remote, actions: list[Events] | int) -> Trace:
    """Step ``actions`` (or as many steered steps, appended to ``played``); the trace."""
    trace = []
    steps = range(actions) if isinstance(actions, int) else actions
    for i, given in enumerate(steps):
        events = steer(remote, i) if isinstance(given, int) else given
        played.append(events)
        reply = await client.step(events)
        trace.append((reply.reward, reply.done, remote.runtime.state_digest()))
        if reply.done:  # the same end, at the same step, both times
            break
    return trace


@pytest.mark.parametrize(("env_id", "options"), [
    ("builtin.Catch-v0", {}),
    ("atari.Breakout-v0", {"repeat_action_probability": 0.25}),
])
async def test_a_restored_branch_plays_on_exactly(
    start_remote: StartRemote, env_id: str, options: dict[str, object]
) -> None:
    remote = await start_remote(env_id, mode="lockstep", verify_restores=True, runtime_options=options)
    async with asyncio.timeout(TIMEOUT), await connect(f"ws://127.0.0.1:{remote.rewarder.port}") as client:
        await client.reset(seed=5, mode="lockstep")
        await play(client, remote, script(40))
        snap = await client.snapshot(export=True)
        episode = client.episode_id
        played.clear()
        first = await play(client, remote, STEPS)
        assert len(first) == STEPS and len({digest for *_, digest in first}) > 100
        actions = list(played)

        branch = await client.restore(token=snap.token)
        assert branch > (episode or 0)  # a new episode: the branch
        assert await play(client, remote, actions) == first

        assert snap.state is not None  # the exported bytes restore too
        await client.restore(state=snap.state)
        assert await play(client, remote, actions[:50]) == first[:50]


async def test_a_restore_is_recorded_as_a_branch_that_replays(tmp_path: Path) -> None:
    remote = Remote("builtin.Catch-v0", mode="lockstep", verify_restores=True)
    recorder = Recorder(tmp_path / "rec")
    recorder.attach(remote)
    await remote.start("127.0.0.1", 0, 0)
    try:
        address = f"ws://127.0.0.1:{remote.rewarder.port}"
        async with asyncio.timeout(TIMEOUT), await connect(address) as client:
            await client.reset(seed=2, mode="lockstep")
            await play(client, remote, script(30))
            snap = await client.snapshot()
            await play(client, remote, script(20))
            await client.restore(token=snap.token)
            after = await play(client, remote, script(10))
    finally:
        await remote.close()
        recorder.close()
    episodes = list(Recording(tmp_path / "rec"))
    branch = episodes[-1]
    restored = branch.meta["restored"]
    assert restored["from_episode"] == snap.episode_id and restored["from_frame"] == snap.frame
    assert episodes[-2].status == "reset" and len(branch) == 11  # its first frame + 10 steps
    # The recorded state is the branch's start: restored on a fresh runtime, it draws the
    # branch's first recorded frame and plays on to the recorded rewards.
    runtime = registry.make("builtin.Catch-v0")
    state = open_export(base64.b64decode(restored["state"]), runtime.env_id, server_version(),
                        seal_key("test key"))
    runtime.restore(state.state)
    frames = list(branch.frames())
    assert (frames[0] == runtime.framebuffer).all()
    assert [s.reward for s in branch.steps[1:]] == [reward for reward, _, _ in after]


async def test_bad_restores_are_refused_and_the_remote_serves_on(
    start_remote: StartRemote, tmp_path: Path
) -> None:
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    other = await start_remote("builtin.ClickTarget-v0", mode="lockstep")
    remote.restores.snapshots = SnapshotStore(max_snapshots=2)
    pwned = tmp_path / "pwned"

    class Payload:  # what a pickle would run: a file created
        def __reduce__(self) -> tuple[object, tuple[object, ...]]:
            return (open, (str(pwned), "w"))

    async with asyncio.timeout(TIMEOUT), \
            await connect(f"ws://127.0.0.1:{remote.rewarder.port}") as client, \
            await connect(f"ws://127.0.0.1:{other.rewarder.port}") as elsewhere:
        await client.reset(seed=1, mode="lockstep")
        await elsewhere.reset(seed=1, mode="lockstep")
        dropped = (await client.snapshot()).token
        for _ in range(2):
            await client.snapshot()
        foreign = await elsewhere.snapshot(export=True)
        assert foreign.state is not None
        good = await client.snapshot(export=True)
        assert good.state is not None
        forged = export(  # sealed with the right key, but not a Catch state inside
            _snapshot_of(remote, b"URc0" + bytes(40)), server_version(), seal_key("test key"),
        )
        tampered = bytearray(good.state)
        tampered[len(tampered) // 2] ^= 1
        cases = [
            ({"token": dropped}, "was dropped"),
            ({"token": foreign.token}, "no snapshot"),
            ({"state": foreign.state}, "builtin.ClickTarget-v0' cannot be restored"),
            ({"state": b"garbage bytes"}, "not an exported snapshot"),
            ({"state": pickle.dumps(Payload())}, "pickle"),
            ({"state": bytes(tampered)}, "seal does not match"),
            ({"state": forged}, "refused this state"),
        ]
        for kwargs, said in cases:
            with pytest.raises(RemoteError, match=said):
                await client.restore(**kwargs)  # type: ignore[arg-type]
            reply = await client.step([("KeyEvent", "Left", True)])  # it serves on
            assert reply.info["remote.frame"] == remote.frame
        assert not pwned.exists()
        await client.restore(token=good.token)  # and still restores


def _snapshot_of(remote: Remote, state: bytes) -> Snapshot:
    return Snapshot(remote.runtime.env_id, state, b"", 0, 0, 0)


async def test_observers_cannot_restore_or_snapshot(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    address = f"ws://127.0.0.1:{remote.rewarder.port}"
    async with asyncio.timeout(TIMEOUT), await connect(address) as agent, \
            await connect(address, observer=True) as observer:
        await agent.reset(seed=1, mode="lockstep")
        token = (await agent.snapshot()).token
        with pytest.raises(RemoteError, match="observers may only"):
            await observer.restore(token=token)
        with pytest.raises(RemoteError, match="observers may only"):
            await observer.snapshot()


async def test_real_time_restores_too(start_remote: StartRemote) -> None:
    remote = await start_remote("builtin.Catch-v0", verify_restores=True)
    async with asyncio.timeout(TIMEOUT), await connect(f"ws://127.0.0.1:{remote.rewarder.port}") as client:
        await client.wait_connected(10)
        snap = await client.snapshot()
        await remote.wait_frame(snap.frame + 5)
        branch = await client.restore(token=snap.token)
        assert branch == remote.episode_id
        assert remote.describe()["snapshots"] is None
        await remote.wait_frame()  # and it ticks on from there


def test_exported_bytes_are_read_field_by_field() -> None:
    """Every prefix and every one-byte change of exported bytes is refused with a
    SnapshotError (never another exception), and the store keeps to its byte bound."""
    key = seal_key("k")
    snap = Snapshot("builtin.Catch-v0", b"state" * 20, b"d" * 16, 3, 40, 12)
    data = export(snap, "1.0", key)
    assert open_export(data, "builtin.Catch-v0", "1.0", key).state == snap.state
    for end in range(len(data)):
        with pytest.raises(SnapshotError):
            open_export(data[:end], "builtin.Catch-v0", "1.0", key)
    for at in range(len(data)):
        changed = bytearray(data)
        changed[at] ^= 0x40
        with pytest.raises(SnapshotError):
            open_export(bytes(changed), "builtin.Catch-v0", "1.0", key)
    with pytest.raises(SnapshotError, match="another key"):
        open_export(data, "builtin.Catch-v0", "1.0", seal_key("other"))
    with pytest.raises(SnapshotError, match="universe-remote 1.0"):
        open_export(data, "builtin.Catch-v0", "2.0", key)

    store = SnapshotStore(max_snapshots=100, max_bytes=250)
    tokens = [store.add(snap) for _ in range(4)]  # 100 bytes each: two fit
    assert len(store) == 2 and store.bytes == 200
    with pytest.raises(SnapshotError, match="was dropped"):
        store.get(tokens[0])
    assert store.get(tokens[3]) is snap


async def test_keys_a_restore_brings_back_are_let_go_when_the_agent_leaves(
    start_remote: StartRemote,
) -> None:
    """The game holds what was held at the snapshot again after a restore; the remote
    counts it as the restoring agent's, so the agent leaving lets go of it (in real time a
    key left down would move the paddle for good)."""
    remote = await start_remote("builtin.Catch-v0", verify_restores=True)
    runtime = remote.runtime
    async with asyncio.timeout(TIMEOUT):
        async with await connect(f"ws://127.0.0.1:{remote.rewarder.port}") as client:
            await client.wait_connected(10)
            await client.send_action([("KeyEvent", "Left", True)])
            while "Left" not in runtime.held:  # type: ignore[attr-defined]
                await remote.wait_frame()
            snap = await client.snapshot()
            await client.send_action([("KeyEvent", "Left", False)])
            while runtime.held:  # type: ignore[attr-defined]
                await remote.wait_frame()
            await client.restore(token=snap.token)
            assert runtime.held == {"Left"}  # type: ignore[attr-defined]
            assert remote.held_keys == {"Left"}
        for _ in range(30):  # the agent has gone: its release reaches the next frame
            if not runtime.held:  # type: ignore[attr-defined]
                break
            await remote.wait_frame()
        assert runtime.held == set()  # type: ignore[attr-defined]
