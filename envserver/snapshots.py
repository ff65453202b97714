"""A remote's snapshots: the store of tokens and the bytes they export (docs/snapshots.md).

Holds :class:`Snapshot` (one saved state), :class:`SnapshotStore` (tokens -> snapshots,
bounded by :data:`MAX_SNAPSHOTS` and :data:`MAX_SNAPSHOT_BYTES`, oldest dropped first,
a dropped token refused by name), and :func:`export` / :func:`open_export`, our own
format of exported bytes::

    magic "URSNAPv1" | format version u16
    env id (u16 length, UTF-8) | server version (u16 length, UTF-8)
    episode frame u32 | runtime state (u32 length, bytes) | digest (u8 length, bytes)
    HMAC-SHA256 of all the above under the remotes' shared key (32 bytes)

Every field is read and checked in turn; the tag is checked before the runtime sees a
byte, since some runtimes' states are a library's own serialisation (ALE's) whose reader
was not written for hostile input. Nothing here unpickles or evaluates anything.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from rewarder.snapshot_messages import SNAPSHOT_KEY_ENV

#: Snapshots a remote keeps; the oldest is dropped for a new one past this.
MAX_SNAPSHOTS: Final = 256
#: Bytes of runtime state a remote keeps in all (an Atari state is ~20 kB: ~3,000 fit).
MAX_SNAPSHOT_BYTES: Final = 64 << 20
#: Tokens of dropped snapshots remembered, to say "dropped" rather than "unknown".
MAX_DROPPED_REMEMBERED: Final = 4096
#: Largest runtime state exported bytes may carry.
MAX_STATE_BYTES: Final = 32 << 20
MAGIC: Final = b"URSNAPv1"
FORMAT_VERSION: Final = 1
_TAG_BYTES: Final = 32
_MAX_TEXT: Final = 256


class SnapshotError(ValueError):
    """A token or bytes this remote cannot restore; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One saved state: whose it is, the runtime's bytes, their digest, and where in the
    episode it was taken (the episode id, the remote's frame, the episode's frame)."""

    env_id: str
    state: bytes
    digest: bytes
    episode_id: int
    frame: int
    episode_frame: int


class SnapshotStore:
    """Tokens -> snapshots, oldest dropped past :data:`MAX_SNAPSHOTS` snapshots or
    :data:`MAX_SNAPSHOT_BYTES` bytes."""

    def __init__(self, max_snapshots: int = MAX_SNAPSHOTS, max_bytes: int = MAX_SNAPSHOT_BYTES) -> None:
        self.max_snapshots, self.max_bytes = max_snapshots, max_bytes
        self._kept: OrderedDict[str, Snapshot] = OrderedDict()
        self._dropped: OrderedDict[str, None] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._kept)

    def add(self, snapshot: Snapshot) -> str:
        """Keep ``snapshot``; its new token (opaque, unguessable)."""
        if len(snapshot.state) > self.max_bytes:
            raise SnapshotError(
                f"this state is {len(snapshot.state)} bytes, over the {self.max_bytes} a remote "
                "keeps (MAX_SNAPSHOT_BYTES)"
            )
        token = secrets.token_urlsafe(16)
        self._kept[token] = snapshot
        self.bytes += len(snapshot.state)
        while len(self._kept) > self.max_snapshots or self.bytes > self.max_bytes:
            old, dropped = self._kept.popitem(last=False)
            self.bytes -= len(dropped.state)
            self._dropped[old] = None
            if len(self._dropped) > MAX_DROPPED_REMEMBERED:
                self._dropped.popitem(last=False)
        return token

    def get(self, token: str) -> Snapshot:
        """The snapshot of ``token``; :class:`SnapshotError` saying whether it was dropped."""
        snapshot = self._kept.get(token)
        if snapshot is not None:
            return snapshot
        if token in self._dropped:
            raise SnapshotError(
                f"snapshot {token!r} was dropped: a remote keeps its newest {self.max_snapshots} "
                f"snapshots and {self.max_bytes >> 20} MiB of them (MAX_SNAPSHOTS, "
                "MAX_SNAPSHOT_BYTES); export the bytes (export=true) to keep a state longer"
            )
        raise SnapshotError(
            f"no snapshot {token!r} on this remote: tokens are of the remote that made them "
            "(and die with it); restore exported bytes to move a state between remotes"
        )


def seal_key(text: str | None) -> bytes:
    """The HMAC key of the remotes' shared secret text (any length)."""
    return hashlib.sha256((text or "").encode()).digest()


