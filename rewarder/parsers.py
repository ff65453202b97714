"""What each rewarder method's body means: the parsers of the requests a server receives
and the readers of the events a client receives, each looked up by method name
(:data:`REQUEST_PARSERS`, :data:`EVENT_READERS`) by :mod:`rewarder.connections`.

The messages themselves, the method names and the limits are :mod:`rewarder.protocol`'s;
every refusal here is a ``ValueError`` whose message says what was wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, cast

from .batch_messages import (
    BATCH_STEP,
    INTO_KEY,
    MAX_BANK_NAME_CHARS,
    MAX_BANK_ROWS,
    MAX_BATCH_STEPS,
    MEMFD_KEY,
    REPLY_BATCH_STEP,
    BankInto,
    BatchEntry,
    BatchStepRequest,
    read_reply,
)
from .protocol import (
    ACTION,
    CONNECTION_CLOSE,
    ENV_DESCRIBE,
    ENV_OBSERVATION,
    ENV_REWARD,
    ENV_TEXT,
    MAX_ACTION_EVENTS,
    MAX_ACTION_STRING_CHARS,
    MAX_FPS,
    MAX_KEY_NAME_CHARS,
    MAX_PROPERTY_KEY_CHARS,
    MAX_RESET_EPISODE_ID,
    MAX_SEED,
    MAX_STEP_FRAMES,
    MIN_FPS,
    MODES,
    OBS_TRANSPORTS,
    OBS_VNC,
    PING,
    PROPERTIES_LIST,
    PROPERTIES_READ,
    PROPERTIES_WRITE,
    REPLY_ERROR,
    REPLY_PING,
    REPLY_PROPERTIES,
    REPLY_RESET,
    REPLY_STEP,
    RESET,
    RESETTING,
    RUNNING,
    STEP,
    ActionEvent,
    ActionRequest,
    Close,
    Describe,
    ErrorReply,
    Message,
    Observation,
    PingReply,
    PingRequest,
    PropertiesReply,
    PropertiesRequest,
    Request,
    ResetReply,
    ResetRequest,
    Reward,
    ServerEvent,
    StepReply,
    StepRequest,
    Text,
    is_number,
    parse_episode_id,
)
from .shm import MAX_FD
from .snapshot_messages import (
    REPLY_SNAPSHOT,
    RESTORE,
    SNAPSHOT,
    parse_restore,
    parse_snapshot,
    read_snapshot_reply,
)

# Requests: what a server receives --------------------------------------------------------


def _parse_any_event(index: int, event: object) -> ActionEvent:
    where = f"action[{index}]"
    if not isinstance(event, list | tuple) or not event or not isinstance(event[0], str):
        raise ValueError(
            f'{where} must be ["KeyEvent", key, down] or ["PointerEvent", x, y, buttonmask], '
            f"not {event!r}"
        )
    kind = event[0]
    if kind == "KeyEvent":
        if len(event) != 3:
            raise ValueError(f'{where} must be ["KeyEvent", key, down] (3 items), not {event!r}')
        _, key, down = event
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise ValueError(f"{where}: key must be a keysym name such as \"Left\", not {key!r}")
        if isinstance(key, str) and not 0 < len(key) <= MAX_KEY_NAME_CHARS:
            raise ValueError(f"{where}: key name must have 1 to {MAX_KEY_NAME_CHARS} characters")
        if not isinstance(down, bool):
            raise ValueError(f"{where}: down must be true or false, not {down!r}")
        return ("KeyEvent", key, down)
    if kind == "PointerEvent":
        if len(event) != 4:
            raise ValueError(
                f'{where} must be ["PointerEvent", x, y, buttonmask] (4 items), not {event!r}'
            )
        _, x, y, mask = event
        for label, value in (("x", x), ("y", y), ("buttonmask", mask)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{where}: {label} must be an integer, not {value!r}")
        if not 0 <= mask <= 255:
            raise ValueError(f"{where}: buttonmask must be 0..255, not {mask}")
        return ("PointerEvent", x, y, mask)
    raise ValueError(f"{where}: unknown event {kind!r}; use KeyEvent or PointerEvent")


def _parse_reset(message_id: Any, sent_at: float, msg: Message) -> ResetRequest:
    raw_episode = msg.headers.get("episode_id")
    episode_id = None if raw_episode is None else parse_episode_id(raw_episode, MAX_RESET_EPISODE_ID)
    body = msg.body
    env_id, seed, fps = body.get("env_id"), body.get("seed"), body.get("fps")
    if env_id is not None and not isinstance(env_id, str):
        raise ValueError(f"env_id must be a string such as \"builtin.Catch-v0\", not {env_id!r}")
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED
    ):
        raise ValueError(f"seed must be an integer in 0..{MAX_SEED} (MAX_SEED) or null, not {seed!r}")
    if fps is not None and (not is_number(fps) or not MIN_FPS <= fps <= MAX_FPS):
        raise ValueError(
            f"fps must be a number in [{MIN_FPS:g}, {MAX_FPS:g}] (MIN_FPS..MAX_FPS) or null, "
            f"not {fps!r}"
        )
    mode = body.get("mode")
    if mode is not None and mode not in MODES:
        raise ValueError(f"mode must be {' or '.join(map(repr, MODES))} or null, not {mode!r}")
    return ResetRequest(message_id, sent_at, episode_id, env_id, seed, fps, mode, _obs(body))


def _obs(body: dict[str, Any]) -> str:
    """A reset's or a step's ``obs``: how its frame reaches the agent."""
    obs = body.get("obs", OBS_VNC)
    if obs not in OBS_TRANSPORTS:
        raise ValueError(f"obs must be one of {list(OBS_TRANSPORTS)}, not {obs!r}")
    return obs


def _parse_ping(message_id: Any, sent_at: float, msg: Message) -> PingRequest:
    return PingRequest(message_id, sent_at)


def _action_string(body: dict[str, Any]) -> str | None:
    """The body's action string, or None when the action is a list of events."""
    action = body.get("action")
    if not isinstance(action, str):
        return None
    if len(action) > MAX_ACTION_STRING_CHARS:
        raise ValueError(
            f"the action string has {len(action)} characters, over the limit of "
            f"{MAX_ACTION_STRING_CHARS} (MAX_ACTION_STRING_CHARS)"
        )
    return action


