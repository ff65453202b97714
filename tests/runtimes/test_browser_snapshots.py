"""Snapshots of MiniWoB tasks in lockstep, on the runtime itself (real Chromium, Xvnc).

Covers: every lockstep episode starts alike (page time, pointer, focus) whatever came
before; on three tasks, a snapshot at step t, the rest of the episode, another episode
that moves the pointer, clicks and types elsewhere, a restore, and the same steps again
give the same frames, rewards and ends, and the digest equals the snapshot's; action
strings and page observations replay too (bids included); garbage bytes, a crafted
pickle, another task's snapshot, too many inputs, unknown fields, keys and pointers off
the screen are refused with a clear BadSnapshot and the episode goes on unchanged;
real time refuses, in ``snapshot_refusal`` and describe before anyone asks. The
format's checks and the log's limit without a browser; the remote's snapshot store is
tested with it (tests/envserver/test_snapshots.py).
"""

from __future__ import annotations

import hashlib
import pickle
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
import pytest
import pytest_asyncio

from runtimes.base import InputEvent, KeyEvent, PointerEvent
from runtimes.browser_snapshots import PARK
from runtimes.browser_state import (
    FORMAT,
    MAX_LOG_ENTRIES,
    MAX_SNAPSHOT_BYTES,
    BrowserState,
    EpisodeLog,
    History,
    Walk,
    miniwob_version,
)
from runtimes.errors import BadSnapshot, SnapshotUnsupported
from runtimes.page_clock import EPOCH_MS
from tests.optional import needs_extra
from tests.runtimes.test_browser import MISSING

pytestmark = pytest.mark.timeout(300)
#: The async tests share the module's event loop (and its browser).
on_module_loop = pytest.mark.asyncio(loop_scope="module")

TASKS = ("miniwob.ClickButton-v0", "miniwob.EnterText-v0", "miniwob.ClickCheckboxes-v0")
#: Where the snapshot is taken in each task's episode.
SNAPSHOT_STEP = 5

Steps = list[tuple[list[InputEvent], int]]


def needs_browser() -> None:
    if MISSING is not None:
        pytest.skip(MISSING)  # (conftest fails the skip in CI)


def click(x: int, y: int) -> list[InputEvent]:
    return [PointerEvent(x, y, 0), PointerEvent(x, y, 1), PointerEvent(x, y, 0)]


def typed(text: str) -> list[InputEvent]:
    return [KeyEvent(c, down) for c in text for down in (True, False)]


def sweep() -> Steps:
    """The pointer over the task (buttons light up), then clicks down the left (boxes,
    fields) and over the rest, some typing, uneven frames; then the page's own 10 s
    limit, so the episode ends whatever the clicks did."""
    steps: Steps = [
        ([PointerEvent(x, y, 0)], 1 + i % 3)
        for i, (x, y) in enumerate((x, y) for y in range(75, 210, 40) for x in range(30, 160, 45))
    ]
    points = [(10, y) for y in range(58, 200, 12)]
    points += [(x, y) for y in range(70, 210, 22) for x in range(40, 160, 29)]
    for i, (x, y) in enumerate(points):
        steps.append((click(x, y), 1 + i % 4))
        if i % 4 == 1:
            steps.append((typed("ab"), 2))
    steps.append(([], 600))
    return steps


def frame_hash(runtime: object) -> str:
    return hashlib.sha256(runtime.framebuffer.tobytes()).hexdigest()  # type: ignore[attr-defined]


async def play(runtime: object, steps: Steps) -> list[tuple[str, float, bool, int]]:
    """Frame hash, reward, done and frames of each step, to the episode's end."""
    out = []
    for events, frames in steps:
        result = await runtime.aadvance(events, frames)  # type: ignore[attr-defined]
        out.append((frame_hash(runtime), result.reward, result.done, result.frames))
        if result.done:
            break
    return out


async def started(env_id: str) -> object:
    from runtimes.browser import RUNTIMES

    runtime = RUNTIMES[env_id]()
    await runtime.astart()
    runtime.mode = "lockstep"
    return runtime


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def button() -> AsyncIterator[object]:
    """The module's ClickButton runtime in lockstep (the other tasks start their own)."""
    needs_browser()
    runtime = await started("miniwob.ClickButton-v0")
    try:
        yield runtime
    finally:
        await runtime.aclose()  # type: ignore[attr-defined]


