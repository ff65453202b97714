"""The lockstep step's two speeds over one core, and the game's own language.

A step that fits one slice is done at once by ``RewarderFront.step_now`` (no await: the
rewarder server calls it synchronously); a longer one returns None having done nothing,
and the sliced step (the same core around an advance in slices) does it. Failures in
either take the state table's error exit. The game takes orders and refuses with
``Refused``; only the rewarder front end knows message ids.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from envserver import agent_port
from envserver.inputs import MAX_CHECKED_ACTIONS
from envserver.orders import Refused, ResetOrder, StepOrder
from envserver.remote import Remote
from envserver.rewarder_front import RewarderFront
from envserver.state import Event, State
from rewarder import protocol
from rewarder.client import RewarderClient
from rewarder.errors import BadRequest
from runtimes.base import InputEvent, KeyEvent, StepResult
from tests.conftest import StartRemote

#: Seconds to wait for what a loaded 2-core machine does at once.
WAIT = 10.0


def _step(frames: int, message_id: object = "m1", episode_id: int | None = None,
          events: tuple[protocol.ActionEvent, ...] = ()) -> protocol.StepRequest:
    return protocol.StepRequest(
        message_id=message_id, sent_at=0.0, episode_id=episode_id, events=events, frames=frames
    )


def _front(remote: Remote) -> RewarderFront:
    """What the rewarder server drives (a view of the remote: one more is the same)."""
    return RewarderFront(remote)


async def _fits_one_slice(front: RewarderFront) -> None:
    """Step once through the sliced path, so the remote has measured its speed per frame."""
    await front.step(_step(1))


async def test_a_step_that_fits_one_slice_is_done_at_once_through_the_state_table(
    start_remote: StartRemote,
) -> None:
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    front = _front(remote)
    await _fits_one_slice(front)
    fired: list[Event] = []
    real_fire = remote.machine.fire

    def fire(event: Event) -> State:
        fired.append(event)
        return real_fire(event)

    remote.machine.fire = fire  # type: ignore[method-assign]
    frame = remote.frame
    reply = front.step_now(_step(2, episode_id=remote.episode_id, events=(("KeyEvent", "left", True),)))
    assert reply is not None  # no await: the whole step happened in the call
    episode, body = reply
    assert (episode, body["frame"], remote.frame) == (remote.episode_id, frame + 2, frame + 2)
    assert body["info"][protocol.FRAME_INFO_KEY] == frame + 2 and "reward" in body
    assert fired[:2] == [Event.STEP, Event.STEP_DONE] or fired[:2] == [Event.STEP, Event.EPISODE_DONE]
    assert remote.state in (State.RUNNING, State.DONE)
    assert "Left" in remote.held_keys  # the events reached the runtime's input


async def test_a_step_longer_than_a_slice_is_left_to_the_sliced_step_untouched(
    start_remote: StartRemote,
) -> None:
    """None means nothing happened: the server then awaits ``step``, which slices it."""
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    front = _front(remote)
    await _fits_one_slice(front)
    frame, state, takes = remote.frame, remote.state, remote.inputs.takes
    long_step = _step(protocol.MAX_STEP_FRAMES, events=(("KeyEvent", "left", True),))
    assert front.step_now(long_step) is None
    assert (remote.frame, remote.state, remote.inputs.takes) == (frame, state, takes)
    assert not remote.held_keys  # its events were not pushed either
    slices = 0
    real_advance = remote.runtime.advance

    def advance(events: list[InputEvent], frames: int) -> StepResult:
        nonlocal slices
        slices += 1
        return real_advance(events, frames)

    remote.runtime.advance = advance  # type: ignore[method-assign]
    _, body = await front.step(long_step)
    assert body["frame"] > frame and remote.state in (State.RUNNING, State.DONE)
    assert slices > 1 or body["done"]  # sliced (unless the episode ended in the first slice)


async def test_a_step_in_a_state_that_takes_none_is_left_to_the_async_step(
    start_remote: StartRemote,
) -> None:
    """Real time takes no step: step_now does nothing, and the async step refuses."""
    remote = await start_remote("builtin.Catch-v0")
    front = _front(remote)
    frame = remote.frame
    assert front.step_now(_step(1)) is None
    assert remote.frame >= frame and remote.state is State.RUNNING
    with pytest.raises(BadRequest) as refused:
        await front.step(_step(1, message_id="m7"))
    assert refused.value.parent_message_id == "m7"


async def test_a_refused_one_slice_step_names_its_message_and_changes_nothing(
    start_remote: StartRemote,
) -> None:
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    front = _front(remote)
    await _fits_one_slice(front)
    frame = remote.frame
    with pytest.raises(BadRequest, match="is not the current one") as stale:
        front.step_now(_step(1, message_id=41, episode_id=remote.episode_id + 5))
    with pytest.raises(BadRequest, match="does not use key") as bad_key:
        front.step_now(_step(1, message_id=42, events=(("KeyEvent", "F12", True),)))
    assert (stale.value.parent_message_id, bad_key.value.parent_message_id) == (41, 42)
    assert (remote.frame, remote.state) == (frame, State.RUNNING)


async def test_a_failure_inside_the_one_slice_core_takes_the_error_exit(
    start_remote: StartRemote,
) -> None:
    """The runtime raises mid-step: the requester hears why, the remote recovers, and a
    reset then a step work again."""
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    front = _front(remote)
    await _fits_one_slice(front)
    real_advance = remote.runtime.advance

    def broken(events: list[InputEvent], frames: int) -> StepResult:
        remote.runtime.advance = real_advance  # type: ignore[method-assign]
        raise RuntimeError("injected")

    remote.runtime.advance = broken  # type: ignore[method-assign]
    with pytest.raises(BadRequest) as failed:
        front.step_now(_step(1, message_id="m9"))
    assert failed.value.parent_message_id == "m9"
    assert re.search("failed in step.*RuntimeError: injected.*recovering", failed.value.message)
    assert remote.state in (State.RECOVERING, State.RESETTING, State.RUNNING)
    assert remote.runtime_failures >= 1 or remote.state is State.RUNNING
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        episode = await client.reset(seed=3, mode=protocol.LOCKSTEP, timeout=WAIT)
        reply = await client.step([], frames=2)
    assert reply.episode_id == episode and remote.state is State.RUNNING


async def test_the_game_refuses_in_its_own_words_without_a_message_id(
    start_remote: StartRemote,
) -> None:
    """Front ends other than the rewarder (dm_env_rpc, OpenEnv) drive the game through the
    agent port's calls with orders; a refusal is ``Refused``, no rewarder error."""
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    episode = await agent_port.reset(remote, ResetOrder(seed=5, mode=protocol.LOCKSTEP))
    assert episode == remote.episode_id
    got, body = await agent_port.step(remote, StepOrder(frames=3, episode_id=episode))
    assert (got, body["frame"]) == (episode, remote.frame)
    with pytest.raises(Refused) as refused:
        await agent_port.step(remote, StepOrder(frames=1, episode_id=episode + 1))
    assert not isinstance(refused.value, BadRequest)
    assert "step with the episode id of the last reset" in refused.value.reason
    with pytest.raises(Refused, match="no such environment"):
        await agent_port.reset(remote, ResetOrder(env_id="no.SuchEnv-v0"))
    assert remote.state is State.RUNNING


