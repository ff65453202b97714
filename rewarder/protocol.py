"""The rewarder protocol, sans I/O: envelopes, requests, server events, both ends.

Holds :class:`Message` (the ``{"method", "headers", "body"}`` envelope), the requests a
server receives (:class:`ResetRequest`, :class:`PingRequest`, :class:`ActionRequest`,
:class:`StepRequest`, :class:`PropertiesRequest`), the events a client receives
(:class:`Describe`, :class:`Reward`, :class:`Text`, :class:`Observation`,
:class:`ResetReply`, :class:`PingReply`, :class:`StepReply`, :class:`ErrorReply`,
:class:`Close`, :class:`PropertiesReply`), their parsers, and the names and limits of the
protocol. The two connection objects that number, stamp, build and parse them are in
:mod:`rewarder.connections`.

Nothing here touches a socket: feed received text to ``receive()``, send the bytes
the other methods return. The wire format is Universe's v0 rewarder protocol; our
additions are extra body keys, which Universe clients ignore.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

import orjson

from rewarder.snapshot_messages import (
    REPLY_SNAPSHOT,
    RESTORE,
    SNAPSHOT,
    RestoreRequest,
    SnapshotReply,
    SnapshotRequest,
    parse_restore,
    parse_snapshot,
    read_snapshot_reply,
)

# Limits ------------------------------------------------------------------------------

#: A client message larger than this is answered with an error, not parsed: an action
#: of a few thousand events fits; anything bigger is a bug or an attack.
MAX_MESSAGE_BYTES: Final = 256 * 1024
#: Events in one ``v0.agent.action``: more than a human could type in a frame by far.
MAX_ACTION_EVENTS: Final = 1024
#: Characters of an action string (``"click('a42')"``: browser remotes' element actions).
MAX_ACTION_STRING_CHARS: Final = 8192
#: Games one remote process may serve (``serve --games K``); defined here because both
#: sides check it (envserver's serve, remotes' start_local) and neither imports the other.
MAX_GAMES_PER_PROCESS: Final = 64
#: Characters of a key name in an action; X keysym names are under 32.
MAX_KEY_NAME_CHARS: Final = 64
#: Frames one ``v0.env.step`` may ask for: ~3 minutes of play at 60 fps in one request.
MAX_STEP_FRAMES: Final = 10_000
#: Real-time frame rates a reset may ask for. Below MIN_FPS a remote would sleep so long
#: between ticks that it looks dead (and a tick of 1e-9 fps never comes); above MAX_FPS
#: no loop of ours keeps time.
MIN_FPS: Final = 1.0
MAX_FPS: Final = 1000.0
#: Largest seed: 32 bits, what every runtime's generator takes (ALE, JavaScript, numpy).
MAX_SEED: Final = 2**32 - 1

#: Seconds between the describes a remote sends when nothing else changes: Universe's
#: servers sent one at least this often, so a client tells a live but idle remote from a
#: stalled one (both ends read it here).
HEARTBEAT_INTERVAL: Final = 5.0

# Header and info keys ------------------------------------------------------------------

#: The handshake header of a watch-only client (Universe's name).
OBSERVER_HEADER: Final = "openai-observer"
#: The handshake header naming an agent process (Universe's ``client_id``, as a header):
#: a new active client with the same id replaces the connection holding the active slot
#: at once (a restarted agent, or a second env of the same process, as ``check_env``
#: builds), instead of being refused as busy.
CLIENT_ID_HEADER: Final = "openai-client-id"
#: Longest client id accepted; longer ids are ignored (treated as none).
MAX_CLIENT_ID_CHARS: Final = 128
#: Key in a reward's ``info``: the number of the frame that earned it (the same numbers
#: as the VNC frame tags), so an agent can pair the reward with the exact frame.
FRAME_INFO_KEY: Final = "remote.frame"
#: The handshake header of an agent asking for a player of a multi-player remote (our
#: extension, ``docs/multiagent.md``): ``openai-player: 1``. Without it an agent gets
#: player 0, so Universe's clients play player 0 unchanged.
PLAYER_HEADER: Final = "openai-player"
#: Keys in a multi-player remote's reward ``info``: whose reward ``reward`` is, and every
#: player's (observers read all of them there).
PLAYER_INFO_KEY: Final = "remote.player"
REWARDS_INFO_KEY: Final = "remote.rewards"

# Methods -----------------------------------------------------------------------------

ENV_DESCRIBE: Final = "v0.env.describe"
ENV_REWARD: Final = "v0.env.reward"
ENV_TEXT: Final = "v0.env.text"
ENV_OBSERVATION: Final = "v0.env.observation"
REPLY_RESET: Final = "v0.reply.env.reset"
REPLY_PING: Final = "v0.reply.control.ping"
REPLY_ERROR: Final = "v0.reply.error"
REPLY_STEP: Final = "v0.reply.env.step"
CONNECTION_CLOSE: Final = "v0.connection.close"

RESET: Final = "v0.env.reset"
PING: Final = "v0.control.ping"
ACTION: Final = "v0.agent.action"
#: Our extension: advance a lockstep remote by exactly ``frames`` frames.
STEP: Final = "v0.env.step"
#: Our extension: the remote's properties (DM Lab / dm_env_rpc style), see docs/rewarder.md.
PROPERTIES_LIST: Final = "v0.env.properties.list"
PROPERTIES_READ: Final = "v0.env.properties.read"
PROPERTIES_WRITE: Final = "v0.env.properties.write"
REPLY_PROPERTIES: Final = "v0.reply.env.properties"
#: Longest property key accepted.
MAX_PROPERTY_KEY_CHARS: Final = 128

# WebSocket close codes, so a client can tell a refusal it may retry from a final one.
#: Wrong or missing password: retrying will not help.
CLOSE_UNAUTHORIZED: Final = 4003
#: The active slot is taken: retry later (an agent that just died or hung frees it within
#: seconds), or connect as an observer.
CLOSE_BUSY: Final = 4009
#: This client fell too far behind reading and was dropped.
CLOSE_TOO_SLOW: Final = 1008
#: A newer connection with the same client id took the active slot: final, no redial.
CLOSE_REPLACED: Final = 4010
#: Too many wrong passwords from this address: it is refused for a while.
CLOSE_THROTTLED: Final = 4029
#: The ``openai-player`` header names no player this remote has: final.
CLOSE_BAD_PLAYER: Final = 4022

RESETTING: Final = "resetting"
RUNNING: Final = "running"

#: The remote runs its runtime at ``fps`` whether or not anyone acts (Universe's mode).
REALTIME: Final = "realtime"
#: The remote advances only when the active client sends ``v0.env.step``.
LOCKSTEP: Final = "lockstep"
MODES: Final = (REALTIME, LOCKSTEP)
#: How a lockstep step's frame reaches the agent (``"obs"`` of ``v0.env.step``, our
#: extension): the VNC update tagged with the frame, or shared memory (rewarder/shm.py).
OBS_VNC: Final = "vnc"
OBS_SHM: Final = "shm"
OBS_TRANSPORTS: Final = (OBS_VNC, OBS_SHM)

#: Compact UTF-8 JSON bytes of a value: shared so that every rewarder envelope, built here
#: or by :mod:`rewarder.connections`, is serialized one way.
dumps = orjson.dumps
_loads = orjson.loads


# The envelope --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    """One protocol message: ``method``, ``headers`` and ``body``, as on the wire."""

    method: str
    headers: dict[str, Any]
    body: dict[str, Any]

    def serialize(self) -> bytes:
        """The UTF-8 JSON text of this message (send it as a WebSocket *text* frame)."""
        return dumps({"method": self.method, "headers": self.headers, "body": self.body})

    @classmethod
    def parse(cls, data: str | bytes) -> Message:
        """Read an envelope; raises :class:`ValueError` saying what is wrong with it."""
        try:
            obj = _loads(data)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"message is not JSON ({exc.msg}); send a JSON object") from None
        if not isinstance(obj, dict):
            raise ValueError(
                f"message is a JSON {type(obj).__name__}, not an object with "
                '"method", "headers" and "body"'
            )
        method, headers, body = obj.get("method"), obj.get("headers"), obj.get("body", {})
        if not isinstance(method, str):
            raise ValueError('"method" must be a string such as "v0.control.ping"')
        if not isinstance(headers, dict):
            raise ValueError('"headers" must be an object with "message_id" and "sent_at"')
        if not isinstance(body, dict):
            raise ValueError('"body" must be an object')
        return cls(method, headers, body)


def parse_episode_id(value: object) -> int:
    """Episode ids travel as decimal strings ("7"); integers are accepted too."""
    if isinstance(value, bool):
        raise ValueError(f"episode_id must be a string holding an integer, not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise ValueError(f"episode_id must be a string holding an integer, not {value!r}")


def is_number(value: object) -> TypeGuard[int | float]:
    """An int or float but not a bool: shared so that both connection sides and the body
    readers here check numeric fields (``sent_at``, ``fps``, ``reward``) alike."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Requests: what a server receives ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """``v0.env.reset``: start a new episode past ``episode_id``, maybe of another env."""

    message_id: Any
    sent_at: float
    episode_id: int | None
    env_id: str | None = None
    seed: int | None = None
    fps: float | None = None
    mode: str | None = None
    #: How the new episode's first frame reaches the agent (our extension, as a step's
    #: ``obs``): ``"shm"`` puts it in the shared-memory segment the reply names.
    obs: str = "vnc"


@dataclass(frozen=True, slots=True)
class PingRequest:
    """``v0.control.ping``: answer at once; the client measures round trip and skew."""

    message_id: Any
    sent_at: float


#: ``("KeyEvent", key, down)`` with an X keysym name or number, or
#: ``("PointerEvent", x, y, buttonmask)``.
ActionEvent = tuple[str, Any, Any] | tuple[str, int, int, int]


@dataclass(frozen=True, slots=True)
class ActionRequest:
    """``v0.agent.action``: input events to apply at the next tick, as if sent over VNC;
    or (our extension) an action string such as ``"click('a42')"`` for a browser remote
    (``web``), and ``settle``: tell me once the screen is still again (docs/browser.md)."""

    message_id: Any
    sent_at: float
    events: tuple[ActionEvent, ...]
    web: str | None = None
    settle: bool = False


@dataclass(frozen=True, slots=True)
class StepRequest:
    """``v0.env.step`` (lockstep): hold ``events``' input, advance exactly ``frames`` frames."""

    message_id: Any
    sent_at: float
    episode_id: int | None
    events: tuple[ActionEvent, ...]
    frames: int
    #: How the agent takes the frame (our extension): "vnc" (the tagged VNC update, the
    #: default) or "shm" (a shared-memory segment the reply names; same machine only).
    obs: str = "vnc"
    #: An action string run before the frames (a browser remote's element action).
    web: str | None = None


