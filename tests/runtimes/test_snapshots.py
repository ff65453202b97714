"""Runtime snapshots (docs/snapshots.md): exact restores of the built-in games and Atari,
bad bytes refused field by field with nothing changed, ALE's restore hazard (ALE PR #739)
on the games it names, and the runtimes that cannot say so in describe."""

from __future__ import annotations

import pickle
import struct
import time
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from runtimes import registry
from runtimes.base import InputEvent, KeyEvent, PointerEvent, Runtime
from runtimes.errors import BadSnapshot, SnapshotUnsupported
from tests.optional import needs_env

#: Steps played after the snapshot and again after the restore.
STEPS = 1000
#: Restores in a row on the games ALE PR #739 names.
RESTORES = 10_000

KEYS = ("Up", "Down", "Left", "Right", "space")


def key_script(seed: int, n: int) -> list[list[InputEvent]]:
    rng = np.random.default_rng(seed)
    return [[KeyEvent(KEYS[int(rng.integers(len(KEYS)))], bool(rng.random() < 0.6))] for _ in range(n)]


def pointer_script(seed: int, n: int) -> list[list[InputEvent]]:
    rng = np.random.default_rng(seed)
    return [[PointerEvent(int(rng.integers(320)), int(rng.integers(240)), int(rng.integers(2)))]
            for _ in range(n)]


def play(
    runtime: Runtime, script: Sequence[Sequence[InputEvent]], frames: int = 1
) -> list[tuple[float, bool, bytes]]:
    trace = []
    for events in script:
        result = runtime.advance(events, frames)
        trace.append((result.reward, result.done, runtime.state_digest()))
    return trace


CASES: list[tuple[str, dict[str, object], Callable[[int, int], list[list[InputEvent]]], int]] = [
    ("builtin.Catch-v0", {}, key_script, 1),
    ("builtin.ClickTarget-v0", {}, pointer_script, 1),
    # Sticky actions on: ALE's generator is part of the state.
    ("atari.Breakout-v0", {"repeat_action_probability": 0.25}, key_script, 1),
    ("atari.Qbert-v0", {"repeat_action_probability": 0.25}, key_script, 1),
]


@pytest.mark.parametrize(("env_id", "options", "script", "frames"), CASES)
def test_restore_replays_exactly_here_and_on_a_fresh_runtime(
    env_id: str, options: dict[str, object], script: Callable[[int, int], list[list[InputEvent]]],
    frames: int,
) -> None:
    runtime = registry.make(env_id, **options)
    runtime.reset(seed=3)
    play(runtime, script(1, 120), 4)
    state, digest, frame = runtime.snapshot(), runtime.state_digest(), runtime.framebuffer.copy()
    actions = script(2, STEPS)
    first = play(runtime, actions, frames)
    assert len({d for _, _, d in first}) > 10  # the game really moves

    runtime.restore(state)
    assert runtime.state_digest() == digest
    assert np.array_equal(runtime.framebuffer, frame)
    assert play(runtime, actions, frames) == first

    other = registry.make(env_id, **options)  # another remote's runtime, its own history
    other.reset(seed=99)
    play(other, script(5, 30), 4)
    other.restore(state)
    assert other.state_digest() == digest
    assert play(other, actions, frames) == first