def export(snapshot: Snapshot, version: str, key: bytes) -> bytes:
    """``snapshot`` as sealed bytes in our format (the module docstring)."""
    env_id, ver = snapshot.env_id.encode(), version.encode()
    body = b"".join((
        struct.pack("!8sH", MAGIC, FORMAT_VERSION),
        struct.pack("!H", len(env_id)), env_id, struct.pack("!H", len(ver)), ver,
        struct.pack("!II", snapshot.episode_frame, len(snapshot.state)), snapshot.state,
        struct.pack("!B", len(snapshot.digest)), snapshot.digest,
    ))
    return body + hmac.new(key, body, hashlib.sha256).digest()


class _Reader:
    """Reads fields off the front of exported bytes, saying which one ran short."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, size: int, what: str) -> bytes:
        if self.at + size > len(self.data):
            raise SnapshotError(f"these bytes end inside the {what}: not a whole exported snapshot")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def number(self, code: str, what: str) -> int:
        (value,) = struct.unpack("!" + code, self.take(struct.calcsize(code), what))
        return int(value)

    def text(self, what: str) -> str:
        size = self.number("H", f"{what}'s length")
        if size > _MAX_TEXT:
            raise SnapshotError(f"the {what} is {size} bytes long; at most {_MAX_TEXT}")
        try:
            return self.take(size, what).decode()
        except UnicodeDecodeError:
            raise SnapshotError(f"the {what} is not UTF-8 text") from None


def open_export(data: bytes, env_id: str, version: str, key: bytes) -> Snapshot:
    """Exported bytes read and checked field by field, for a remote of ``env_id`` at
    ``version``; :class:`SnapshotError` names the first field that is wrong."""
    if not isinstance(data, bytes):
        raise SnapshotError(f"a snapshot is bytes, not {type(data).__name__}")
    reader = _Reader(data)
    magic = reader.take(len(MAGIC), "magic")
    if magic != MAGIC:
        hint = " (a Python pickle: never accepted)" if data[:1] == b"\x80" else ""
        raise SnapshotError(
            f"these bytes are not an exported snapshot{hint}: they start {magic!r}, not {MAGIC!r}; "
            "send the bytes v0.env.snapshot exported (export=true)"
        )
    fmt = reader.number("H", "format version")
    if fmt != FORMAT_VERSION:
        raise SnapshotError(f"snapshot format {fmt}; this remote reads format {FORMAT_VERSION}")
    their_env = reader.text("env id")
    if their_env != env_id:
        raise SnapshotError(
            f"a snapshot of {their_env!r} cannot be restored on this {env_id!r} remote; "
            f"restore it on a remote of {their_env!r}"
        )
    their_version = reader.text("server version")
    if their_version != version:
        raise SnapshotError(
            f"a snapshot of universe-remote {their_version}; this remote is {version} and "
            "restores only its own version's states"
        )
    episode_frame = reader.number("I", "episode frame")
    size = reader.number("I", "state's length")
    if size > MAX_STATE_BYTES:
        raise SnapshotError(f"the state is {size} bytes; at most {MAX_STATE_BYTES} (MAX_STATE_BYTES)")
    state = reader.take(size, "state")
    digest = reader.take(reader.number("B", "digest's length"), "digest")
    body_end = reader.at
    tag = reader.take(_TAG_BYTES, "seal")
    if reader.at != len(data):
        raise SnapshotError(f"{len(data) - reader.at} bytes follow the seal: not an exported snapshot")
    if not hmac.compare_digest(tag, hmac.new(key, data[:body_end], hashlib.sha256).digest()):
        raise SnapshotError(
            "the seal does not match: these bytes were changed, or sealed by a remote with "
            f"another key (give the remotes one {SNAPSHOT_KEY_ENV}); nothing was restored"
        )
    return Snapshot(env_id, state, digest, 0, 0, episode_frame)
