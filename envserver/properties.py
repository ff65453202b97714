"""The remote's properties, as DM Lab's EnvCApi and dm_env_rpc's Properties extension
have them: keys with a type, a description, and readable/writable/listable flags.

A table of :class:`Property` rows; reads and writes go through each row's functions, so
a property says what it does in one place. Both front ends serve the same table: the
rewarder as ``v0.env.properties.{list,read,write}``, the dm_env_rpc port through its
extension (adding the rows of its world). Errors name the key and what is allowed.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .version import PROTOCOLS, server_version

if TYPE_CHECKING:
    from runtimes.base import Runtime


class Refusal(enum.Enum):
    """Why a property request is refused (each front end has its code for it)."""

    NOT_FOUND = "not found"
    READ_ONLY = "read-only"
    INVALID = "invalid value"


class PropertyError(Exception):
    def __init__(self, refusal: Refusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal


@dataclass(frozen=True)
class Property:
    """One property: ``read`` gives its value now; ``write`` (None: read-only) applies a
    new one, raising ``ValueError`` with what is allowed."""

    key: str
    kind: type
    description: str
    read: Callable[[], Any]
    write: Callable[[Any], Awaitable[None]] | None = None

    def spec(self) -> dict[str, Any]:
        return {
            "key": self.key, "type": self.kind.__name__, "description": self.description,
            "readable": True, "writable": self.write is not None, "listable": False,
        }


class Properties:
    """A table of properties, read and written by key."""

    def __init__(self, rows: Iterable[Property]) -> None:
        self._rows: dict[str, Property] = {row.key: row for row in rows}

    @property
    def rows(self) -> Mapping[str, Property]:
        return self._rows

    def add(self, *rows: Property) -> None:
        """More rows (a recorder's ``recording``); a key the table has is refused."""
        for row in rows:
            if row.key in self._rows:
                raise ValueError(f"the table already has a property {row.key!r}")
            self._rows[row.key] = row

    def row(self, key: str) -> Property:
        row = self.rows.get(key)
        if row is None:
            raise PropertyError(
                Refusal.NOT_FOUND, f"no property {key!r}; the properties are {sorted(self.rows)}"
            )
        return row

    def read(self, key: str) -> Any:
        value = self.row(key).read()
        return value.item() if isinstance(value, np.generic) else value

    async def write(self, key: str, value: Any) -> None:
        row = self.row(key)
        if row.write is None:
            writable = sorted(k for k, r in self.rows.items() if r.write is not None)
            raise PropertyError(Refusal.READ_ONLY, f"property {key!r} is read-only; writable: {writable}")
        if not _fits(row.kind, value):
            raise PropertyError(
                Refusal.INVALID, f"property {key!r} takes a {row.kind.__name__}, not {value!r}"
            )
        try:
            await row.write(row.kind(value))
        except ValueError as exc:
            raise PropertyError(Refusal.INVALID, f"property {key!r}: {exc}") from None

    def specs(self) -> list[dict[str, Any]]:
        return [row.spec() for row in self.rows.values()]


def _fits(kind: type, value: Any) -> bool:
    """Whether a decoded scalar is of the property's type (ints pass as floats)."""
    if isinstance(value, np.ndarray):
        return False
    if kind is str:
        return isinstance(value, str)
    if isinstance(value, bool | np.bool_ | str | bytes):
        return False
    if kind is int:
        return isinstance(value, int | np.integer)
    return isinstance(value, int | float | np.integer | np.floating)


class Described(Protocol):
    """What :func:`remote_properties` reads and writes of :class:`envserver.remote.Remote`
    (named here so this module, below the remote, never imports it)."""

    @property
    def runtime(self) -> Runtime: ...
    @property
    def fps(self) -> float: ...
    @property
    def mode(self) -> str: ...
    @property
    def episode_id(self) -> int: ...
    @property
    def frame(self) -> int: ...
    def set_fps(self, fps: float) -> None: ...
    def set_observe(self, value: str) -> None: ...


def remote_properties(remote: Described) -> list[Property]:
    """The rows every front end shares: what the remote is and where it is."""

    async def write_fps(fps: float) -> None:
        remote.set_fps(fps)

    async def write_observe(value: str) -> None:
        remote.set_observe(value)

    return [
        Property("env_id", str, "the environment the remote serves", lambda: remote.runtime.env_id),
        Property("fps", float, "frames per second in real time", lambda: remote.fps, write_fps),
        Property("mode", str, "realtime or lockstep (a reset switches it)", lambda: remote.mode),
        Property("observe", str, "page observations sent as v0.env.observation: a comma list "
                 "of elements, tree; empty for none (browser remotes)",
                 lambda: ",".join(sorted(remote.runtime.observe)), write_observe),
        Property("width", int, "screen width in pixels", lambda: remote.runtime.width),
        Property("height", int, "screen height in pixels", lambda: remote.runtime.height),
        Property("episode_id", int, "the remote's current episode", lambda: remote.episode_id),
        Property("frame", int, "frames the remote has drawn since it started", lambda: remote.frame),
        Property("version", str, "the universe-remote version serving", server_version),
        Property("protocols", str, "the protocols this remote speaks, with versions",
                 lambda: ", ".join(f"{name} {v}" for name, v in PROTOCOLS.items())),
    ]
