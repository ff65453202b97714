"""The rewarder's snapshot messages (our extension, docs/snapshots.md).

Holds the methods ``v0.env.snapshot`` (save the remote's state: a token, and its bytes
when asked) and ``v0.env.restore`` (go back to a token's or bytes' state: a new branch of
the episode, answered with ``v0.reply.env.reset`` as a reset is), their requests, the
snapshot's reply, and :data:`SNAPSHOT_KEY_ENV`, where remotes read the key that seals
exported bytes. A Universe client never sends these and never hears them.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from dataclasses import dataclass
from typing import Any, Final

SNAPSHOT: Final = "v0.env.snapshot"
RESTORE: Final = "v0.env.restore"
REPLY_SNAPSHOT: Final = "v0.reply.env.snapshot"
#: Longest token a client may send (the remote's are 22 characters).
MAX_TOKEN_CHARS: Final = 64
#: Longest base64 text of exported bytes a restore may carry (an Atari state is ~20 kB;
#: a browser's may be larger).
MAX_STATE_CHARS: Final = 8 << 20
#: Bytes of a ``v0.env.restore`` message: restore's own limit (every other method has
#: ``protocol.MAX_MESSAGE_BYTES``), its state at its longest and room for the envelope.
MAX_RESTORE_MESSAGE_BYTES: Final = MAX_STATE_CHARS + 64 * 1024
#: Where a remote reads the key that seals the bytes it exports (any text); remotes
#: started by ``remotes.start_local`` share one, made by the agent's process.
SNAPSHOT_KEY_ENV: Final = "UNIVERSE_REMOTE_SNAPSHOT_KEY"


def shared_key() -> str:
    """This process's snapshot key: the environment's, else one made now and put there,
    so every remote this process starts seals and opens each other's bytes."""
    key = os.environ.get(SNAPSHOT_KEY_ENV)
    if not key:
        key = os.environ[SNAPSHOT_KEY_ENV] = secrets.token_hex(32)
    return key


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """``v0.env.snapshot``: save the state now; ``export``: send its bytes too."""

    message_id: Any
    sent_at: float
    export: bool = False


@dataclass(frozen=True, slots=True)
class RestoreRequest:
    """``v0.env.restore``: go back to ``token``'s state, or to ``state`` (exported bytes)."""

    message_id: Any
    sent_at: float
    token: str | None
    state: bytes | None
    #: Lockstep: the first frame into shared memory, as a reset's.
    obs: str = "vnc"


@dataclass(frozen=True, slots=True)
class SnapshotReply:
    """``v0.reply.env.snapshot``: the token, the frame and episode it was taken at, and
    the bytes (when asked)."""

    parent_message_id: Any
    token: str
    episode_id: int
    frame: int
    state: bytes | None
    sent_at: float


def parse_snapshot(message_id: Any, sent_at: float, body: dict[str, Any]) -> SnapshotRequest:
    export = body.get("export", False)
    if not isinstance(export, bool):
        raise ValueError(f'"export" must be true or false, not {export!r}')
    return SnapshotRequest(message_id, sent_at, export)


def parse_restore(message_id: Any, sent_at: float, body: dict[str, Any]) -> RestoreRequest:
    token, state, obs = body.get("token"), body.get("state"), body.get("obs", "vnc")
    if (token is None) == (state is None):
        raise ValueError(
            'v0.env.restore needs exactly one of "token" (from v0.reply.env.snapshot) or '
            '"state" (its exported bytes, base64)'
        )
    if token is not None and (not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS):
        raise ValueError(f'"token" must be a string of at most {MAX_TOKEN_CHARS} characters')
    raw = None
    if state is not None:
        if not isinstance(state, str) or len(state) > MAX_STATE_CHARS:
            raise ValueError(f'"state" must be base64 text of at most {MAX_STATE_CHARS} characters')
        try:
            raw = base64.b64decode(state, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError('"state" is not base64 text (send the bytes v0.env.snapshot exported)') from None
    if obs not in ("vnc", "shm"):
        raise ValueError(f'"obs" must be "vnc" or "shm", not {obs!r}')
    return RestoreRequest(message_id, sent_at, token, raw, obs)


def snapshot_body(token: str, episode_id: int, frame: int, state: bytes | None) -> dict[str, Any]:
    """The reply's body (the server's side)."""
    body: dict[str, Any] = {"token": token, "episode_id": str(episode_id), "frame": frame}
    if state is not None:
        body["state"] = base64.b64encode(state).decode("ascii")
    return body


def read_snapshot_reply(parent: Any, body: dict[str, Any], sent_at: float) -> SnapshotReply:
    token, frame, state = body.get("token"), body.get("frame"), body.get("state")
    if not isinstance(token, str) or isinstance(frame, bool) or not isinstance(frame, int):
        raise ValueError(f"snapshot reply needs a string token and an integer frame, got {body!r}")
    raw = base64.b64decode(state) if isinstance(state, str) else None
    return SnapshotReply(parent, token, int(body.get("episode_id", 0)), frame, raw, sent_at)


def restore_body(token: str | None, state: bytes | None, obs: str = "vnc") -> dict[str, Any]:
    """A restore request's body (the client's side)."""
    body: dict[str, Any] = {"token": token} if state is None else {
        "state": base64.b64encode(state).decode("ascii")
    }
    if obs != "vnc":
        body["obs"] = obs
    return body