@dataclass(frozen=True, slots=True)
class PropertiesRequest:
    """``v0.env.properties.{list,read,write}``: ``op`` is the last word of the method."""

    message_id: Any
    sent_at: float
    op: str
    key: str
    value: Any = None


Request = (
    ResetRequest | PingRequest | ActionRequest | StepRequest | PropertiesRequest
    | SnapshotRequest | RestoreRequest  # rewarder/snapshot_messages.py
)


def _parse_event(index: int, event: object) -> ActionEvent:
    # The shape nearly every step carries, as JSON gives it, accepted in a few tests; all
    # else (and every refusal, with its message) is :func:`_parse_any_event`'s.
    if type(event) is list and len(event) == 3 and event[0] == "KeyEvent":
        key, down = event[1], event[2]
        if down is True or down is False:
            if type(key) is str and 0 < len(key) <= MAX_KEY_NAME_CHARS:
                return ("KeyEvent", key, down)
            if type(key) is int:
                return ("KeyEvent", key, down)
    return _parse_any_event(index, event)


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
    episode_id = None if raw_episode is None else parse_episode_id(raw_episode)
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
    return tuple([_parse_event(i, e) for i, e in enumerate(action)])


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
}
#: What an observer (``openai-observer: true``) may send.
OBSERVER_METHODS: Final = frozenset({PING, PROPERTIES_LIST, PROPERTIES_READ})


