"""OpenEnv's wire format, sans I/O: the messages a session sends and gets, checked, and the
answers' shapes.

WebSocket ``/ws``: ``{"type": "reset"|"step"|"state"|"close", "data": {...}}`` in,
``{"type": "observation"|"state"|"error", "data": {...}}`` out, one answer per message in
order. An observation's data is ``{"observation": {...}, "reward": r, "done": d,
"metadata": {...}}`` (OpenEnv's ``serialize_observation``); an error's is ``{"message":
..., "code": ...}`` with OpenEnv's codes (:class:`Code`) and three of ours (passwords, size).
HTTP answers errors as ``{"detail": message, "code": code}`` (FastAPI's shape) with the
status :data:`HTTP_STATUS` gives.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from rewarder import protocol as rewarder_protocol

from .frames import FORMATS

#: Bytes of one message from a client: an action with MAX_STEP_EVENTS events fits.
MAX_MESSAGE_BYTES: Final = 256 * 1024
#: Bytes of a WebSocket message the port still reads in order to answer it (``TOO_LARGE``,
#: the session goes on); past it the message is not read and the connection is closed
#: with 1009 (a reader cannot skip a message it does not buffer). Bounds a session's memory.
MAX_READ_BYTES: Final = 16 * MAX_MESSAGE_BYTES
#: Characters of OpenEnv's ``episode_id`` label a reset may give (OpenEnv's limit).
MAX_LABEL_CHARS: Final = 255
#: orjson's options for every answer: numpy arrays (the ``list`` screen) as lists.
DUMP_OPTIONS: Final = orjson.OPT_SERIALIZE_NUMPY


class Code(enum.StrEnum):
    """``data.code`` of an error: OpenEnv's ``WSErrorCode`` values, and ours for passwords
and sizes."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    SESSION_ERROR = "SESSION_ERROR"
    UNAUTHORIZED = "UNAUTHORIZED"
    TOO_MANY_ATTEMPTS = "TOO_MANY_ATTEMPTS"
    TOO_LARGE = "TOO_LARGE"
    TOO_SLOW = "TOO_SLOW"


#: The HTTP status of each code (the WebSocket sends the code itself).
HTTP_STATUS: Final[Mapping[Code, int]] = {
    Code.INVALID_JSON: 400, Code.UNKNOWN_TYPE: 404, Code.VALIDATION_ERROR: 422,
    Code.EXECUTION_ERROR: 409, Code.CAPACITY_REACHED: 409, Code.SESSION_ERROR: 500,
    Code.UNAUTHORIZED: 401, Code.TOO_MANY_ATTEMPTS: 429, Code.TOO_LARGE: 413,
    Code.TOO_SLOW: 408,
}

#: Message types a client sends.
RESET: Final = "reset"
STEP: Final = "step"
STATE: Final = "state"
CLOSE: Final = "close"
#: OpenEnv's MCP messages (RFC 003): a JSON-RPC request as data (envserver.computer_use.jsonrpc).
MCP: Final = "mcp"
TYPES: Final = (RESET, STEP, STATE, CLOSE, MCP)

#: What a reset's data may hold: OpenEnv's ``seed`` and ``episode_id``, and ours.
RESET_FIELDS: Final[Mapping[str, str]] = {
    "seed": f"integer in 0..{rewarder_protocol.MAX_SEED}: the episode's seed",
    "episode_id": "string: a label for the episode, reported by state (OpenEnv's)",
    "env_id": "string: switch the remote to this env (universe-remote list)",
    "mode": "realtime or lockstep (default: the remote's)",
    "frameskip": f"integer in 1..{rewarder_protocol.MAX_STEP_FRAMES}: frames a step advances "
                 "(lockstep) or waits for at least (real time); default 1",
    "screen": f"one of {list(FORMATS)}: how observations carry the screen (default png)",
    "observe": "true: watch without driving (no reset; steps wait for the next frame)",
}


