"""The sans-I/O rewarder protocol: both ends wired in memory, no sockets."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, strategies as st

from rewarder import protocol
from rewarder.connections import ClientConnection, ServerConnection
from rewarder.errors import BadRequest, MessageTooBig, ProtocolError
from rewarder.snapshot_messages import MAX_RESTORE_MESSAGE_BYTES, RestoreRequest

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
keys = st.sampled_from(["Left", "Right", "space", "a", "Return"]) | st.integers(0, 0xFFFF)
key_events = st.tuples(st.just("KeyEvent"), keys, st.booleans())
pointer_events = st.tuples(
    st.just("PointerEvent"), st.integers(-5, 5000), st.integers(-5, 5000), st.integers(0, 255)
)
events = st.lists(key_events | pointer_events, max_size=30)


def pair() -> tuple[ClientConnection, ServerConnection]:
    return ClientConnection(), ServerConnection()


# Round trips ---------------------------------------------------------------------------


@given(st.text(max_size=30), st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_envelope_round_trip(method: str, body: dict) -> None:
    msg = protocol.Message(method, {"message_id": 3, "sent_at": 1.5}, body)
    assert protocol.Message.parse(msg.serialize()) == msg


@given(
    st.integers(0, 2**40),
    st.none() | st.text(min_size=1, max_size=30),
    st.none() | st.integers(0, protocol.MAX_SEED),
    st.none() | st.floats(protocol.MIN_FPS, protocol.MAX_FPS),
)
def test_reset_round_trip(episode_id: int, env_id: str | None, seed: int | None, fps) -> None:
    client, server = pair()
    message_id, data = client.reset(episode_id, env_id, seed, fps)
    request = server.receive(data.decode())
    assert request == protocol.ResetRequest(
        message_id, request.sent_at, episode_id, env_id, seed, fps
    )


@given(events)
def test_action_round_trip(action: list) -> None:
    client, server = pair()
    message_id, data = client.action(action)
    request = server.receive(data.decode())
    assert isinstance(request, protocol.ActionRequest)
    assert request.message_id == message_id
    assert list(request.events) == [tuple(e) for e in action]


@given(
    st.integers(0, 2**40),
    st.floats(-1e6, 1e6, allow_nan=False),
    st.booleans(),
    st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)
def test_reward_round_trip(episode_id: int, reward: float, done: bool, info: dict) -> None:
    client, server = pair()
    event = client.receive(server.reward(episode_id, reward, done, info).decode())
    assert event == protocol.Reward(episode_id, reward, done, info, event.sent_at)


@given(st.integers(0, 2**40), st.text(max_size=50), json_values)
def test_text_and_observation_round_trip(episode_id: int, text: str, obs) -> None:
    client, server = pair()
    assert client.receive(server.text(episode_id, text).decode()).text == text
    got = client.receive(server.observation(episode_id, obs).decode())
    assert (got.episode_id, got.observation) == (episode_id, obs)


def test_replies_carry_parent_runtime_and_episode() -> None:
    client, server = pair()
    ping_id, data = client.ping()
    request = server.receive(data.decode())
    assert isinstance(request, protocol.PingRequest)
    reply = client.receive(server.reply_ping(request.message_id, 0.25).decode())
    assert reply == protocol.PingReply(ping_id, reply.sent_at, 0.25)
    reset_id, data = client.reset(0)
    reply = client.receive(server.reply_reset(server.receive(data.decode()).message_id, 7, 0.5).decode())
    assert reply == protocol.ResetReply(reset_id, 7, reply.sent_at, 0.5)


def test_message_ids_count_from_zero_per_connection() -> None:
    server = ServerConnection()
    ids = [orjson.loads(server.describe(1, {"env_id": "x"}))["headers"]["message_id"] for _ in range(3)]
    assert ids == [0, 1, 2]
    assert orjson.loads(ServerConnection().close("bye"))["headers"]["message_id"] == 0


def test_wire_headers_match_universe() -> None:
    """Episode ids are strings; close carries no parent; replies always carry one."""
    server = ServerConnection()
    reward = orjson.loads(server.reward(12, 1.0, False, {}))
    assert reward["headers"]["episode_id"] == "12"
    assert isinstance(reward["headers"]["sent_at"], float)
    close = orjson.loads(server.close("bye"))
    assert "parent_message_id" not in close["headers"]
    assert close["body"] == {"message": "bye"}
    error = orjson.loads(server.reply_error(None, "bad"))
    assert "parent_message_id" in error["headers"]
    assert orjson.loads(server.reply_ping(0, 0.0))["headers"]["parent_message_id"] == 0


def test_describe_keeps_extension_keys() -> None:
    client, server = pair()
    body = {"env_id": "builtin.Catch-v0", "env_state": "running", "fps": 60, "width": 160}
    event = client.receive(server.describe(4, body).decode())
    assert (event.env_id, event.env_state, event.fps, event.episode_id) == (
        "builtin.Catch-v0", "running", 60.0, 4,
    )
    assert event.body["width"] == 160


# Bad input: every case is refused with a message saying what was wrong ------------------

HEADERS = '"headers": {"message_id": 5, "sent_at": 1.0}'
BAD_REQUESTS = [
    ("not json", "not JSON", None),
    ("[1, 2]", "not an object", None),
    ('{"headers": {}, "body": {}}', '"method" must be a string', None),
    ('{"method": "v0.control.ping", "body": {}}', '"headers" must be an object', None),
    ('{"method": "v0.control.ping", "headers": {"sent_at": 1.0}, "body": {}}', "message_id", None),
    ('{"method": "v0.control.ping", "headers": {"message_id": 5}, "body": {}}', "sent_at", 5),
    ('{"method": "v0.control.ping", ' + HEADERS + ', "body": []}', '"body" must be an object', None),
    ('{"method": "v0.env.launch", ' + HEADERS + ', "body": {}}', "unknown method 'v0.env.launch'", 5),
    ('{"method": "v0.agent.action", ' + HEADERS + ', "body": {}}', "body.action must be a list", 5),
    ('{"method": "v0.agent.action", ' + HEADERS + ', "body": {"action": [["KeyEvent", "a"]]}}',
     "3 items", 5),
    ('{"method": "v0.agent.action", ' + HEADERS + ', "body": {"action": [["KeyEvent", "a", 1]]}}',
     "down must be true or false", 5),
    ('{"method": "v0.agent.action", ' + HEADERS + ', "body": {"action": [["KeyEvent", null, true]]}}',
     "key must be a keysym name", 5),
    ('{"method": "v0.agent.action", ' + HEADERS + ', "body": {"action": [["PointerEvent", 1, "2", 0]]}}',
     "y must be an integer", 5),
    ('{"method": "v0.agent.action", ' + HEADERS + ', "body": {"action": [["PointerEvent", 1, 2, 300]]}}',
     "buttonmask must be 0..255", 5),
    ('{"method": "v0.agent.action", ' + HEADERS + ', "body": {"action": [["Joystick", 0.1]]}}',
     "unknown event 'Joystick'", 5),
    ('{"method": "v0.agent.action", ' + HEADERS + ', "body": {"action": [7]}}', "action[0] must be", 5),
    ('{"method": "v0.env.reset", "headers": {"message_id": 5, "sent_at": 1.0, "episode_id": "x"}, '
     '"body": {}}', "episode_id must be a string holding an integer", 5),
    ('{"method": "v0.env.reset", ' + HEADERS + ', "body": {"env_id": 3}}', "env_id must be a string", 5),
    ('{"method": "v0.env.reset", ' + HEADERS + ', "body": {"seed": -1}}', "seed must be", 5),
    ('{"method": "v0.env.reset", ' + HEADERS + ', "body": {"fps": 0}}', "fps must be", 5),
]


@pytest.mark.parametrize(("data", "words", "parent"), BAD_REQUESTS)
def test_bad_requests_say_what_was_wrong(data: str, words: str, parent) -> None:
    with pytest.raises(BadRequest) as info:
        ServerConnection().receive(data)
    assert words in info.value.message
    assert info.value.parent_message_id == parent


def test_binary_frames_are_refused() -> None:
    with pytest.raises(BadRequest, match="binary frames"):
        ServerConnection().receive(b'{"method": "v0.control.ping"}')


def test_oversized_messages_are_refused_unparsed() -> None:
    server = ServerConnection(max_message_bytes=100)
    with pytest.raises(MessageTooBig) as info:
        server.receive('{"method": "v0.control.ping", "pad": "' + "x" * 200 + '"}')
    assert (info.value.limit, info.value.size > 100) == (100, True)
    assert "over the limit of 100 bytes" in info.value.message


def restore_text(message_id: int, state_chars: int, method: str = "v0.env.restore") -> str:
    """A restore message whose state has ``state_chars`` characters of base64."""
    return orjson.dumps({
        "method": method, "headers": {"message_id": message_id, "sent_at": 1.0},
        "body": {"state": "A" * state_chars},
    }).decode()


def test_a_restore_has_its_own_limit() -> None:
    """A restore of a megabyte is read (one of a long browser episode); every other
    method keeps MAX_MESSAGE_BYTES."""
    request = ServerConnection().receive(restore_text(4, 4 << 20))
    assert isinstance(request, RestoreRequest) and request.message_id == 4
    assert request.state is not None and len(request.state) == 3 << 20


@pytest.mark.parametrize(("method", "chars", "hint"), [
    ("v0.agent.action", protocol.MAX_MESSAGE_BYTES, "send fewer events per v0.agent.action"),
    ("v0.env.step", protocol.MAX_MESSAGE_BYTES, "send fewer events per v0.env.step"),
    ("v0.env.restore", MAX_RESTORE_MESSAGE_BYTES, "MAX_STATE_CHARS"),
])
def test_a_message_over_its_methods_limit_names_it_and_points_at_its_id(
    method: str, chars: int, hint: str,
) -> None:
    with pytest.raises(MessageTooBig) as info:
        ServerConnection().receive(restore_text(7, chars, method))
    assert info.value.parent_message_id == 7
    assert method in info.value.message and hint in info.value.message


def test_a_message_that_only_starts_as_a_restore_gets_the_limit_of_what_it_is() -> None:
    """The start of a message only hints at its method: a second "method" key (the one a
    parser keeps) makes it an action, over the action's limit."""
    data = restore_text(5, 1 << 20)[:-1] + ',"method":"v0.agent.action"}'
    with pytest.raises(MessageTooBig) as info:
        ServerConnection().receive(data)
    assert info.value.limit == protocol.MAX_MESSAGE_BYTES and info.value.parent_message_id == 5