# Server events: what a client receives ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Describe:
    """``v0.env.describe``: which env runs, in which state; ``body`` has the extensions."""

    episode_id: int
    env_id: str
    env_state: str
    fps: float
    body: dict[str, Any]
    sent_at: float


@dataclass(frozen=True, slots=True)
class Reward:
    """``v0.env.reward``: what one tick of the episode earned."""

    episode_id: int
    reward: float
    done: bool
    info: dict[str, Any]
    sent_at: float


@dataclass(frozen=True, slots=True)
class Text:
    """``v0.env.text``: words from the environment (an instruction, a status line)."""

    episode_id: int
    text: str
    sent_at: float


@dataclass(frozen=True, slots=True)
class Observation:
    """``v0.env.observation``: a JSON observation beside the pixels."""

    episode_id: int
    observation: Any
    sent_at: float


@dataclass(frozen=True, slots=True)
class ResetReply:
    """``v0.reply.env.reset``: the reset is done; ``episode_id`` is the new episode."""

    parent_message_id: Any
    episode_id: int
    sent_at: float
    runtime: float
    #: The new episode's first frame number and, when the reset asked for ``obs="shm"``,
    #: ``(name, height, width)`` of the segment holding it (None from servers that
    #: send neither: Universe's, ours before the extension).
    frame: int | None = None
    shm: tuple[str, int, int] | None = None


@dataclass(frozen=True, slots=True)
class PingReply:
    """``v0.reply.control.ping``."""

    parent_message_id: Any
    sent_at: float
    runtime: float


@dataclass(frozen=True, slots=True)
class StepReply:
    """``v0.reply.env.step``: what the requested frames earned; ``frame`` is the last one's number."""

    parent_message_id: Any
    episode_id: int
    reward: float
    done: bool
    info: dict[str, Any]
    frame: int
    sent_at: float
    runtime: float
    #: ``(name, height, width)`` of the shared-memory segment holding the frame, when the
    #: step asked for ``obs="shm"``.
    shm: tuple[str, int, int] | None = None


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """``v0.reply.error``: the request ``parent_message_id`` failed (None: unreadable)."""

    parent_message_id: Any
    message: str
    sent_at: float


@dataclass(frozen=True, slots=True)
class Close:
    """``v0.connection.close``: the server is about to close the connection, and why."""

    message: str
    sent_at: float


@dataclass(frozen=True, slots=True)
class PropertiesReply:
    """``v0.reply.env.properties``: ``{"properties": [...]}`` for a list, else the key and
    its (new) value."""

    parent_message_id: Any
    body: dict[str, Any]
    sent_at: float


ServerEvent = (
    Describe | Reward | Text | Observation | ResetReply | PingReply | StepReply | ErrorReply | Close
    | PropertiesReply | SnapshotReply
)


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
}