async def check_branch(runtime: object, task: str, seed: int) -> None:
    """Snapshot at step t, play on to the end, play another episode, restore, and the
    same steps give the same frames, rewards and ends."""
    steps = sweep()
    await runtime.areset(seed)  # type: ignore[attr-defined]
    before = await play(runtime, steps[:SNAPSHOT_STEP])
    assert not any(done for *_, done, _ in before)
    state = await runtime.asnapshot()  # type: ignore[attr-defined]
    digest, frame = await runtime.astate_digest(), frame_hash(runtime)  # type: ignore[attr-defined]
    first = await play(runtime, steps[SNAPSHOT_STEP:])
    assert first[-1][2], "the episode ended"
    assert len({h for h, *_ in first}) >= 2, "the steps changed the page"

    await runtime.areset(seed + 1)  # type: ignore[attr-defined]
    await play(runtime, [(click(150, 200), 5), (typed("zz"), 3), (click(80, 120), 2)])
    await runtime.arestore(state)  # type: ignore[attr-defined]
    assert frame_hash(runtime) == frame
    assert await runtime.astate_digest() == digest  # type: ignore[attr-defined]
    assert await play(runtime, steps[SNAPSHOT_STEP:]) == first

    await runtime.arestore(state)  # type: ignore[attr-defined]  (from the episode's end)
    assert await runtime.astate_digest() == digest  # type: ignore[attr-defined]
    assert await play(runtime, steps[SNAPSHOT_STEP:]) == first


@on_module_loop
async def test_a_restore_then_the_same_steps_give_the_same_episode_on_click_button(button: object) -> None:
    await check_branch(button, "miniwob.ClickButton-v0", 7)


@on_module_loop
@pytest.mark.parametrize("task", TASKS[1:])
async def test_a_restore_then_the_same_steps_give_the_same_episode(task: str) -> None:
    needs_browser()
    runtime = await started(task)
    try:
        await check_branch(runtime, task, 11)
    finally:
        await runtime.aclose()  # type: ignore[attr-defined]


@on_module_loop
async def test_action_strings_and_observations_replay_with_their_bids(button: object) -> None:
    runtime = button
    runtime.observe = frozenset({"elements"})  # type: ignore[attr-defined]
    try:
        await runtime.areset(3)  # type: ignore[attr-defined]
        page = runtime.take_observation()["page"]  # type: ignore[attr-defined]
        buttons = [e["bid"] for e in page["elements"] if e["role"] == "button"]
        assert len(buttons) > 1
        await runtime.arun_action(f"hover('{buttons[0]}')\nnoop(100)", lambda events: None)  # type: ignore[attr-defined]
        await runtime.aadvance([], 2)  # type: ignore[attr-defined]
        state = await runtime.asnapshot()  # type: ignore[attr-defined]
        digest = await runtime.astate_digest()  # type: ignore[attr-defined]

        async def finish() -> tuple[object, ...]:
            await runtime.arun_action(f"click('{buttons[-1]}')", lambda events: None)  # type: ignore[attr-defined]
            result = await runtime.aadvance([], 1)  # type: ignore[attr-defined]
            return frame_hash(runtime), result.reward, result.done, result.info.get("web.last_action")

        first = await finish()
        assert first[2] and str(first[3]).startswith(f"click('{buttons[-1]}'")
        await runtime.areset(4)  # type: ignore[attr-defined]
        await runtime.arun_action("scroll(0, 100)", lambda events: None)  # type: ignore[attr-defined]
        await runtime.arestore(state)  # type: ignore[attr-defined]
        assert await runtime.astate_digest() == digest  # type: ignore[attr-defined]
        assert await finish() == first
    finally:
        runtime.observe = frozenset()  # type: ignore[attr-defined]


def edited(state: bytes, **changes: object) -> bytes:
    document = orjson.loads(state)
    document.update(changes)
    return orjson.dumps(document)


@on_module_loop
async def test_bad_bytes_are_refused_clearly_and_the_episode_goes_on(button: object) -> None:
    runtime = button
    await runtime.areset(5)  # type: ignore[attr-defined]
    await runtime.aadvance(click(5, 100), 3)  # type: ignore[attr-defined]
    good = await runtime.asnapshot()  # type: ignore[attr-defined]
    digest = await runtime.astate_digest()  # type: ignore[attr-defined]

    class Boom:
        def __reduce__(self) -> tuple[object, ...]:
            return (print, ("a pickle ran",))

    document = orjson.loads(good)
    step = ["step", 1, [["pointer", 10, 10, 0]]]
    bad = {
        b"\x80\x04garbage": "not JSON",
        pickle.dumps(Boom()): "not JSON",
        b"[1, 2]": "not a browser snapshot",
        edited(good, format="pickle"): "not a browser snapshot",
        edited(good, env_id="miniwob.ClickTest-v0"): "of miniwob.ClickTest-v0, not miniwob.ClickButton-v0",
        edited(good, version=2): "version 2",
        edited(good, miniwob="0.0.1"): "miniwob 0.0.1",
        edited(good, seed="7"): "seed must be an integer",
        edited(good, log=[["walk", False]] * (MAX_LOG_ENTRIES + 1)): "MAX_LOG_ENTRIES",
        edited(good, log=[["step", 1, [["key", "F13", True]]]]): "not a key this task takes",
        edited(good, log=[["step", 1, [["pointer", 160, 5, 0]]]]): "x must be an integer in 0..159",
        edited(good, log=[["step", 0, []]]): "frames must be an integer in 1..",
        edited(good, log=[["eval", "alert(1)"]]): "log[0] must be",
        edited(good, log=[*document["log"], step, ["action", 5]]): "log[2]: an action must be a string",
        edited(good, history={**document["history"], "latest": "NaN"}): "latest must be a finite number",
        edited(good, extra=1): "fields this remote does not know: extra",
        b" " * (MAX_SNAPSHOT_BYTES + 1): "MAX_SNAPSHOT_BYTES",
    }
    for data, message in bad.items():
        with pytest.raises(BadSnapshot, match=re.escape(message)):
            await runtime.arestore(data)  # type: ignore[attr-defined]
        assert await runtime.astate_digest() == digest  # type: ignore[attr-defined]  (unchanged)
    result = await runtime.aadvance(click(4, 120), 1)  # type: ignore[attr-defined]
    assert result.frames == 1  # it goes on
    await runtime.arestore(good)  # type: ignore[attr-defined]
    assert await runtime.astate_digest() == digest  # type: ignore[attr-defined]