def test_too_many_events_are_refused() -> None:
    client, server = pair()
    _, data = client.action([("KeyEvent", "a", True)] * (protocol.MAX_ACTION_EVENTS + 1))
    with pytest.raises(BadRequest, match="split it across messages"):
        server.receive(data.decode())


def test_observers_may_only_ping() -> None:
    client, observer = ClientConnection(), ServerConnection(observer=True)
    assert isinstance(observer.receive(client.ping()[1].decode()), protocol.PingRequest)
    with pytest.raises(BadRequest, match="observers may only ping"):
        observer.receive(client.reset(0)[1].decode())


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ('{"method": "v0.env.reward", "headers": {"sent_at": 1.0}, "body": {"reward": 1}}',
         "no episode_id"),
        ('{"method": "v0.env.reward", "headers": {"sent_at": 1.0, "episode_id": "1"}, '
         '"body": {"reward": "1"}}', "numeric reward"),
        ('{"method": "v0.reply.control.ping", "headers": {"sent_at": 1.0}, "body": {}}',
         "no parent_message_id"),
        ('{"method": "v0.env.describe", "headers": {"episode_id": "1"}, "body": {}}', "sent_at"),
        ('{"method": "v0.env.launch", "headers": {"sent_at": 1.0}, "body": {}}', "unknown server method"),
    ],
)
def test_client_rejects_bad_server_messages(data: str, words: str) -> None:
    with pytest.raises(ProtocolError, match=words):
        ClientConnection().receive(data)


def test_universe_client_reset_is_accepted() -> None:
    """Universe's client sends episode_id "0", seed null and fps 60 on every reset."""
    data = orjson.dumps(
        {
            "method": "v0.env.reset",
            "headers": {"sent_at": 1479493678.19, "message_id": 10, "episode_id": "0"},
            "body": {"seed": None, "env_id": "builtin.Catch-v0", "fps": 60},
        }
    ).decode()
    request = ServerConnection().receive(data)
    assert request == protocol.ResetRequest(10, 1479493678.19, 0, "builtin.Catch-v0", None, 60)
