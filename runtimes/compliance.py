"""A compliance suite every runtime subclasses to show it keeps the :class:`Runtime` contract.

Subclass :class:`RuntimeCompliance` in a ``Test...`` class, set :attr:`~RuntimeCompliance.env_id`
and, if the runtime needs arguments or a slow environment, override
:meth:`~RuntimeCompliance.make_runtime` and the class attributes that size the checks::

    class TestCatchCompliance(RuntimeCompliance):
        env_id = "builtin.Catch-v0"

The checks: the env id is registered; the framebuffer is ``uint8[height, width, 3]`` and
stays the same array object; same seed and same events give the same frames, rewards and
info; different seeds give different episodes; the episode ends by its declared
``max_episode_frames`` and stays done (advancing 0 frames) until reset; describe() and
info are JSON; ``advance(events, k)`` gives the same final frame, reward, done and info
as k advances of 1 frame and as k steps (1 x k == k x 1), also when done comes inside an
advance; it reports how many frames ran, stops at done, and refuses ``frames < 1``.

The suite is for lockstep runtimes (``Runtime.lockstep``): it needs same-seed replays.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import numpy as np
import pytest

from runtimes import registry
from runtimes.base import InputEvent, KeyEvent, PointerEvent, Runtime, StepResult

#: Seed of the scripted input, so that every run of the suite sends the same events.
SCRIPT_SEED = 20240601

Trace = list[tuple[str, float, bool, str]]
#: One row per advance: frame hash, reward, done, info, frames, text, observation (JSON).
AdvanceTrace = list[tuple[str, float, bool, str, int, str | None, str]]
#: The three ways of playing k frames on one input that must agree.
HOWS = ("advance k", "k x advance 1", "k x step")


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
    #: Frames per advance the advance checks use: 1, and counts that leave done to fall
    #: inside an advance now and then.
    advance_frames: ClassVar[tuple[int, ...]] = (1, 4, 7)

    # Hooks ---------------------------------------------------------------------------

    def make_runtime(self) -> Runtime:
        """A new runtime under test; override to pass arguments.

        Returns:
            A runtime, not yet reset.
        """
        return registry.make(self.env_id)

    def script(self, runtime: Runtime, frames: int) -> list[list[InputEvent]]:
        """Events for each of ``frames`` frames, made from the keys and buttons it declares.

        Key presses and releases of declared keys, pointer moves anywhere on screen and
        presses and releases of declared buttons, from a fixed seed; now and then a key
        tapped or a button clicked within one frame (down and up in the same list), which
        must count for that frame only.

        Args:
            runtime: the runtime under test (its declared keys and buttons).
            frames: how many frames.

        Returns:
            One list of events per frame.
        """
        rng = random.Random(SCRIPT_SEED)
        keys = list(runtime.keys)
        script: list[list[InputEvent]] = []
        for _ in range(frames):
            events: list[InputEvent] = []
            if keys and rng.random() < 0.3:
                events.append(KeyEvent(rng.choice(keys), rng.random() < 0.6))
            if keys and rng.random() < 0.1:
                key = rng.choice(keys)
                events += [KeyEvent(key, True), KeyEvent(key, False)]
            x, y = rng.randrange(runtime.width), rng.randrange(runtime.height)
            if rng.random() < 0.5:
                events.append(PointerEvent(x, y, rng.getrandbits(8) & runtime.buttons))
            if runtime.buttons and rng.random() < 0.1:
                events += [PointerEvent(x, y, runtime.buttons), PointerEvent(x, y, 0)]
            script.append(events)
        return script

    # Helpers -------------------------------------------------------------------------

    def play(
        self, runtime: Runtime, seed: int | None, script: Sequence[Sequence[InputEvent]]
    ) -> Trace:
        """Reset with ``seed``, play ``script``; one (frame hash, reward, done, info) a frame.

        Args:
            runtime: the runtime under test.
            seed: the episode's seed.
            script: one list of events per frame.

        Returns:
            The trace, the first row the reset's frame.
        """
        runtime.reset(seed)
        trace: Trace = [(_digest(runtime.framebuffer), 0.0, False, "")]
        for events in script:
            result = runtime.step(list(events))
            trace.append(
                (_digest(runtime.framebuffer), result.reward, result.done, _json(result.info))
            )
        return trace

    def declared_max_frames(self, runtime: Runtime) -> int | None:
        """The frames an episode may last: the class's ``max_frames``, else the runtime's
        ``max_episode_frames`` describe key.

        Args:
            runtime: the runtime under test.

        Returns:
            The limit, or None when neither says one.
        """
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
            if not result.done:
                assert result.frames == 1
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
            assert result.frames == 0
            _json(result.info)
        runtime.reset(3)
        assert not runtime.step([]).done

    # Advancing several frames at once ----------------------------------------------

    def advance_in_chunks(
        self,
        runtime: Runtime,
        seed: int,
        chunks: Iterable[Sequence[InputEvent]],
        k: int,
        how: str,
        limit: int,
    ) -> AdvanceTrace:
        """Reset with ``seed``; for each events list in ``chunks``, apply it and hold the
        input for ``k`` frames, by ``how``: ``"advance k"`` (one advance), ``"k x advance
        1"`` or ``"k x step"``. One row per chunk, stopping at done or after ``limit`` chunks.

        A row is what an advance of k reports (frames summed, info merged, the last text
        and observation) and the hash of the frame drawn at its end.

        Args:
            runtime: the runtime under test.
            seed: the episode's seed.
            chunks: the events of each chunk.
            k: frames each chunk holds its input for.
            how: ``"advance k"``, ``"k x advance 1"`` or ``"k x step"``.
            limit: the most chunks played.

        Returns:
            One row per chunk played.
        """
        runtime.reset(seed)
        trace: AdvanceTrace = []
        for events in itertools.islice(chunks, limit):
            if how == "advance k":
                total = runtime.advance(list(events), k)
            else:
                total = StepResult(frames=0)
                for i in range(k):
                    held = list(events) if i == 0 else []
                    if how == "k x advance 1":
                        one = runtime.advance(held, 1)
                    else:
                        one = runtime.step(held)
                    total.reward += one.reward
                    total.frames += one.frames
                    total.info.update(one.info)
                    total.text = one.text if one.text is not None else total.text
                    if one.observation is not None:
                        total.observation = one.observation
                    if one.done:
                        total.done = True
                        break
            trace.append(
                (
                    _digest(runtime.framebuffer),
                    total.reward,
                    total.done,
                    _json(total.info),
                    total.frames,
                    total.text,
                    _json(total.observation),
                )
            )
            if total.done:
                break
        return trace

    def test_advance_matches_stepping(self) -> None:
        """One advance of k frames, k advances of 1 and k steps end in the same place."""
        for k in self.advance_frames:
            runtime = self.make_runtime()
            chunks = self.script(runtime, self.frames // k)
            runs = [
                self.advance_in_chunks(runtime, 11, chunks, k, how, len(chunks)) for how in HOWS
            ]
            assert runs[0] == runs[1] == runs[2], f"advance({k}) differs from stepping"
            assert all(row[4] == k for row in runs[0] if not row[2]), "frames != k before done"
            assert len({row[0] for row in runs[0]}) > 1, "the screen never changed: drawn?"

    def test_advance_matches_stepping_up_to_done(self) -> None:
        """Played to the end of an episode, the ways agree on the frame done came at, even
        when it comes in the middle of an advance (which then reports fewer frames)."""
        runtime = self.make_runtime()
        max_frames = self.declared_max_frames(runtime)
        if max_frames is None:
            return
        k = max(self.advance_frames)
        script = self.script(runtime, self.frames)
        runs = [
            self.advance_in_chunks(runtime, 13, itertools.cycle(script), k, how, max_frames)
            for how in HOWS
        ]
        assert runs[0] == runs[1] == runs[2], f"advance({k}) to done differs from stepping"
        *before, last = runs[0]
        assert last[2], f"not done within {max_frames} frames"
        assert all(row[4] == k and not row[2] for row in before)
        assert 1 <= last[4] <= k
        assert sum(row[4] for row in runs[0]) <= max_frames

    def test_advance_reports_its_frames(self) -> None:
        runtime = self.make_runtime()
        runtime.reset(5)
        result = runtime.advance([], 3)
        assert isinstance(result, StepResult)
        assert result.frames == 3 or (result.done and 1 <= result.frames <= 3)
        if not result.done:
            assert runtime.step([]).frames == 1

    def test_advance_of_no_frames_is_refused_and_changes_nothing(self) -> None:
        runtime, twin = self.make_runtime(), self.make_runtime()
        events = self.script(runtime, 1)[0]
        for each in (runtime, twin):
            each.reset(6)
            each.advance([], 2)
        before = _digest(runtime.framebuffer)
        for frames in (0, -1):
            with pytest.raises(ValueError, match="frames"):
                runtime.advance(events, frames)
        assert _digest(runtime.framebuffer) == before
        a, b = runtime.advance(events, 3), twin.advance(events, 3)
        assert (a.reward, a.done, _json(a.info), a.frames) == (
            b.reward, b.done, _json(b.info), b.frames
        )
        assert _digest(runtime.framebuffer) == _digest(twin.framebuffer)

    def test_advance_stops_at_done_and_stays_done(self) -> None:
        runtime = self.make_runtime()
        max_frames = self.declared_max_frames(runtime)
        if max_frames is None:
            return
        runtime.reset(5)
        ran, result = 0, StepResult(frames=0)
        while not result.done and ran < max_frames:
            result = runtime.advance([], max_frames)
            assert result.frames >= 1
            ran += result.frames
        assert result.done and 1 <= ran <= max_frames
        stepped = self.make_runtime()
        stepped.reset(5)
        steps = 1
        while not stepped.step([]).done:
            steps += 1
        assert ran == steps, "advance reported other frames than stepping took to done"
        # A finished episode advances no further, whatever arrives, until reset.
        frame = _digest(runtime.framebuffer)
        for events in self.script(runtime, 5):
            for after in (runtime.advance(events, 5), runtime.step(events)):
                assert (after.done, after.reward, after.frames) == (True, 0.0, 0)
            assert _digest(runtime.framebuffer) == frame
        runtime.reset(5)
        assert not runtime.advance([], 1).done

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