def _parse_events(body: dict[str, Any]) -> tuple[ActionEvent, ...]:
    action = body.get("action", [])
    if isinstance(action, str):
        return ()
    if not isinstance(action, list):
        raise ValueError(
            'body.action must be a list of events, e.g. [["KeyEvent", "Left", true]], '
            "or (browser remotes) an action string such as \"click('a42')\""
        )
    if len(action) > MAX_ACTION_EVENTS:
        raise ValueError(
            f"action has {len(action)} events, over the limit of {MAX_ACTION_EVENTS}; "
            "split it across messages"
        )
    events: list[ActionEvent] = []
    for i, event in enumerate(action):
        # The shape nearly every step carries, as JSON gives it, read inline (a call per
        # event was a third of a batch step's parse); all else (and every refusal, with
        # its message) is _parse_any_event's.
        if type(event) is list and len(event) == 3 and event[0] == "KeyEvent":
            key, down = event[1], event[2]
            if (down is True or down is False) and (
                type(key) is int or (type(key) is str and 0 < len(key) <= MAX_KEY_NAME_CHARS)
            ):
                events.append(("KeyEvent", key, down))
                continue
        events.append(_parse_any_event(i, event))
    return tuple(events)


def _parse_action(message_id: Any, sent_at: float, msg: Message) -> ActionRequest:
    if "action" not in msg.body:
        raise ValueError('body.action must be a list of events, e.g. [["KeyEvent", "Left", true]]')
    settle = msg.body.get("settle", False)
    if not isinstance(settle, bool):
        raise ValueError(f"settle must be true or false, not {settle!r}")
    return ActionRequest(
        message_id, sent_at, _parse_events(msg.body), _action_string(msg.body), settle
    )


def _parse_step(message_id: Any, sent_at: float, msg: Message) -> StepRequest:
    raw_episode = msg.headers.get("episode_id")
    episode_id = None if raw_episode is None else parse_episode_id(raw_episode)
    frames = msg.body.get("frames", 1)
    if isinstance(frames, bool) or not isinstance(frames, int) or not 1 <= frames <= MAX_STEP_FRAMES:
        raise ValueError(f"frames must be an integer in 1..{MAX_STEP_FRAMES}, not {frames!r}")
    return StepRequest(
        message_id, sent_at, episode_id, _parse_events(msg.body), frames, _obs(msg.body),
        _action_string(msg.body),
    )


