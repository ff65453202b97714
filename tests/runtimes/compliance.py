"""A compliance suite every runtime subclasses to show it keeps the :class:`Runtime` contract.

Subclass :class:`RuntimeCompliance` in a ``Test...`` class, set :attr:`~RuntimeCompliance.env_id`
and, if the runtime needs arguments or a slow environment, override
:meth:`~RuntimeCompliance.make_runtime` and the class attributes that size the checks::

    class TestCatchCompliance(RuntimeCompliance):
        env_id = "builtin.Catch-v0"

The checks: the env id is registered; the framebuffer is ``uint8[height, width, 3]`` and
stays the same array object; same seed and same events give the same frames, rewards and
info; different seeds give different episodes; the episode ends by its declared
``max_episode_frames`` and stays done until reset; describe() and info are JSON;
``advance(events, k)`` gives the same final frame, reward and done as k frames stepped
one at a time (1 x k == k x 1), and stops at done saying how many frames ran.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from runtimes import registry
from runtimes.base import InputEvent, KeyEvent, PointerEvent, Runtime, StepResult

#: Seed of the scripted input, so that every run of the suite sends the same events.
SCRIPT_SEED = 20240601

Trace = list[tuple[str, float, bool, str]]


class RuntimeCompliance:
    """Checks any runtime must pass; subclasses set :attr:`env_id`."""

    #: The env id under test, as registered in ``runtimes.registry``.
    env_id: ClassVar[str]
    #: Frames the determinism checks play.
    frames: ClassVar[int] = 300
    #: Frames by which an episode must be done; ``None`` reads ``max_episode_frames`` from
    #: describe() and skips the check if the runtime declares none.
    max_frames: ClassVar[int | None] = None
    #: Two seeds whose episodes must differ.
    seeds: ClassVar[tuple[int, int]] = (1, 2)

    # Hooks ---------------------------------------------------------------------------

    def make_runtime(self) -> Runtime:
        """A new runtime under test; override to pass arguments."""
        return registry.make(self.env_id)

    def script(self, runtime: Runtime, frames: int) -> list[list[InputEvent]]:
        """Events for each of ``frames`` frames, made from the keys and buttons it declares.

        Key presses and releases of declared keys, pointer moves anywhere on screen and
        presses and releases of declared buttons, from a fixed seed.
        """
        rng = random.Random(SCRIPT_SEED)
        keys = list(runtime.keys)
        script: list[list[InputEvent]] = []
        for _ in range(frames):
            events: list[InputEvent] = []
            if keys and rng.random() < 0.3:
                events.append(KeyEvent(rng.choice(keys), rng.random() < 0.6))
            if rng.random() < 0.5:
                x, y = rng.randrange(runtime.width), rng.randrange(runtime.height)
                events.append(PointerEvent(x, y, rng.getrandbits(8) & runtime.buttons))
            script.append(events)
        return script

    # Helpers -------------------------------------------------------------------------

    def play(
        self, runtime: Runtime, seed: int | None, script: Sequence[Sequence[InputEvent]]
    ) -> Trace:
        """Reset with ``seed``, play ``script``; one (frame hash, reward, done, info) a frame."""
        runtime.reset(seed)
        trace: Trace = [(_digest(runtime.framebuffer), 0.0, False, "")]
        for events in script:
            result = runtime.step(list(events))
            trace.append(
                (_digest(runtime.framebuffer), result.reward, result.done, _json(result.info))
            )
        return trace

    def declared_max_frames(self, runtime: Runtime) -> int | None:
        if self.max_frames is not None:
            return self.max_frames
        value = runtime.describe().get("max_episode_frames")
        return int(value) if value is not None else None

    # Checks --------------------------------------------------------------------------

    def test_registered(self) -> None:
        assert self.env_id in registry.env_ids()
        runtime = self.make_runtime()
        assert runtime.env_id == self.env_id

    def test_framebuffer_shape_and_dtype(self) -> None:
        runtime = self.make_runtime()
        expected = (runtime.height, runtime.width, 3)
        assert runtime.framebuffer.shape == expected
        assert runtime.framebuffer.dtype == np.uint8
        runtime.reset(0)
        runtime.step([])
        assert runtime.framebuffer.shape == expected
        assert runtime.framebuffer.dtype == np.uint8
        assert runtime.framebuffer.flags.c_contiguous

    def test_framebuffer_is_the_same_array_throughout(self) -> None:
        runtime = self.make_runtime()
        framebuffer = runtime.framebuffer
        for seed, events in zip((0, 1, None), self.script(runtime, 3), strict=True):
            runtime.reset(seed)
            assert runtime.framebuffer is framebuffer
            for _ in range(10):
                runtime.step(events)
                assert runtime.framebuffer is framebuffer

    def test_first_frame_is_drawn(self) -> None:
        runtime = self.make_runtime()
        runtime.reset(0)
        assert runtime.framebuffer.any(), "reset() must draw the first frame"

    def test_step_result(self) -> None:
        runtime = self.make_runtime()
        runtime.reset(0)
        for events in self.script(runtime, 30):
            result = runtime.step(events)
            assert isinstance(result, StepResult)
            assert isinstance(result.reward, float)
            assert isinstance(result.done, bool)
            assert isinstance(result.info, dict)
            _json(result.info)

    def test_same_seed_same_episode(self) -> None:
        runtime = self.make_runtime()
        script = self.script(runtime, self.frames)
        first = self.play(runtime, 7, script)
        again = self.play(runtime, 7, script)  # the same object, reset after an episode
        fresh = self.play(self.make_runtime(), 7, script)
        assert first == again
        assert first == fresh

    def test_different_seeds_differ(self) -> None:
        runtime = self.make_runtime()
        script = self.script(runtime, self.frames)
        a, b = (self.play(runtime, seed, script) for seed in self.seeds)
        assert [frame for frame, *_ in a] != [frame for frame, *_ in b]

    def test_unseeded_resets_work(self) -> None:
        runtime = self.make_runtime()
        script = self.script(runtime, 20)
        assert len(self.play(runtime, None, script)) == 21

    def test_episode_ends_within_its_max_frames(self) -> None:
        runtime = self.make_runtime()
        max_frames = self.declared_max_frames(runtime)
        if max_frames is None:
            return
        runtime.reset(3)
        script = self.script(runtime, self.frames)
        result = StepResult()
        for frame in range(max_frames):
            result = runtime.step(script[frame % len(script)])
            if result.done:
                break
        assert result.done, f"not done after {max_frames} frames"
        # Stepping a finished episode keeps saying done, whatever arrives, until reset.
        for events in script[:20]:
            result = runtime.step(events)
            assert result.done
            assert result.reward == 0.0
            _json(result.info)
        runtime.reset(3)
        assert not runtime.step([]).done

    #: Frames per advance the advance checks use.
    advance_frames: ClassVar[tuple[int, ...]] = (1, 4, 7)

    def _chunks(self, runtime: Runtime, k: int) -> list[list[InputEvent]]:
        return self.script(runtime, self.frames // k)

    def test_advance_matches_stepping(self) -> None:
        """One advance of k frames, k advances of 1 and k steps end in the same place."""
        for k in self.advance_frames:
            runs: list[list[tuple[str, float, bool]]] = []
            for how in ("advance k", "k x advance 1", "k x step"):
                runtime = self.make_runtime()
                runtime.reset(11)
                trace = []
                for events in self._chunks(runtime, k):
                    if how == "advance k":
                        result = runtime.advance(events, k)
                        reward, done = result.reward, result.done
                    else:
                        reward, done = 0.0, False
                        for i in range(k):
                            call = runtime.advance if how == "k x advance 1" else None
                            held = events if i == 0 else []
                            one = call(held, 1) if call else runtime.step(held)
                            reward += one.reward
                            done = one.done
                            if done:
                                break
                    trace.append((_digest(runtime.framebuffer), reward, done))
                    if done:
                        break
                runs.append(trace)
            assert runs[0] == runs[1] == runs[2], f"advance({k}) differs from stepping"

    def test_advance_reports_frames_and_stops_at_done(self) -> None:
        runtime = self.make_runtime()
        runtime.reset(5)
        result = runtime.advance([], 3)
        assert isinstance(result, StepResult) and result.frames in (0, 1, 2, 3)
        if not result.done:
            assert result.frames == 3
        with np.testing.assert_raises(ValueError):
            runtime.advance([], 0)
        max_frames = self.declared_max_frames(runtime)
        if max_frames is None:
            return
        runtime.reset(5)
        ran, result = 0, StepResult()
        while not result.done and ran <= max_frames:
            result = runtime.advance([], max_frames)
            ran += result.frames
        assert result.done and 1 <= ran <= max_frames
        assert runtime.advance([], 5).done  # and stays done until reset

    def test_describe(self) -> None:
        runtime = self.make_runtime()
        description = json.loads(json.dumps(runtime.describe(), allow_nan=False))
        assert description["width"] == runtime.width
        assert description["height"] == runtime.height
        assert description["keys"] == list(runtime.keys)
        assert description["buttons"] == runtime.buttons
        assert all(isinstance(key, str) for key in runtime.keys)
        assert runtime.fps > 0


def _digest(frame: np.ndarray) -> str:
    return hashlib.blake2b(frame.tobytes(), digest_size=16).hexdigest()


def _json(value: Any) -> str:
    """``value`` as JSON, failing on anything a JSON client could not read."""
    return json.dumps(value, allow_nan=False, sort_keys=True)
