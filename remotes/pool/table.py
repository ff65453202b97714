"""The pool's remotes and leases, as a transition table: sans-I/O (no asyncio, no sockets).

Holds :class:`Warmth` (where a pooled remote is), :class:`Event`, the table
:data:`TABLE`, :class:`Kind` (what a remote serves: env id, mode, runtime options),
:class:`Lease` and :class:`PoolTable`, the machine. The shell
(:mod:`remotes.pool.service`) feeds it what happened — a remote started, a claim, a
renewal, a release, the clock, a remote that died or failed its health check — and acts
on what comes out: a remote whose lease ended is reset by the shell
(:meth:`PoolTable.take_resets` names them; then :meth:`PoolTable.reset_done`), a failed
one is restarted (its old entry retired, new ones added). An event the table does not
list for a remote's state raises :class:`IllegalTransition`, naming both, as
:mod:`envserver.state` does for a remote.

| state | event | next |
|---|---|---|
| starting | started | warm |
| warm | claim | leased |
| leased | end (released, expired, past max age) | resetting |
| resetting | reset done | warm |
| warm, resetting | check failed | failed |
| any but failed | died | failed |

A remote leaves the table (``retire``) when the shell restarts its process; the new
process's remotes come in as ``starting``. Leases that ended are remembered (at most
:data:`MAX_ENDED_LEASES`) so a holder that asks is told why, not "unknown lease".
"""

from __future__ import annotations

import enum
import secrets
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

#: Seconds a holder may go without renewing before its lease ends (a short deadline: a
#: holder that died frees its remote within seconds, not MCP's 10 minutes).
DEFAULT_DEADLINE: Final = 5.0
#: Seconds a lease may last at most, renewed or not (a holder stuck in a loop frees it).
DEFAULT_MAX_AGE: Final = 3600.0
#: Ended leases remembered for their holders' questions; the oldest go first.
MAX_ENDED_LEASES: Final = 4096
#: Claim latencies kept for the percentiles (the newest).
MAX_LATENCIES: Final = 10_000
#: The prefix of a lease's rewarder client id: the holder connects with it, and the pool
#: takes the remote back by connecting with the same id (the remote closes the holder).
CLIENT_ID_PREFIX: Final = "pool-lease:"


class Warmth(enum.Enum):
    """Where a pooled remote is."""

    STARTING = "starting"  # its process is starting
    WARM = "warm"  # reset, healthy, waiting for a claim
    LEASED = "leased"  # handed out; its holder renews the lease
    RESETTING = "resetting"  # its lease ended; the pool resets it
    FAILED = "failed"  # died or failed its health check; the pool restarts it

    __hash__ = object.__hash__


class Event(enum.Enum):
    STARTED = "started"
    CLAIM = "claim"
    END = "end"
    RESET_DONE = "reset done"
    CHECK_FAILED = "check failed"
    DIED = "died"

    __hash__ = object.__hash__


TABLE: Final[Mapping[tuple[Warmth, Event], Warmth]] = {
    (Warmth.STARTING, Event.STARTED): Warmth.WARM,
    (Warmth.WARM, Event.CLAIM): Warmth.LEASED,
    (Warmth.LEASED, Event.END): Warmth.RESETTING,
    (Warmth.RESETTING, Event.RESET_DONE): Warmth.WARM,
    (Warmth.WARM, Event.CHECK_FAILED): Warmth.FAILED,
    (Warmth.RESETTING, Event.CHECK_FAILED): Warmth.FAILED,
    **{(state, Event.DIED): Warmth.FAILED for state in Warmth if state is not Warmth.FAILED},
}


class IllegalTransition(RuntimeError):
    """An event the table does not list for the remote's state (a bug in the shell)."""

    def __init__(self, remote: int, state: Warmth, event: Event) -> None:
        super().__init__(f"pooled remote {remote} is {state.value}: {event.value!r} cannot happen there")


class NoSuchKind(ValueError):
    """A claim for something the pool does not serve; the message lists what it does."""


@dataclass(frozen=True, slots=True)
class Kind:
    """What a pooled remote serves: an env id, a mode and the runtime options it was
    started with (``serve --option``), as sorted pairs."""

    env_id: str
    mode: str = "realtime"
    options: tuple[tuple[str, str], ...] = ()

    def matches(self, env_id: str, mode: str | None, options: Mapping[str, Any] | None) -> bool:
        """Whether a claim for ``env_id`` (``mode``, ``options``: None takes any) fits."""
        if env_id != self.env_id or (mode is not None and mode != self.mode):
            return False
        if options is None:
            return True
        return tuple(sorted((str(k), str(v)) for k, v in options.items())) == self.options

    def describe(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "mode": self.mode, "options": dict(self.options)}


