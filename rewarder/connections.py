"""The rewarder's two connection objects, sans I/O: they number, stamp, build and parse
the messages of :mod:`rewarder.protocol`.

Holds :class:`ServerConnection` (the server's side of one client: ``receive()`` parses a
request or raises :class:`~rewarder.errors.BadRequest`, the other methods build replies
and events) and :class:`ClientConnection` (the client's side: builds requests, parses
server events). Nothing here touches a socket: feed received text to ``receive()``, send
the bytes the other methods return.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from .errors import BadRequest, MessageTooBig, ProtocolError, UnknownMethod
from .parsers import EVENT_READERS, REQUEST_PARSERS
from .protocol import (
    ACTION,
    CONNECTION_CLOSE,
    ENV_DESCRIBE,
    ENV_OBSERVATION,
    ENV_REWARD,
    ENV_TEXT,
    MAX_MESSAGE_BYTES,
    OBS_VNC,
    OBSERVER_METHODS,
    PING,
    REPLY_ERROR,
    REPLY_PING,
    REPLY_PROPERTIES,
    REPLY_RESET,
    REPLY_STEP,
    RESET,
    STEP,
    Message,
    Request,
    ServerEvent,
    dumps,
    is_number,
)
from .snapshot_messages import (
    MAX_RESTORE_MESSAGE_BYTES,
    MAX_STATE_CHARS,
    RESTORE,
    SNAPSHOT,
    restore_body,
)

#: Methods whose messages may be larger than ``max_message_bytes``: their own limits.
METHOD_MAX_BYTES: Final = {RESTORE: MAX_RESTORE_MESSAGE_BYTES}
#: What a sender of a too large message of each method should do instead.
_TOO_BIG_HINTS: Final = {
    ACTION: "send fewer events per v0.agent.action",
    STEP: "send fewer events per v0.env.step",
    RESTORE: (f"a snapshot's state is at most MAX_STATE_CHARS ({MAX_STATE_CHARS}) characters "
              "of base64; this remote cannot take one this large"),
}
#: Characters at the start of a message over ``max_message_bytes`` searched for its
#: method and id, unparsed: our clients' envelope (method, headers, body) comes first.
ENVELOPE_SCAN_CHARS: Final = 4096
#: The start of an envelope: its method, then its headers of plain values (either order;
#: anything else, nested, or after a long body, is not looked for).
_ENVELOPE: Final = re.compile(
    r'\s*\{\s*(?:"method"\s*:\s*"(?P<method>[\w.]{1,64})"\s*,\s*)?"headers"\s*:\s*'
    r'(?P<headers>\{[^{}\[\]]*\})(?:\s*,\s*"method"\s*:\s*"(?P<method2>[\w.]{1,64})")?'
)


def scan_envelope(data: str) -> tuple[str | None, Any]:
    """The method and message id at the start of ``data`` (first
    :data:`ENVELOPE_SCAN_CHARS` characters), without parsing the rest: (None, None) where
    they are not plainly there. Cheap and bounded whatever the message's size; only a
    hint (which limit to apply, which id a refusal points at): the parse decides."""
    match = _ENVELOPE.match(data, 0, ENVELOPE_SCAN_CHARS)
    if match is None:
        return None, None
    try:
        headers = orjson.loads(match["headers"])
    except orjson.JSONDecodeError:
        return match["method"] or match["method2"], None
    message_id = headers.get("message_id") if type(headers) is dict else None
    if type(message_id) not in (int, str):
        message_id = None
    return match["method"] or match["method2"], message_id


@dataclass(slots=True)
class _Numbering:
    """Per-connection message ids from 0 and ``sent_at`` stamps."""

    clock: Callable[[], float] = time.time
    next_message_id: int = 0

    def envelope(self, method: str, body: Mapping[str, Any], headers: dict[str, Any]) -> bytes:
        headers["message_id"] = self.next_message_id
        headers["sent_at"] = self.clock()
        self.next_message_id += 1
        return dumps({"method": method, "headers": headers, "body": body})


@dataclass(slots=True)
class ServerConnection:
    """The server's side of one client connection.

    Call :meth:`receive` with each text frame: it returns a :class:`Request` or raises
    :class:`BadRequest`, which you answer with :meth:`reply_error`. Every other method
    returns the bytes of one message, numbered for this connection, to send as text.
    """

    observer: bool = False
    max_message_bytes: int = MAX_MESSAGE_BYTES
    numbering: _Numbering = field(default_factory=_Numbering)

    def receive(self, data: str | bytes) -> Request:
        """Parse one client message into a request; :class:`BadRequest` says what was wrong."""
        if not isinstance(data, str):
            raise BadRequest("binary frames are not part of the protocol; send JSON as text")
        big = 0
        if len(data) > self.max_message_bytes:  # (characters: never more than its bytes)
            size = len(data.encode())
            if size > self.max_message_bytes:
                method, message_id = scan_envelope(data)
                self._check_size(size, method, message_id)
                big = size  # under that method's limit: parsed, the method it really is checked
        try:
            msg = Message.parse(data)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        message_id = msg.headers.get("message_id")
        if big:
            self._check_size(big, msg.method, message_id if isinstance(message_id, (int, str)) else None)
        if message_id is None or isinstance(message_id, bool) or not isinstance(
            message_id, (int, str)
        ):
            raise BadRequest("headers.message_id is missing: number every message from 0")
        sent_at = msg.headers.get("sent_at")
        if not is_number(sent_at):
            raise BadRequest(
                "headers.sent_at must be the UNIX time in seconds as a number", message_id
            )
        parser = REQUEST_PARSERS.get(msg.method)
        if parser is None:
            raise BadRequest(
                f"unknown method {msg.method!r}; this server takes "
                f"{', '.join(sorted(REQUEST_PARSERS))}",
                message_id,
            )
        if self.observer and msg.method not in OBSERVER_METHODS:
            raise BadRequest(
                f"observers may only ping and list or read properties, not send "
                f"{msg.method}; connect without 'openai-observer: true' to act",
                message_id,
            )
        try:
            return parser(message_id, float(sent_at), msg)
        except ValueError as exc:
            raise BadRequest(f"{msg.method}: {exc}", message_id) from None

    def _check_size(self, size: int, method: str | None, message_id: Any) -> None:
        """:class:`MessageTooBig` if ``size`` is over ``method``'s limit."""
        limit = max(self.max_message_bytes, METHOD_MAX_BYTES.get(method or "", 0))
        if size > limit:
            hint = _TOO_BIG_HINTS.get(method or "", _TOO_BIG_HINTS[ACTION])
            raise MessageTooBig(size, limit, hint, message_id, method)

    def send(self, method: str, body: Mapping[str, Any], **headers: Any) -> bytes:
        """Any server message; the ``v0.*`` helpers below are what you normally call."""
        return self.numbering.envelope(method, body, headers)

    def describe(self, episode_id: int, body: Mapping[str, Any]) -> bytes:
        return self.send(ENV_DESCRIBE, body, episode_id=str(episode_id))

    def reward(self, episode_id: int, reward: float, done: bool, info: Mapping[str, Any]) -> bytes:
        body = {"reward": reward, "done": done, "info": info}
        return self.send(ENV_REWARD, body, episode_id=str(episode_id))

    def text(self, episode_id: int, text: str) -> bytes:
        return self.send(ENV_TEXT, {"text": text}, episode_id=str(episode_id))

    def observation(self, episode_id: int, observation: Any) -> bytes:
        return self.send(ENV_OBSERVATION, {"observation": observation}, episode_id=str(episode_id))

    def reply_reset(
        self, parent: Any, episode_id: int, runtime: float, body: Mapping[str, Any] | None = None
    ) -> bytes:
        """``body``: the first frame's number and, for ``obs="shm"``, where it is."""
        return self.send(
            REPLY_RESET, body or {}, parent_message_id=parent, parent_runtime=runtime,
            episode_id=str(episode_id),
        )

    def reply_step(
        self, parent: Any, episode_id: int, body: Mapping[str, Any], runtime: float
    ) -> bytes:
        return self.send(
            REPLY_STEP, body, parent_message_id=parent, parent_runtime=runtime,
            episode_id=str(episode_id),
        )

    def reply_ping(self, parent: Any, runtime: float) -> bytes:
        return self.send(REPLY_PING, {}, parent_message_id=parent, parent_runtime=runtime)

    def reply_properties(self, parent: Any, body: Mapping[str, Any], runtime: float) -> bytes:
        return self.send(REPLY_PROPERTIES, body, parent_message_id=parent, parent_runtime=runtime)

    def reply_error(self, parent: Any, message: str, runtime: float = 0.0) -> bytes:
        return self.send(
            REPLY_ERROR, {"message": message}, parent_message_id=parent, parent_runtime=runtime
        )

    def close(self, message: str) -> bytes:
        return self.send(CONNECTION_CLOSE, {"message": message})


