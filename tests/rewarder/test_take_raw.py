"""The blocking channel's raw batch reads (rewarder/blocking_socket.py ``take_raw``,
``untake``; rewarder/blocking.py ``send_batch_steps``), which a vector's steady steps use
(remotes/lockstep_fast.py), on a real ``serve`` process of two lockstep games: a batch
step's reply taken as one parsed message, or filed back as ``take_reply`` reads it; a
refusal filed as ever; a quiet connection a TimeoutError after one read's slice; the
request the same bytes a dict of it encodes to."""

from __future__ import annotations

import time
from collections.abc import Iterator

import orjson
import pytest

from remotes.local import LocalRemotes
from rewarder.batch_messages import (
    BATCH_STEP,
    REPLY_BATCH_STEP,
    BatchStepReply,
    request_body,
    request_bytes,
    step_entry,
    steps_json,
)
from rewarder.blocking import BlockingRewarder
from rewarder.blocking_socket import READ_SLICE
from rewarder.errors import RemoteError
from rewarder.protocol import StepReply
from tests.rewarder.conftest import holding

WAIT = 10.0


@pytest.fixture
def held(two_games: LocalRemotes) -> Iterator[list[BlockingRewarder]]:
    """The shared process's two games, held by this module's agent."""
    with holding(two_games, "agent-raw") as channels:
        yield channels


def _steps(held: list[BlockingRewarder], games: list[int]) -> bytes:
    entries = []
    for game in games:
        entry = step_entry(game, held[game].episode_id, 2)
        entry["action"] = []
        entries.append(entry)
    return steps_json(entries)


def _take(channel: BlockingRewarder, message_id: int) -> tuple[dict, bytes] | None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        got = channel.take_raw(message_id, REPLY_BATCH_STEP, wait=True)
        if got is not None or channel.holds_reply(message_id):
            return got
    raise AssertionError("no reply in time")


def test_a_batch_reply_is_taken_whole_or_filed_back_for_take_reply(held: list[BlockingRewarder]) -> None:
    agent = held[0]
    sent = agent.send_batch_steps(_steps(held, [0, 1]))
    got = _take(agent, sent)
    assert got is not None
    message, text = got
    assert message["method"] == REPLY_BATCH_STEP and message["headers"]["parent_message_id"] == sent
    assert orjson.loads(text) == message
    assert sent not in agent.outstanding and not agent.holds_reply(sent)
    counted = agent.stats.messages
    steps = message["body"]["steps"]
    assert [type(s["frame"]) for s in steps] == [int, int] and all(s["done"] is False for s in steps)
    # Filed back: take_reply reads it as it reads any batch reply, counted once.
    agent.untake(sent, BATCH_STEP, text)
    assert sent in agent.outstanding and agent.stats.messages == counted  # (counted once)
    reply = agent.take_reply(sent, read=False)
    assert isinstance(reply, BatchStepReply) and sent not in agent.outstanding
    assert [s.frame for s in reply.steps if isinstance(s, StepReply)] == [s["frame"] for s in steps]
    assert [s.reward for s in reply.steps if isinstance(s, StepReply)] == [s["reward"] for s in steps]


def test_a_refusal_is_filed_for_take_reply_and_a_quiet_wait_times_out(held: list[BlockingRewarder]) -> None:
    agent = held[0]
    sent = agent.send_batch_steps(_steps(held, [0, 0]))  # game 0 twice: the remote refuses it
    assert _take(agent, sent) is None and agent.holds_reply(sent)
    with pytest.raises(RemoteError, match="once in a batch"):
        agent.take_reply(sent, read=False)
    started = time.monotonic()
    with pytest.raises(TimeoutError):  # nothing asked, nothing comes: one read's slice
        agent.take_raw(sent + 1, REPLY_BATCH_STEP, wait=True)
    assert READ_SLICE / 2 <= time.monotonic() - started < WAIT
    later = agent.send_batch_steps(_steps(held, [0, 1]))  # the connection serves on
    assert _take(agent, later) is not None


def test_a_batch_request_is_the_bytes_its_message_encodes_to() -> None:
    steps = [(0, 2, [("KeyEvent", "Up", False)], 4), (3, None, [], 4), (1, 5, [("PointerEvent", 3, 2, 1)], 4)]
    entries = []
    for game, episode, action, frames in steps:
        entry = step_entry(game, episode, frames)
        entry["action"] = action
        entries.append(entry)
    message = {"method": BATCH_STEP, "headers": {"message_id": 17, "sent_at": 1796571107.3092258},
               "body": request_body(steps)}
    assert request_bytes(17, 1796571107.3092258, steps_json(entries)) == orjson.dumps(message)
    message["body"] = request_body(steps, memfd=True)  # (asking for a sealed memfd)
    assert request_bytes(17, 1796571107.3092258, steps_json(entries), memfd=True) == orjson.dumps(message)
    entries[0]["action"] = [("KeyEvent", object(), True)]
    with pytest.raises(TypeError, match="v0.batch.step: the request holds a value JSON cannot carry"):
        steps_json(entries)