@on_module_loop
async def test_real_time_says_it_cannot_and_refuses(button: object) -> None:
    runtime = button
    assert runtime.snapshot_refusal is None  # type: ignore[attr-defined]  (lockstep)
    assert runtime.describe()["snapshots"] is None  # type: ignore[attr-defined]
    assert "lockstep" in type(runtime).describe()["snapshots"]  # (the class: it depends)
    await runtime.areset(1)  # type: ignore[attr-defined]
    good = await runtime.asnapshot()  # type: ignore[attr-defined]
    runtime.mode = "realtime"  # type: ignore[attr-defined]
    try:
        await runtime.areset(1)  # type: ignore[attr-defined]
        assert "real time" in runtime.snapshot_refusal  # type: ignore[attr-defined]
        assert runtime.describe()["snapshots"] == runtime.snapshot_refusal  # type: ignore[attr-defined]
        with pytest.raises(SnapshotUnsupported, match="lockstep"):
            await runtime.asnapshot()  # type: ignore[attr-defined]
        with pytest.raises(SnapshotUnsupported, match="lockstep"):
            await runtime.arestore(good)  # type: ignore[attr-defined]
    finally:
        runtime.mode = "lockstep"  # type: ignore[attr-defined]
    await runtime.arestore(good)  # type: ignore[attr-defined]  (lockstep again: it can)


@on_module_loop
async def test_a_reset_without_a_seed_can_be_saved_too(button: object) -> None:
    runtime = button
    await runtime.areset(None)  # type: ignore[attr-defined]
    await runtime.aadvance(click(3, 90), 2)  # type: ignore[attr-defined]
    state = await runtime.asnapshot()  # type: ignore[attr-defined]
    digest = await runtime.astate_digest()  # type: ignore[attr-defined]
    await runtime.areset(None)  # type: ignore[attr-defined]
    await runtime.arestore(state)  # type: ignore[attr-defined]
    assert await runtime.astate_digest() == digest  # type: ignore[attr-defined]


@on_module_loop
async def test_every_lockstep_episode_starts_alike(button: object) -> None:
    """Page time from 0, the pointer parked, nothing focused, whatever came before."""
    runtime: Any = button
    starts = []
    for before in ([], [(click(80, 120), 30), (typed("q"), 7)]):
        await runtime.areset(2)
        await play(runtime, before)
        await runtime.areset(9)
        page = await runtime.cdp.evaluate(
            "[performance.now(), Date.now(), document.activeElement.tagName]"
        )
        starts.append((page, runtime.page_input.mapper.position, await runtime.astate_digest()))
    assert starts[0] == starts[1]
    assert starts[0][0] == [0, EPOCH_MS, "BODY"] and starts[0][1] == PARK


# Without a browser -------------------------------------------------------------------------


def test_a_log_past_its_limit_says_so_instead_of_growing() -> None:
    log = EpisodeLog(seed=1, history=History(0, None, ()))
    for _ in range(MAX_LOG_ENTRIES + 1):
        log.walk(False)
    with pytest.raises(SnapshotUnsupported, match="MAX_LOG_ENTRIES"):
        log.state("miniwob.ClickButton-v0", False)
    assert log.entries == []
    with pytest.raises(SnapshotUnsupported, match="outside"):
        EpisodeLog(seed=2**70, history=History(0, None, ())).state("miniwob.ClickButton-v0", False)


@needs_extra("browser")
def test_the_document_round_trips_field_by_field() -> None:
    events: Sequence[InputEvent] = (KeyEvent("a", True), PointerEvent(3, 4, 1))
    log = EpisodeLog(seed=-5, history=History(3, 0.5, (1.0, -1.0, 0.5)))
    log.step(events, 7)
    log.walk(True)
    log.action("click('a3')")
    state = log.state("miniwob.ClickButton-v0", True)
    data = state.to_bytes()
    assert orjson.loads(data)["format"] == FORMAT
    again = BrowserState.parse(data, env_id="miniwob.ClickButton-v0", keys=("a",), width=160, height=210)
    assert again == state and again.miniwob == miniwob_version()
    assert again.log[1] == Walk(True)