async def test_a_one_slice_step_through_the_wire_is_answered_as_before(
    start_remote: StartRemote,
) -> None:
    """What the rewarder server sends over the wire for a step the core did at once."""
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
        episode = await client.reset(seed=1, mode=protocol.LOCKSTEP)
        frames = []
        for _ in range(5):
            reply = await asyncio.wait_for(client.step([], frames=4), WAIT)
            frames.append(reply.frame)
    assert reply.episode_id == episode or reply.done
    assert frames == sorted(frames) and frames[-1] - frames[0] == 16


async def test_a_one_slice_step_applies_a_viewers_pending_input_and_its_own_as_the_queue_did(
    start_remote: StartRemote,
) -> None:
    """``Inputs.push_take``: the agent's events skip the queue only when nothing else waits
    in it; what the recorder reads (taken, their sources, the take count) and what each
    source holds down come out as a push then a take give them."""
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    front = _front(remote)
    await _fits_one_slice(front)
    inputs = remote.core.inputs
    takes = inputs.takes
    assert front.step_now(_step(1, episode_id=remote.episode_id, events=(("KeyEvent", "left", True),)))
    taken = (list(inputs.taken), inputs.taken_sources, inputs.takes)
    assert taken == ([("Left", True)], ["agent"], takes + 1)
    assert "Left" in remote.held_keys
    inputs.push(("vnc", 7), [KeyEvent("Right", True)])  # a viewer's key, waiting for the frame
    assert front.step_now(_step(1, episode_id=remote.episode_id, events=(("KeyEvent", "left", False),)))
    assert list(inputs.taken) == [("Right", True), ("Left", False)]
    assert inputs.taken_sources == ["vnc:7", "agent"] and inputs.pending == []
    assert remote.held_keys == {"Right"}  # the viewer's still down, the agent's let go
    assert front.step_now(_step(1, episode_id=remote.episode_id))
    assert (list(inputs.taken), inputs.taken_sources, inputs.takes) == ([], [], takes + 3)


async def test_an_action_is_checked_once_per_runtime_and_a_bad_one_every_time(
    start_remote: StartRemote,
) -> None:
    """``Inputs.checked``: an action the agent repeats is checked once (its events kept,
    the same each time), a refused one is refused each time, and the memory is bounded."""
    remote = await start_remote("builtin.Catch-v0", mode="lockstep")
    inputs, runtime = remote.core.inputs, remote.core.runtime
    action = (("KeyEvent", "left", True), ("KeyEvent", 65361, False))
    first = inputs.checked(runtime, action)
    assert list(first) == [("Left", True), ("Left", False)]
    assert inputs.checked(runtime, action) is first  # remembered
    assert list(inputs.checked(runtime, list(action))) == list(first)  # a list: checked anew
    for _ in range(2):
        with pytest.raises(Refused, match="does not use key 'F12'"):
            inputs.checked(runtime, (("KeyEvent", "F12", True),))
    for i in range(MAX_CHECKED_ACTIONS + 5):
        inputs.checked(runtime, (("PointerEvent", i % 3, 0, i % 256),) * (1 + i // 256))
        assert len(inputs._checked) <= MAX_CHECKED_ACTIONS
    again = inputs.checked(runtime, action)
    assert inputs.checked(runtime, action) is again
    width = runtime.width
    runtime.width = width - 1  # type: ignore[misc]  # (a screen resized: checked anew)
    try:
        assert inputs.checked(runtime, action) is not again
    finally:
        runtime.width = width  # type: ignore[misc]
    other = type(runtime)()
    assert inputs.checked(other, action) is not again  # another runtime: checked again