def parse_batch_step(message_id: Any, sent_at: float, msg: Message) -> BatchStepRequest:
    """``v0.batch.step`` (rewarder/batch_messages.py): each step read as a ``v0.env.step``."""
    steps, obs = msg.body.get("steps"), msg.body.get("obs", "shm")
    if obs != "shm":
        raise ValueError(f'a batch step\'s frames go through shared memory: obs must be "shm", not {obs!r}')
    if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_BATCH_STEPS:
        raise ValueError(f"steps must be a list of 1..{MAX_BATCH_STEPS} steps (MAX_BATCH_STEPS)")
    entries = []
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            raise ValueError(f"steps[{i}] must be an object with game, episode_id, action and frames")
        game, frames = step.get("game"), step.get("frames", 1)
        if type(game) is not int or not 0 <= game < MAX_BATCH_STEPS:
            raise ValueError(f"steps[{i}].game must be a game index 0..{MAX_BATCH_STEPS - 1} (the "
                             f"describe's {'batch'!r}.game), not {game!r}")
        if type(frames) is not int or not 1 <= frames <= MAX_STEP_FRAMES:
            raise ValueError(f"steps[{i}].frames must be an integer in 1..{MAX_STEP_FRAMES}, not {frames!r}")
        if isinstance(step.get("action"), str):
            raise ValueError(f"steps[{i}]: action strings are stepped one game at a time (v0.env.step)")
        raw_episode = step.get("episode_id")
        episode_id = None if raw_episode is None else parse_episode_id(raw_episode)
        entries.append(BatchEntry(game, episode_id, _parse_events(step), frames))
    if len({e.game for e in entries}) != len(entries):
        raise ValueError("each game may appear once in a batch")
    memfd = msg.body.get(MEMFD_KEY, False)
    if type(memfd) is not bool:
        raise ValueError(f"{MEMFD_KEY} must be true or false (frames in a sealed memfd), not {memfd!r}")
    raw_into = msg.body.get(INTO_KEY)
    into = None if raw_into is None else _parse_into(raw_into, len(entries))
    return BatchStepRequest(message_id, sent_at, tuple(entries), memfd, into)


#: What a batch step's ``into`` must be (a refusal's words).
_INTO_SHAPE: Final = (f"{INTO_KEY} must be [name, fd, inode, rows, [row of each step]] (frames in the "
                      f"agent's buffer, rewarder/shm_bank.py), rows 1..{MAX_BANK_ROWS} (MAX_BANK_ROWS)")


def _parse_into(raw: Any, steps: int) -> BankInto:
    """A batch step's ``into`` (rewarder/shm_bank.py): the agent's buffer and each step's row."""
    if not (type(raw) is list and len(raw) == 5 and type(raw[0]) is str and len(raw[0]) <= MAX_BANK_NAME_CHARS
            and all(type(v) is int for v in raw[1:4]) and type(raw[4]) is list):
        raise ValueError(f"{_INTO_SHAPE}, not {raw!r:.200}")
    name, fd, inode, rows, slots = raw
    if not (0 <= fd < MAX_FD and 0 <= inode and 1 <= rows <= MAX_BANK_ROWS):
        raise ValueError(f"{_INTO_SHAPE}, not {raw!r:.200}")
    if (len(slots) != steps or any(type(row) is not int or not 0 <= row < rows for row in slots)
            or len(set(slots)) != steps):
        raise ValueError(f"{INTO_KEY}'s rows must give each of the {steps} steps its own row in "
                         f"0..{rows - 1}, not {slots!r:.200}")
    return BankInto(name, fd, inode, rows, tuple(slots))


def _parse_properties(message_id: Any, sent_at: float, msg: Message) -> PropertiesRequest:
    op = msg.method.rpartition(".")[2]
    key = msg.body.get("key", "")
    if not isinstance(key, str) or len(key) > MAX_PROPERTY_KEY_CHARS:
        raise ValueError(f"key must be a string of at most {MAX_PROPERTY_KEY_CHARS} characters")
    if op != "list" and not key:
        raise ValueError('needs a body {"key": ...} (v0.env.properties.list names the keys)')
    if op == "write" and "value" not in msg.body:
        raise ValueError('needs a body {"key": ..., "value": ...}')
    return PropertiesRequest(message_id, sent_at, op, key, msg.body.get("value"))


#: Request method -> the reader of its body: shared with :mod:`rewarder.connections`,
#: whose server side looks up each received request here.
REQUEST_PARSERS: dict[str, Callable[[Any, float, Message], Request]] = {
    RESET: _parse_reset,
    PING: _parse_ping,
    ACTION: _parse_action,
    STEP: _parse_step,
    PROPERTIES_LIST: _parse_properties,
    PROPERTIES_READ: _parse_properties,
    PROPERTIES_WRITE: _parse_properties,
    SNAPSHOT: lambda message_id, sent_at, msg: parse_snapshot(message_id, sent_at, msg.body),
    RESTORE: lambda message_id, sent_at, msg: parse_restore(message_id, sent_at, msg.body),
    BATCH_STEP: parse_batch_step,  # type: ignore[dict-item]  # (not a Universe request)
}


# Server events: what a client receives ---------------------------------------------------


def _header_episode(msg: Message) -> int:
    if "episode_id" not in msg.headers:
        raise ValueError(f"{msg.method} has no episode_id header")
    return parse_episode_id(msg.headers["episode_id"])


def _parent(msg: Message) -> Any:
    if "parent_message_id" not in msg.headers:
        raise ValueError(f"{msg.method} has no parent_message_id header")
    return msg.headers["parent_message_id"]