@dataclass(slots=True)
class Lease:
    """One remote handed out: to whom (its rewarder ``client_id``), since when, until when."""

    id: str
    remote: int
    claimed_at: float
    renewed_at: float
    deadline: float
    max_age: float
    seed: int | None = None

    @property
    def client_id(self) -> str:
        return CLIENT_ID_PREFIX + self.id

    def expires_at(self) -> float:
        return min(self.renewed_at + self.deadline, self.claimed_at + self.max_age)

    def end_reason(self, now: float) -> str | None:
        """Why the lease is over at ``now`` by the clock, or None."""
        if now >= self.claimed_at + self.max_age:
            return f"past its maximum age of {self.max_age:g} s"
        if now >= self.renewed_at + self.deadline:
            return f"not renewed for {now - self.renewed_at:.1f} s (the deadline is {self.deadline:g} s)"
        return None


@dataclass(slots=True)
class PooledRemote:
    """One remote of the pool; ``process`` is the shell's handle of its process."""

    id: int
    kind: Kind
    process: int
    state: Warmth = Warmth.STARTING
    address: str | None = None
    lease: str | None = None
    since: float = 0.0
    error: str | None = None
    pid: int | None = None
    container: str | None = None


@dataclass(slots=True)
class PoolTable:
    """The machine: every remote's state and every live lease."""

    deadline: float = DEFAULT_DEADLINE
    max_age: float = DEFAULT_MAX_AGE
    remotes: dict[int, PooledRemote] = field(default_factory=dict)
    leases: dict[str, Lease] = field(default_factory=dict)
    ended: OrderedDict[str, str] = field(default_factory=OrderedDict)
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_LATENCIES))
    #: Leases handed out, and those that ended otherwise than by release.
    claims: int = 0
    unreleased: int = 0
    _next_id: int = 0
    _last_lease: dict[int, str] = field(default_factory=dict)
    _resets: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0 < self.deadline <= self.max_age:
            raise ValueError(
                f"a lease's deadline ({self.deadline:g} s) must be positive and at most its "
                f"maximum age ({self.max_age:g} s)"
            )

    # Remotes -----------------------------------------------------------------------------

    def add(self, kind: Kind, process: int, now: float) -> int:
        """A new remote whose process is starting; its id."""
        rid = self._next_id
        self._next_id += 1
        self.remotes[rid] = PooledRemote(rid, kind, process, since=now)
        return rid

    def _fire(self, remote: PooledRemote, event: Event, now: float) -> None:
        new = TABLE.get((remote.state, event))
        if new is None:
            raise IllegalTransition(remote.id, remote.state, event)
        if new is not remote.state:
            remote.state, remote.since = new, now

    def started(self, rid: int, address: str, now: float, pid: int | None = None,
                container: str | None = None) -> None:
        """The remote serves at ``address`` (its process ``pid``, or its ``container``)."""
        remote = self.remotes[rid]
        remote.address, remote.error, remote.pid, remote.container = address, None, pid, container
        self._fire(remote, Event.STARTED, now)

    def reset_done(self, rid: int, now: float) -> None:
        self._fire(self.remotes[rid], Event.RESET_DONE, now)

    def check_failed(self, rid: int, why: str, now: float) -> None:
        remote = self.remotes[rid]
        remote.error = why
        self._fire(remote, Event.CHECK_FAILED, now)

    def died(self, rid: int, why: str, now: float) -> None:
        """The remote is gone (its process exited); its lease, if any, ends saying so."""
        remote = self.remotes[rid]
        if remote.state is Warmth.FAILED:
            return
        if remote.lease is not None:
            self._end(remote.lease, f"its remote {remote.address} died ({why})", now)
        remote.error = why
        self._fire(remote, Event.DIED, now)

    def retire(self, rid: int) -> None:
        """Forget a remote (its process is being replaced); it must not hold a lease."""
        remote = self.remotes.pop(rid)
        assert remote.lease is None, f"retiring remote {rid} with lease {remote.lease}"

    # Leases ------------------------------------------------------------------------------

    def claim(self, env_id: str, mode: str | None, options: Mapping[str, Any] | None,
              seed: int | None, now: float, deadline: float | None = None) -> Lease | None:
        """Lease a warm remote that fits (the one warm the longest), or None if none is warm
        now; :class:`NoSuchKind` if the pool never serves such a remote. ``deadline``: a
        shorter renewal deadline this holder asks for (at most the pool's)."""
        fits = [r for r in self.remotes.values() if r.kind.matches(env_id, mode, options)]
        if not fits:
            served = sorted({str(r.kind.describe()) for r in self.remotes.values()})
            raise NoSuchKind(
                f"this pool serves no {env_id} (mode {mode or 'any'}, options {options or 'any'}); "
                f"it serves: {'; '.join(served) or 'nothing yet'}"
            )
        warm = [r for r in fits if r.state is Warmth.WARM]
        if not warm:
            return None
        remote = min(warm, key=lambda r: (r.since, r.id))
        lease = Lease(secrets.token_urlsafe(12), remote.id, now, now,
                      min(deadline or self.deadline, self.deadline), self.max_age, seed)
        self.leases[lease.id] = lease
        remote.lease = lease.id
        self._fire(remote, Event.CLAIM, now)
        self.claims += 1
        return lease

    def renew(self, lease_ids: Iterable[str], now: float) -> dict[str, dict[str, Any]]:
        """Renew each lease still live: ``{"alive": True, "expires_in": s}``; for one that
        ended, ``{"alive": False, "reason": why}``."""
        self.expire(now)  # a late renewal never revives a lease the clock ended
        out: dict[str, dict[str, Any]] = {}
        for lid in lease_ids:
            lease = self.leases.get(lid)
            if lease is None:
                out[lid] = {"alive": False, "reason": self.why_ended(lid)}
                continue
            lease.renewed_at = now
            out[lid] = {"alive": True, "expires_in": lease.expires_at() - now}
        return out

    def release(self, lid: str, now: float) -> int | None:
        """End a lease its holder is done with; the remote to reset, or None if the
        lease had ended already."""
        lease = self.leases.get(lid)
        if lease is None:
            return None
        return self._end(lid, "released by its holder", now, released=True)

    def expire(self, now: float) -> list[int]:
        """End every lease the clock ended; the remotes to reset."""
        due = [(lid, why) for lid, lease in self.leases.items() if (why := lease.end_reason(now))]
        return [rid for lid, why in due if (rid := self._end(lid, why, now)) is not None]

    def _end(self, lid: str, why: str, now: float, released: bool = False) -> int | None:
        """End lease ``lid`` for ``why``; its remote's id if it now wants a reset."""
        lease = self.leases.pop(lid)
        self.ended[lid] = why
        while len(self.ended) > MAX_ENDED_LEASES:
            self.ended.popitem(last=False)
        if not released:
            self.unreleased += 1
        remote = self.remotes.get(lease.remote)
        if remote is None or remote.lease != lid:
            return None
        remote.lease = None
        self._last_lease[remote.id] = lid
        if remote.state is not Warmth.LEASED:
            return None
        self._fire(remote, Event.END, now)
        self._resets.append(remote.id)
        return remote.id

    def take_resets(self) -> list[int]:
        """The remotes whose lease ended since the last call (by release, the clock —
        whichever call noticed it — or death): the shell takes each back and resets it,
        then calls :meth:`reset_done`. Call after every call that may end a lease."""
        resets, self._resets = self._resets, []
        return resets

    def why_ended(self, lid: str) -> str:
        return self.ended.get(lid, "no such lease (it ended long ago, or the pool restarted)")

    def next_expiry(self) -> float | None:
        """When the next lease ends by the clock (None: no lease)."""
        return min((lease.expires_at() for lease in self.leases.values()), default=None)

    def lease_of(self, rid: int) -> Lease | None:
        remote = self.remotes.get(rid)
        return None if remote is None or remote.lease is None else self.leases.get(remote.lease)

    def last_client_id(self, rid: int) -> str | None:
        """The client id of the remote's last lease (the pool takes the remote back with it)."""
        lid = self._last_lease.get(rid)
        return None if lid is None else CLIENT_ID_PREFIX + lid

    # What the status shows ----------------------------------------------------------------

    def note_claim(self, seconds: float) -> None:
        self.latencies.append(seconds)

    def status(self, now: float) -> dict[str, Any]:
        """Counts per kind and state, claim latency percentiles, every lease's age."""
        kinds: dict[Kind, dict[str, int]] = {}
        for remote in self.remotes.values():
            counts = kinds.setdefault(remote.kind, {w.value: 0 for w in Warmth})
            counts[remote.state.value] += 1
        lat = np.asarray(self.latencies, dtype=np.float64) * 1000
        percentiles = (
            dict(zip(("p50_ms", "p90_ms", "p99_ms"),
                     np.percentile(lat, [50, 90, 99]).round(2).tolist(), strict=True))
            if lat.size else {}
        )
        return {
            "kinds": [{**k.describe(), "size": sum(c.values()), **c} for k, c in kinds.items()],
            "claims": {"count": self.claims, "lost": self.unreleased, **percentiles},
            "leases": [
                {"lease": lease.id, "remote": lease.remote,
                 "address": self.remotes[lease.remote].address if lease.remote in self.remotes else None,
                 "env_id": self.remotes[lease.remote].kind.env_id if lease.remote in self.remotes else None,
                 "age_s": round(now - lease.claimed_at, 3),
                 "since_renewal_s": round(now - lease.renewed_at, 3)}
                for lease in self.leases.values()
            ],
            "remotes": [
                {"id": r.id, "env_id": r.kind.env_id, "mode": r.kind.mode, "state": r.state.value,
                 "address": r.address, "pid": r.pid, "container": r.container,
                 "for_s": round(now - r.since, 3), "error": r.error}
                for r in self.remotes.values()
            ],
            "deadline_s": self.deadline,
            "max_age_s": self.max_age,
        }
