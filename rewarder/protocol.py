"""The rewarder protocol, sans I/O: envelopes, requests, server events, both ends.

Holds :class:`Message` (the ``{"method", "headers", "body"}`` envelope), the requests a
server receives (:class:`ResetRequest`, :class:`PingRequest`, :class:`ActionRequest`,
:class:`StepRequest`, :class:`PropertiesRequest`), the events a client receives
(:class:`Describe`, :class:`Reward`, :class:`Text`, :class:`Observation`,
:class:`ResetReply`, :class:`PingReply`, :class:`StepReply`, :class:`ErrorReply`,
:class:`Close`, :class:`PropertiesReply`), and the names and limits of the protocol. What
each method's body means (its parser or reader) is in :mod:`rewarder.parsers`; the two
connection objects that number, stamp, build and parse them are in
:mod:`rewarder.connections`.

Nothing here touches a socket: feed received text to ``receive()``, send the bytes
the other methods return. The wire format is Universe's v0 rewarder protocol; our
additions are extra body keys, which Universe clients ignore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypeGuard

import orjson

from rewarder.snapshot_messages import (
    RestoreRequest,
    SnapshotReply,
    SnapshotRequest,
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
#: The header a warm pool's take-back sends (``true``) beside a lease's client id to a
#: remote's MCP and OpenEnv ports: that id's sessions end and the id is retired there
#: (``envserver.http_port``), so a client that reconnects by itself cannot come back.
TAKE_BACK_HEADER: Final = "universe-remote-take-back"
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


#: The largest episode id a message may carry: the 64-bit fields that carry ids (a frame
#: segment's header, a VNC frame tag) hold it.
MAX_EPISODE_ID: Final = 2**63 - 1
#: The largest a reset may name (the remote counts on from it, one a reset): the largest
#: integer a JSON number keeps exactly in every language, far inside 64 bits.
MAX_RESET_EPISODE_ID: Final = 2**53 - 1
#: Characters of an episode id string read at most (its digits, a sign, spaces).
MAX_EPISODE_ID_CHARS: Final = 32


def parse_episode_id(value: object, limit: int = MAX_EPISODE_ID) -> int:
    """Episode ids travel as decimal strings ("7"); integers are accepted too, in
    0..``limit`` (:data:`MAX_EPISODE_ID`; a reset's :data:`MAX_RESET_EPISODE_ID`)."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and len(value) <= MAX_EPISODE_ID_CHARS:
        try:
            number = int(value)
        except ValueError:
            pass
    if number is None:
        raise ValueError(f"episode_id must be a string holding an integer, not {value!r:.100}")
    if not 0 <= number <= limit:
        raise ValueError(f"episode_id must be in 0..{limit}, not {value!r:.100}")
    return number


#: The JSON number types orjson gives (a bool is not one): ``type(x) in JSON_NUMBERS`` is
#: :func:`is_number` for parsed JSON, in one comparison (a step's readers, every step).
JSON_NUMBERS: Final = (int, float)


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


@dataclass(slots=True)
class StepReply:
    """``v0.reply.env.step``: what the requested frames earned; ``frame`` is the last one's number.

    Not frozen, unlike the other messages: an agent builds one per env per step (a batch
    step's reply holds one per game), and a frozen dataclass's ``__init__`` costs 1.6 us
    against 0.2 (hand-measured, issue 40). Nobody writes one after it is read."""

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