def _runtime(msg: Message) -> float:
    value = msg.headers.get("parent_runtime", 0.0)
    return float(value) if is_number(value) else 0.0


def _read_describe(msg: Message, sent_at: float) -> Describe:
    b = msg.body
    env_id, state, fps = b.get("env_id"), b.get("env_state"), b.get("fps", 60)
    if not isinstance(env_id, str) or state not in (RESETTING, RUNNING) or not is_number(fps):
        raise ValueError(f"describe body needs env_id, env_state and fps, got {b!r}")
    return Describe(_header_episode(msg), env_id, state, float(fps), b, sent_at)


def _read_reward(msg: Message, sent_at: float) -> Reward:
    b = msg.body
    reward, done, info = b.get("reward"), b.get("done", False), b.get("info", {})
    if not is_number(reward) or not isinstance(done, bool) or not isinstance(info, dict):
        raise ValueError(f"reward body needs a numeric reward, boolean done, info object: {b!r}")
    return Reward(_header_episode(msg), float(reward), done, info, sent_at)


def _read_text(msg: Message, sent_at: float) -> Text:
    text = msg.body.get("text")
    if not isinstance(text, str):
        raise ValueError(f"text body needs a string text, got {msg.body!r}")
    return Text(_header_episode(msg), text, sent_at)


def _read_observation(msg: Message, sent_at: float) -> Observation:
    if "observation" not in msg.body:
        raise ValueError("observation body has no observation")
    return Observation(_header_episode(msg), msg.body["observation"], sent_at)


def _read_reset_reply(msg: Message, sent_at: float) -> ResetReply:
    frame = msg.body.get("frame")
    if frame is not None and (isinstance(frame, bool) or not isinstance(frame, int)):
        raise ValueError(f"reset reply's frame must be an integer, got {frame!r}")
    return ResetReply(
        _parent(msg), _header_episode(msg), sent_at, _runtime(msg), frame,
        _read_shm(msg.body.get("shm"), "reset"),
    )


def _read_shm(shm: Any, what: str) -> tuple[str, int, int] | None:
    """A reply's ``shm``: ``[name, height, width]`` of the segment holding its frame."""
    if shm is None:
        return None
    if not (isinstance(shm, list) and len(shm) == 3 and isinstance(shm[0], str)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in shm[1:])):
        raise ValueError(f"{what} reply's shm must be [name, height, width], got {shm!r}")
    return (shm[0], shm[1], shm[2])


def _read_ping_reply(msg: Message, sent_at: float) -> PingReply:
    return PingReply(_parent(msg), sent_at, _runtime(msg))


def _read_step_reply(msg: Message, sent_at: float) -> StepReply:
    b = msg.body
    reward, done, info, frame = b.get("reward"), b.get("done"), b.get("info", {}), b.get("frame")
    if not is_number(reward) or not isinstance(done, bool) or not isinstance(info, dict):
        raise ValueError(f"step reply needs a numeric reward, boolean done, info object: {b!r}")
    if isinstance(frame, bool) or not isinstance(frame, int):
        raise ValueError(f"step reply needs an integer frame, got {frame!r}")
    shm = _read_shm(b.get("shm"), "step")
    return StepReply(
        _parent(msg), _header_episode(msg), float(reward), done, info, frame, sent_at,
        _runtime(msg), shm,
    )


def _read_properties_reply(msg: Message, sent_at: float) -> PropertiesReply:
    return PropertiesReply(_parent(msg), dict(msg.body), sent_at)


def _read_error(msg: Message, sent_at: float) -> ErrorReply:
    return ErrorReply(msg.headers.get("parent_message_id"), str(msg.body.get("message")), sent_at)


def _read_close(msg: Message, sent_at: float) -> Close:
    return Close(str(msg.body.get("message", "")), sent_at)


#: Server message method -> the reader of its body: shared with
#: :mod:`rewarder.connections`, whose client side looks up each received message here.
EVENT_READERS: dict[str, Callable[[Message, float], ServerEvent]] = {
    ENV_DESCRIBE: _read_describe,
    ENV_REWARD: _read_reward,
    ENV_TEXT: _read_text,
    ENV_OBSERVATION: _read_observation,
    REPLY_RESET: _read_reset_reply,
    REPLY_PING: _read_ping_reply,
    REPLY_STEP: _read_step_reply,
    REPLY_PROPERTIES: _read_properties_reply,
    REPLY_ERROR: _read_error,
    CONNECTION_CLOSE: _read_close,
    REPLY_SNAPSHOT: lambda msg, sent_at: read_snapshot_reply(_parent(msg), msg.body, sent_at),
    REPLY_BATCH_STEP: lambda msg, sent_at: cast(
        ServerEvent, read_reply(_parent(msg), msg.body, sent_at, _runtime(msg))
    ),
}
