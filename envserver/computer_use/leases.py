"""The MCP port's sessions as leases (sans-I/O: times are passed in, nothing waits here).

A session is alive while its host shows it is: a request in flight, or its open event
stream (``GET /mcp``, which every MCP SDK client holds open and the port writes a
heartbeat on, so a host that exits closes it). Once neither is true the lease runs:
``lease`` seconds later the session ends and lets go of its seat. A host that exits
without ``DELETE`` frees the remote within a lease, not an idle timeout of minutes.

A full port (``max_sessions``) tells a new session when the soonest lease can end
(``Retry-After``); while nobody drives, it makes room by ending a watcher — one whose
host is gone (within its lease), else the one whose last request is oldest — so watchers
never keep a driver out.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

#: Seconds a session without a request in flight or an open event stream is kept: longer
#: than an SDK client's stream reconnect (1 s) and a quick host restart, short enough that an
#: abandoned session or seat frees the remote in well under a minute (``serve --mcp-lease``).
LEASE: Final = 30.0
#: Shortest lease ``serve --mcp-lease`` takes (a lease shorter than a heartbeat would end
#: sessions whose host is alive).
MIN_LEASE: Final = 1.0
#: Longest lease it takes (a long lease is what locked remotes for 10 minutes).
MAX_LEASE: Final = 3600.0

T = TypeVar("T")


def check_lease(seconds: float) -> float:
    """``seconds`` as a lease, or :class:`ValueError` saying what is allowed."""
    if not (math.isfinite(seconds) and MIN_LEASE <= seconds <= MAX_LEASE):
        raise ValueError(f"an MCP lease is {MIN_LEASE:g} to {MAX_LEASE:g} seconds, not {seconds!r}")
    return float(seconds)


def heartbeat(lease: float) -> float:
    """Seconds between two heartbeats on an event stream: a third of the lease, at most 10 s,
    so a vanished host is noticed well within its lease."""
    return min(10.0, lease / 3)


@dataclass(eq=False)
class Lease(Generic[T]):
    """One session: its id (``Mcp-Session-Id``), what it holds, what keeps it alive."""

    id: str
    holder: T
    last: float  # when it last showed life (monotonic seconds)
    calls: int = 0  # requests in flight
    streams: int = 0  # open event streams
    ended: str | None = field(default=None)  # why it ended, once it has
    client_id: str = ""  # its host's openai-client-id: a newer session with it replaces this one

    def alive(self) -> bool:
        return self.calls > 0 or self.streams > 0

    def deadline(self, lease: float) -> float | None:
        """When it ends unless it shows life again (None: it is alive now)."""
        return None if self.alive() else self.last + lease


@dataclass(frozen=True)
class Full:
    """No room: the answer says when to come back."""

    retry_after: int  # whole seconds (Retry-After)
    message: str


class Leases(Generic[T]):
    """The port's sessions: admit, renew, and end those whose lease ran out."""

    def __init__(self, max_sessions: int, lease: float = LEASE) -> None:
        self.max_sessions, self.lease = max_sessions, check_lease(lease)
        self.sessions: dict[str, Lease[T]] = {}

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: str | None) -> Lease[T] | None:
        return self.sessions.get(session_id) if session_id else None

    def room(self, now: float, seat_free: bool, is_driver: object = None) -> Lease[T] | Full | None:
        """None: there is room. A :class:`Lease` to end first (a watcher, when the port is
        full and nobody drives). :class:`Full`: come back in ``retry_after`` s."""
        if len(self.sessions) < self.max_sessions:
            return None
        if seat_free:  # watchers never keep a driver out: the one whose host is gone, else the idlest
            watchers = [s for s in self.sessions.values() if s.calls == 0 and s.holder is not is_driver]
            if watchers:
                return min(watchers, key=lambda s: (s.alive(), s.last))
        deadlines = [d for s in self.sessions.values() if (d := s.deadline(self.lease)) is not None]
        wait = max(1, math.ceil(min(deadlines) - now)) if deadlines else math.ceil(self.lease)
        when = (f"the soonest of them ends in {wait} s unless it shows life" if deadlines else
                f"all are in use; one ends {self.lease:g} s after its host stops")
        return Full(wait, f"all {self.max_sessions} MCP sessions of this remote are open (MAX_SESSIONS): "
                          f"{when} (a session ends {self.lease:g} s after its last request when it "
                          f"has no open event stream); try again in {wait} s")

    def add(self, holder: T, now: float, client_id: str = "") -> Lease[T]:
        session = Lease(secrets.token_hex(16), holder, now, client_id=client_id)
        self.sessions[session.id] = session
        return session

    def end(self, session: Lease[T], why: str) -> bool:
        """Forget ``session`` (True if it was open: the caller lets go of what it held)."""
        if self.sessions.pop(session.id, None) is None:
            return False
        session.ended = why
        return True

    def with_client_id(self, client_id: str) -> list[Lease[T]]:
        """The open sessions a new one with ``client_id`` replaces (none without an id)."""
        return [s for s in self.sessions.values() if client_id and s.client_id == client_id]

    def begin(self, session: Lease[T], now: float, stream: bool = False) -> None:
        """A request (or an event stream) of ``session`` starts: it is alive."""
        session.last = now
        if stream:
            session.streams += 1
        else:
            session.calls += 1

    def finish(self, session: Lease[T], now: float, stream: bool = False) -> None:
        """It ended: the lease runs from now unless something else keeps it alive."""
        session.last = now
        if stream:
            session.streams -= 1
        else:
            session.calls -= 1

    def expired(self, now: float) -> list[Lease[T]]:
        """The sessions whose lease ran out by ``now`` (still open: end each)."""
        return [s for s in self.sessions.values()
                if (d := s.deadline(self.lease)) is not None and d <= now]

    def next_deadline(self) -> float | None:
        deadlines = [d for s in self.sessions.values() if (d := s.deadline(self.lease)) is not None]
        return min(deadlines) if deadlines else None
