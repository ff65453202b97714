"""The client's fast read of a step reply (ClientState.receive_step) agrees with the
full parser, and leaves everything unusual to it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from rewarder.client_state import Answer, ClientState
from rewarder.connections import ClientConnection
from rewarder.protocol import REPLY_STEP
from rewarder.reward_buffer import RewardBuffer

WAITING = {17: "v0.env.step"}


def _reply(headers: dict[str, Any] | None = None, body: dict[str, Any] | None = None) -> bytes:
    h = {"episode_id": "3", "parent_message_id": 17, "parent_runtime": 0.25, "message_id": 40,
         "sent_at": 1795928636.5}
    b = {"reward": 1, "done": False, "info": {"lives": 2}, "frame": 123, "shm": ["seg", 210, 160]}
    h.update(headers or {})
    b.update(body or {})
    return orjson.dumps({"method": REPLY_STEP, "headers": h, "body": b})


@pytest.mark.parametrize("headers, body", [
    ({}, {}),
    ({"episode_id": 4}, {"shm": None}),
    ({"parent_runtime": "slow"}, {"reward": 0.5, "done": True}),
])
def test_fast_read_equals_the_full_parser(headers: dict[str, Any], body: dict[str, Any]) -> None:
    data = _reply(headers, body)
    fast, full = ClientState(RewardBuffer()), ClientState(RewardBuffer())
    reply = fast.receive_step(data, WAITING)
    answer = full.receive(ClientConnection(), data.decode(), WAITING.__contains__)
    assert isinstance(answer, Answer) and reply == answer.event
    assert fast._messages == full._messages == 1


@pytest.mark.parametrize("data", [
    _reply({"parent_message_id": "17"}),  # a Universe server's string id
    _reply({"parent_message_id": 99}),  # nobody waits for it
    _reply(body={"reward": True}),
    _reply(body={"frame": 1.5}),
    _reply(body={"shm": ["seg", 210]}),
    _reply({"episode_id": "x"}),
    _reply({"sent_at": None}),
    b'{"method": "v0.env.reward", "headers": {}, "body": {}}',
    b"not json",
    b"[1, 2]",
])
def test_anything_unusual_goes_to_the_full_parser(data: bytes) -> None:
    state = ClientState(RewardBuffer())
    assert state.receive_step(data, WAITING) is None
    assert state._messages == 0  # not counted: receive() counts it