class Refusal(Exception):
    """A message or request that is answered with an error (the session goes on)."""

    def __init__(self, code: Code, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.extra = code, message, extra

    def data(self) -> dict[str, Any]:
        return {"message": self.message, "code": self.code.value, **self.extra}


@dataclass(frozen=True, slots=True)
class Message:
    type: str
    data: dict[str, Any]


def parse_message(raw: str | bytes) -> Message:
    """One WebSocket text message as a :class:`Message`; :class:`Refusal` says what is wrong."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise too_large(len(raw))
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Refusal(Code.INVALID_JSON, f"Invalid JSON: {exc}") from None
    if not isinstance(message, dict):
        raise Refusal(Code.VALIDATION_ERROR, 'a message is an object: {"type": ..., "data": {...}}')
    kind = message.get("type")
    if kind not in TYPES:
        raise Refusal(Code.UNKNOWN_TYPE, f"Unknown message type: {str(kind)[:40]} (this port "
                      f"takes {', '.join(TYPES)}; docs/openenv.md)")
    extra = set(message) - {"type", "data"}
    if extra:
        raise Refusal(Code.VALIDATION_ERROR, f"a {kind} message has only type and data, not "
                      f"{sorted(extra)}")
    data = message.get("data", {})
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise Refusal(Code.VALIDATION_ERROR, f"a {kind} message's data is an object, not {data!r:.60}")
    return Message(kind, data)


def too_large(size: int | None) -> Refusal:
    """A message or body over :data:`MAX_MESSAGE_BYTES` (``size``: its bytes, if known)."""
    given = f"{size} bytes" if size is not None else "more"
    return Refusal(Code.TOO_LARGE, (
        f"a message of {given}; at most {MAX_MESSAGE_BYTES} bytes (MAX_MESSAGE_BYTES): send "
        "fewer events a step"), max_bytes=MAX_MESSAGE_BYTES)


#: A reset's fields that only a driver's reset uses: a watcher's reset resets nothing.
DRIVER_FIELDS: Final = ("seed", "episode_id", "env_id", "mode")


@dataclass(frozen=True, slots=True)
class ResetParams:
    """A reset's data, checked."""

    seed: int | None = None
    label: str | None = None
    env_id: str | None = None
    mode: str | None = None
    frameskip: int | None = None
    screen: str | None = None
    observe: bool = False


def parse_reset(data: Mapping[str, Any]) -> ResetParams:
    """A reset's data; :class:`Refusal` naming the field that is wrong (and what it takes)."""
    unknown = sorted(set(data) - set(RESET_FIELDS))
    if unknown:
        fields = "; ".join(f"{k}: {v}" for k, v in RESET_FIELDS.items())
        raise Refusal(Code.VALIDATION_ERROR, f"reset takes no {unknown[0]!r}; it takes {fields}")
    seed, label, frameskip = data.get("seed"), data.get("episode_id"), data.get("frameskip")
    env_id, mode, screen, observe = (data.get(k) for k in ("env_id", "mode", "screen", "observe"))
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                             or not 0 <= seed <= rewarder_protocol.MAX_SEED):
        raise Refusal(Code.VALIDATION_ERROR, f"seed: {RESET_FIELDS['seed']}, not {seed!r}")
    if label is not None and (not isinstance(label, str) or len(label) > MAX_LABEL_CHARS):
        raise Refusal(Code.VALIDATION_ERROR, f"episode_id: a string of at most {MAX_LABEL_CHARS} "
                      f"characters, not {str(label)[:60]!r}")
    if env_id is not None and not isinstance(env_id, str):
        raise Refusal(Code.VALIDATION_ERROR, f"env_id: {RESET_FIELDS['env_id']}, not {env_id!r}")
    if mode is not None and mode not in rewarder_protocol.MODES:
        raise Refusal(Code.VALIDATION_ERROR, f"mode: {RESET_FIELDS['mode']}, not {mode!r}")
    if frameskip is not None and (isinstance(frameskip, bool) or not isinstance(frameskip, int)
                                  or not 1 <= frameskip <= rewarder_protocol.MAX_STEP_FRAMES):
        raise Refusal(Code.VALIDATION_ERROR, f"frameskip: {RESET_FIELDS['frameskip']}, not {frameskip!r}")
    if screen is not None and screen not in FORMATS:
        raise Refusal(Code.VALIDATION_ERROR, f"screen: {RESET_FIELDS['screen']}, not {screen!r}")
    if observe is not None and not isinstance(observe, bool):
        raise Refusal(Code.VALIDATION_ERROR, f"observe: true or false, not {observe!r}")
    driving = [k for k in DRIVER_FIELDS if data.get(k) is not None]
    if observe and driving:
        raise Refusal(Code.VALIDATION_ERROR, (
            f"observe=true watches without resetting, so it takes no {', '.join(driving)}: "
            "leave them out to watch (frameskip and screen apply), or reset without observe "
            "to drive"))
    return ResetParams(seed, label, env_id, mode, frameskip, screen, bool(observe))


def observation(data: Mapping[str, Any]) -> bytes:
    return orjson.dumps({"type": "observation", "data": data}, option=DUMP_OPTIONS, default=str)


def state(data: Mapping[str, Any]) -> bytes:
    return orjson.dumps({"type": "state", "data": data}, option=DUMP_OPTIONS, default=str)


def error(refusal: Refusal) -> bytes:
    return orjson.dumps({"type": "error", "data": refusal.data()}, default=str)


def http_error(refusal: Refusal) -> tuple[int, bytes]:
    """An HTTP endpoint's refusal: its status and body."""
    body = {"detail": refusal.message, "code": refusal.code.value, **refusal.extra}
    return HTTP_STATUS[refusal.code], orjson.dumps(body, default=str)