@dataclass(slots=True)
class ClientConnection:
    """The client's side of a rewarder connection.

    The request methods return ``(message_id, bytes)``: keep the id to match the reply.
    Call :meth:`receive` with each text frame from the server; it returns a
    :class:`ServerEvent` or raises :class:`ProtocolError`.
    """

    numbering: _Numbering = field(default_factory=_Numbering)
    #: The mode the server's last describe named (None: it names none, as Universe's).
    described_mode: str | None = None

    def _request(self, method: str, body: Mapping[str, Any], **headers: Any) -> tuple[int, bytes]:
        numbering = self.numbering
        message_id = numbering.next_message_id
        headers["message_id"] = message_id
        headers["sent_at"] = numbering.clock()
        numbering.next_message_id += 1
        return message_id, _encode_request({"method": method, "headers": headers, "body": body})

    def reset(
        self,
        episode_id: int,
        env_id: str | None = None,
        seed: int | None = None,
        fps: float | None = None,
        mode: str | None = None,
        obs: str = OBS_VNC,
    ) -> tuple[int, bytes]:
        """``mode`` None keeps the server's: the mode its last describe named, said out
        loud, since a reset without one asks our servers for real time (Universe's world);
        servers that describe no mode (Universe's) get none. ``obs="shm"``: the first
        frame into shared memory, as a step's."""
        body: dict[str, Any] = {"env_id": env_id, "seed": seed, "fps": fps}
        mode = mode or self.described_mode
        if mode is not None:  # only when known: Universe servers know no mode
            body["mode"] = mode
        if obs != OBS_VNC:  # only when asked: servers before the extension know no obs
            body["obs"] = obs
        return self._request(RESET, body, episode_id=str(episode_id))

    def step(
        self, episode_id: int, action: str | Sequence[Sequence[Any]], frames: int = 1,
        obs: str = OBS_VNC, settle: bool = False,
    ) -> tuple[int, bytes]:
        """``action``: input events, or an action string (a browser remote's, docs/rewarder.md);
        ``settle``: the remote answers once its screen is still (our extension)."""
        body: dict[str, Any] = {"action": _action_body(action), "frames": frames}
        if obs != OBS_VNC:  # only when asked: servers before the extension know no obs
            body["obs"] = obs
        if settle:
            body["settle"] = True
        return self._request(STEP, body, episode_id=str(episode_id))

    def ping(self) -> tuple[int, bytes]:
        return self._request(PING, {})

    def action(self, action: str | Sequence[Sequence[Any]], settle: bool = False) -> tuple[int, bytes]:
        """``v0.agent.action`` with input events or an action string (and ``settle``)."""
        body: dict[str, Any] = {"action": _action_body(action)}
        if settle:
            body["settle"] = True
        return self._request(ACTION, body)

    def properties(self, op: str, key: str = "", value: Any = None) -> tuple[int, bytes]:
        """``op``: list, read or write."""
        body: dict[str, Any] = {"key": key} if op != "write" else {"key": key, "value": value}
        return self._request(f"v0.env.properties.{op}", body)

    def snapshot(self, export: bool = False) -> tuple[int, bytes]:
        """``v0.env.snapshot`` (rewarder/snapshot_messages.py); ``export``: with its bytes."""
        return self._request(SNAPSHOT, {"export": export} if export else {})

    def restore(self, token: str | None, state: bytes | None, obs: str = OBS_VNC) -> tuple[int, bytes]:
        """``v0.env.restore`` of a token or of exported bytes (answered as a reset is)."""
        return self._request(RESTORE, restore_body(token, state, obs))

    def receive(self, data: str | bytes) -> ServerEvent:
        """Parse one server message into an event."""
        if not isinstance(data, str):
            raise ProtocolError("the server sent a binary frame; the rewarder speaks JSON text")
        try:
            msg = Message.parse(data)
        except ValueError as exc:
            raise ProtocolError(f"unreadable server message: {exc}") from None
        sent_at = msg.headers.get("sent_at")
        if not is_number(sent_at):
            raise ProtocolError(f"{msg.method} has no numeric sent_at header")
        reader = EVENT_READERS.get(msg.method)
        if reader is None:
            raise UnknownMethod(msg.method)
        try:
            event = reader(msg, float(sent_at))
        except ValueError as exc:
            raise ProtocolError(str(exc)) from None
        if msg.method == ENV_DESCRIBE:
            mode = msg.body.get("mode")
            self.described_mode = mode if isinstance(mode, str) else None
        return event


#: How a client encodes its requests: numpy scalars and arrays (an agent's ``np.int64``
#: coordinate, ``np.bool_`` key state) go out as JSON numbers, booleans and lists.
_REQUEST_OPTIONS: Final = orjson.OPT_SERIALIZE_NUMPY


def _encode_request(message: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(message, option=_REQUEST_OPTIONS)
    except TypeError as exc:
        raise TypeError(
            f"{message['method']}: the request holds a value JSON cannot carry ({exc}); "
            "send numbers, strings, booleans and lists of them"
        ) from None


def _action_body(action: str | Sequence[Sequence[Any]]) -> str | list[list[Any]]:
    """An action string as it is; events as lists (tuples and numpy rows alike)."""
    return action if isinstance(action, str) else [list(e) for e in action]