@pytest.mark.parametrize("env_id", ["builtin.Catch-v0", "atari.Pong-v0"])
def test_bad_bytes_are_refused_and_change_nothing(env_id: str, tmp_path: object) -> None:
    runtime = registry.make(env_id)
    runtime.reset(seed=1)
    play(runtime, key_script(0, 20))
    good = runtime.snapshot()
    digest = runtime.state_digest()

    class Payload:  # a pickle that would create a file if anything unpickled it
        def __reduce__(self) -> tuple[object, tuple[object, ...]]:
            return (open, (str(tmp_path) + "/pwned", "w"))

    wrong_magic = b"XXXX" + good[4:]
    truncated = good[: len(good) // 2]
    bad = [b"", b"garbage", pickle.dumps(Payload()), wrong_magic, truncated, good + b"\0"]
    for data in bad:
        with pytest.raises(BadSnapshot) as refused:
            runtime.restore(data)
        assert str(refused.value)  # says what was wrong
        assert runtime.state_digest() == digest
    assert not (tmp_path / "pwned").exists()  # type: ignore[operator]


def test_a_field_out_of_range_is_named() -> None:
    runtime = registry.make("builtin.Catch-v0")
    state = bytearray(runtime.snapshot())
    # paddle_x sits after magic(4) version(2) rng(16+16+1+4) frame misses done held catches
    at = 4 + 2 + 37 + 4 + 4 + 1 + 1 + 4
    state[at:at + 4] = struct.pack("!i", 10_000)
    with pytest.raises(BadSnapshot, match="paddle_x"):
        runtime.restore(bytes(state))


@needs_env("atari.Pong-v0")
def test_another_games_state_is_refused() -> None:
    catch, click = registry.make("builtin.Catch-v0"), registry.make("builtin.ClickTarget-v0")
    with pytest.raises(BadSnapshot, match="not a builtin.ClickTarget-v0 state|bytes"):
        click.restore(catch.snapshot())
    pong, breakout = registry.make("atari.Pong-v0"), registry.make("atari.Breakout-v0")
    with pytest.raises(BadSnapshot, match="ROM 'pong'"):
        breakout.restore(pong.snapshot())


@pytest.mark.parametrize("env_id", ["atari.Qbert-v0", "atari.Amidar-v0"])
def test_ten_thousand_restores_give_the_same_next_frame(env_id: str) -> None:
    """ALE PR #739: wrong frames after a restore, and a double free after ~2,000 restores
    of one state on Q*bert. Each restore here is followed by a step whose frame must be
    the first one's."""
    runtime = registry.make(env_id)
    runtime.reset(seed=2)
    play(runtime, key_script(4, 60), 4)
    state = runtime.snapshot()
    step = [KeyEvent("Up", True)]
    runtime.advance(step, 1)
    expected = runtime.framebuffer.copy()
    started = time.perf_counter()
    for i in range(RESTORES):
        runtime.restore(state)
        runtime.advance(step, 1)
        if not np.array_equal(runtime.framebuffer, expected):
            pytest.fail(f"restore {i}: the next frame differs in "
                        f"{(runtime.framebuffer != expected).any(axis=2).mean():.1%} of its pixels")
    print(f"{env_id}: {RESTORES} restores and steps in {time.perf_counter() - started:.1f} s")


@needs_env("atari.Pong-v0")
def test_runtimes_that_cannot_say_so_in_describe() -> None:
    assert registry.lookup("builtin.Catch-v0").describe()["snapshots"] is None  # type: ignore[attr-defined]
    assert registry.make("atari.Pong-v0").describe()["snapshots"] is None
    x11 = [env_id for env_id in registry.env_ids() if env_id.startswith("x11.")]
    assert x11, "the X11 family is installed here"
    cls = registry.lookup(x11[0])
    said = cls.describe()["snapshots"]  # type: ignore[attr-defined]
    assert isinstance(said, str) and "cannot" in said
    runtime = cls.__new__(cls)  # type: ignore[call-overload]
    with pytest.raises(SnapshotUnsupported, match="cannot"):
        runtime.snapshot()


@needs_env("atari.Pong-v0")
def test_sticky_actions_repeat_the_restored_last_action() -> None:
    """ALE's state holds no last action (what a sticky frame repeats): a restore that did
    not set it played, on this script, the action from before the restore instead."""
    runtime = registry.make("atari.Pong-v0", repeat_action_probability=0.25)
    runtime.reset(seed=3)
    actions = key_script(0, 300)
    play(runtime, actions[:100], 4)
    state = runtime.snapshot()
    first = play(runtime, actions[100:], 1)
    runtime.restore(state)
    assert play(runtime, actions[100:], 1) == first
