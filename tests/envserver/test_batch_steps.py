"""``v0.batch.step`` on a real ``serve --games 2`` process (envserver/batch.py): a game is
stepped only for the agent that holds it, each refusal stands alone, and the frames of
a batch are in the slots of its segment."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from remotes import start_local
from remotes.local import LocalRemotes
from rewarder.batch_messages import BatchStepReply
from rewarder.blocking import BlockingRewarder
from rewarder.protocol import MAX_RESET_EPISODE_ID, StepReply
from rewarder.shm import FrameReader
from rewarder.shm_slots import SlotReader
from tests.wire import WireClient

WAIT = 10.0


@pytest.fixture(scope="module")
def two_games() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 2, extra_args=["--mode", "lockstep"], games_per_process=2) as local:
        yield local


def _channel(local: LocalRemotes, game: int, client_id: str) -> tuple[BlockingRewarder, int]:
    """A lockstep agent on ``game`` with ``client_id``, and the frame its reset began on."""
    address = local.addresses[game]
    channel = BlockingRewarder(f"127.0.0.1:{address.rewarder_port}", client_id=client_id)
    channel.connect()
    reply = channel.wait_reply(channel.send_reset(mode="lockstep"), time.monotonic() + WAIT)
    return channel, reply.frame


async def test_a_universe_style_agent_holding_no_game_gets_each_step_refused(two_games: LocalRemotes) -> None:
    """No client id: it holds no game in a batch's sense; nothing steps, each step says why."""
    client = await WireClient.open(two_games.addresses[0].rewarder_port)
    try:
        describe = await client.recv_until("v0.env.describe")
        assert describe["body"]["batch"]["game"] == 0
        frame = describe["body"]["frame"]
        await client.send("v0.batch.step", {"obs": "shm", "steps": [
            {"game": 0, "action": [], "frames": 3}, {"game": 1, "action": [], "frames": 3}]})
        reply = await client.recv_until("v0.reply.batch.step")
        steps = reply["body"]["steps"]
        assert [("not held by this agent" in s["error"]) for s in steps] == [True, True]
        await client.send("v0.batch.step", {"obs": "shm", "memfd": "yes", "steps": [
            {"game": 0, "action": [], "frames": 3}]})
        refusal = await client.recv_until("v0.reply.error")
        assert "memfd must be true or false" in refusal["body"]["message"]
        await client.send("v0.env.properties.read", {"key": "frame"})
        read = await client.recv_until("v0.reply.env.properties")
        assert read["body"]["value"] == frame  # nothing stepped
    finally:
        await client.close()


def test_a_batch_steps_the_games_its_agent_holds_and_refuses_the_others_alone(
    two_games: LocalRemotes,
) -> None:
    held, _ = _channel(two_games, 0, "agent-a")
    other, began = _channel(two_games, 1, "agent-b")  # game 1 is another agent's
    try:
        message_id = held.send_batch_step([(0, held.episode_id, [], 5), (1, other.episode_id, [], 5)])
        reply = held.wait_reply(message_id, time.monotonic() + WAIT)
        assert isinstance(reply, BatchStepReply) and reply.shm is not None
        stepped, refused = reply.steps
        assert isinstance(stepped, StepReply) and isinstance(refused, str)
        assert "not held by this agent" in refused and "openai-client-id" in refused
        alone = other.step((), 1)
        assert alone.frame == began + 1  # the batch did not move game 1
        reader = SlotReader(*reply.shm)
        height, width = reply.shm[1], reply.shm[2]
        rows = np.zeros((2, height, width, 3), np.uint8)
        assert reader.read_into([rows[0], rows[1]]) == [(stepped.frame, stepped.episode_id), None]
        assert rows[0].any()  # Catch's screen, drawn into slot 0
        reader.close()
    finally:
        held.close()
        other.close()


async def test_an_episode_id_no_frame_header_can_follow_is_refused_and_the_game_steps_on(
    two_games: LocalRemotes,
) -> None:
    """A reset naming an episode id past MAX_RESET_EPISODE_ID (the fuzzer's "99999999999999999999"
    made the next batch step fail writing its frame's 64-bit header, and the game
    recover): refused saying so; one at the bound is taken, and the game steps on through
    shared memory, its frame's header holding the id after it."""
    client = await WireClient.open_agent(two_games.addresses[1].rewarder_port)  # agent-b's, a moment ago
    try:
        for bad in ("99999999999999999999", "-1"):
            refused = await client.reset(bad, mode="lockstep")
            assert refused["method"] == "v0.reply.error", refused
            assert f"episode_id must be in 0..{MAX_RESET_EPISODE_ID}" in refused["body"]["message"]
        taken = await client.reset(str(MAX_RESET_EPISODE_ID), mode="lockstep")
        episode = taken["headers"]["episode_id"]
        assert taken["method"] == "v0.reply.env.reset" and int(episode) == MAX_RESET_EPISODE_ID + 1
        await client.send("v0.env.step", {"action": [], "frames": 2, "obs": "shm"}, episode_id=episode)
        reply = await client.recv_until("v0.reply.env.step")
        name, height, width = reply["body"]["shm"]
        frame = np.zeros((height, width, 3), np.uint8)
        reader = FrameReader(name, height, width)
        try:
            assert reader.read_into(frame) == (reply["body"]["frame"], MAX_RESET_EPISODE_ID + 1)
        finally:
            reader.close()
    finally:
        await client.close()
