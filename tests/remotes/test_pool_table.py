"""The pool's lease table, sans-I/O: a clock in, states and leases out (remotes/pool/table.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remotes.pool.table import (
    CLIENT_ID_PREFIX,
    MAX_ENDED_LEASES,
    IllegalTransition,
    Kind,
    NoSuchKind,
    PoolTable,
    Warmth,
)

CATCH = Kind("builtin.Catch-v0")
PONG = Kind("atari.Pong-v0", "lockstep", (("noop_max", "0"),))


def warm_table(*kinds: Kind, deadline: float = 2.0, max_age: float = 10.0) -> PoolTable:
    table = PoolTable(deadline=deadline, max_age=max_age)
    for i, kind in enumerate(kinds):
        rid = table.add(kind, process=i, now=0.0)
        table.started(rid, f"127.0.0.1:{5900 + i}+{15900 + i}", now=0.0)
    return table


def test_a_claim_takes_the_remote_warm_longest_and_none_when_all_are_leased() -> None:
    table = warm_table(CATCH, CATCH)
    table.remotes[1].since = -1.0
    first = table.claim("builtin.Catch-v0", None, None, seed=7, now=1.0)
    assert first is not None and first.remote == 1 and first.seed == 7
    assert first.client_id == CLIENT_ID_PREFIX + first.id
    second = table.claim("builtin.Catch-v0", "realtime", {}, None, now=1.0)
    assert second is not None and second.remote == 0
    assert table.claim("builtin.Catch-v0", None, None, None, now=1.0) is None
    assert {r.state for r in table.remotes.values()} == {Warmth.LEASED}


def test_a_claim_matches_mode_and_options_and_names_what_the_pool_serves() -> None:
    table = warm_table(CATCH, PONG)
    with pytest.raises(NoSuchKind, match="atari.Pong-v0"):
        table.claim("atari.Pong-v0", "realtime", None, None, now=0.0)
    with pytest.raises(NoSuchKind):
        table.claim("atari.Pong-v0", None, {"noop_max": 30}, None, now=0.0)
    lease = table.claim("atari.Pong-v0", "lockstep", {"noop_max": 0}, None, now=0.0)
    assert lease is not None and table.remotes[lease.remote].kind == PONG


def test_an_unrenewed_lease_ends_at_its_deadline_and_a_late_renewal_does_not_revive_it() -> None:
    table = warm_table(CATCH, deadline=2.0)
    lease = table.claim("builtin.Catch-v0", None, None, None, now=0.0)
    assert lease is not None
    assert table.renew([lease.id], now=1.5)[lease.id]["alive"]
    assert table.expire(now=3.0) == []  # renewed at 1.5: lives to 3.5
    assert table.next_expiry() == 3.5
    assert table.expire(now=3.6) == [lease.remote]
    assert table.remotes[lease.remote].state is Warmth.RESETTING
    answer = table.renew([lease.id], now=3.7)[lease.id]
    assert not answer["alive"] and "not renewed" in answer["reason"]
    assert table.last_client_id(lease.remote) == lease.client_id
    table.reset_done(lease.remote, now=3.8)
    assert table.remotes[lease.remote].state is Warmth.WARM
    assert table.unreleased == 1


def test_a_renewal_that_finds_its_lease_ended_by_the_clock_hands_the_remote_back() -> None:
    """The clock ends a lease whichever call notices it first: a late renewal does, and
    the remote must still be reset (else it stays 'resetting' for ever, out of the pool)."""
    table = warm_table(CATCH, deadline=2.0)
    lease = table.claim("builtin.Catch-v0", None, None, None, now=0.0)
    assert lease is not None
    assert not table.renew([lease.id], now=2.5)[lease.id]["alive"]
    assert table.take_resets() == [lease.remote]
    assert table.take_resets() == []
    table.expire(now=3.0)
    assert table.take_resets() == []  # ended once, handed back once


def test_a_holder_may_ask_for_a_shorter_deadline_never_a_longer_one() -> None:
    table = warm_table(CATCH, CATCH, deadline=2.0)
    short = table.claim("builtin.Catch-v0", None, None, None, now=0.0, deadline=0.5)
    long = table.claim("builtin.Catch-v0", None, None, None, now=0.0, deadline=9.0)
    assert short is not None and long is not None
    assert (short.deadline, long.deadline) == (0.5, 2.0)
    table.expire(now=0.6)
    assert table.take_resets() == [short.remote]


def test_a_lease_ends_at_its_maximum_age_however_renewed() -> None:
    table = warm_table(CATCH, deadline=2.0, max_age=5.0)
    lease = table.claim("builtin.Catch-v0", None, None, None, now=0.0)
    assert lease is not None
    for t in (1.0, 2.0, 3.0, 4.0, 4.9):
        assert table.renew([lease.id], now=t)[lease.id]["alive"]
    answer = table.renew([lease.id], now=5.0)[lease.id]
    assert not answer["alive"] and "maximum age" in answer["reason"]


def test_a_release_is_not_a_loss_and_a_dead_remote_ends_its_lease_saying_so() -> None:
    table = warm_table(CATCH, CATCH)
    a = table.claim("builtin.Catch-v0", None, None, None, now=0.0)
    b = table.claim("builtin.Catch-v0", None, None, None, now=0.0)
    assert a is not None and b is not None
    assert table.release(a.id, now=1.0) == a.remote
    assert table.release(a.id, now=1.0) is None  # twice: already ended
    table.died(b.remote, "exit status -9", now=1.0)
    assert table.remotes[b.remote].state is Warmth.FAILED
    assert "died" in table.renew([b.id], now=1.1)[b.id]["reason"]
    assert table.unreleased == 1
    # A failed remote is never handed out; retired, it leaves the table.
    table.reset_done(a.remote, now=1.2)
    c = table.claim("builtin.Catch-v0", None, None, None, now=1.3)
    assert c is not None and c.remote == a.remote
    table.retire(b.remote)
    assert b.remote not in table.remotes


def test_events_the_table_does_not_list_are_illegal() -> None:
    table = warm_table(CATCH)
    with pytest.raises(IllegalTransition, match="warm"):
        table.reset_done(0, now=0.0)
    table.died(0, "gone", now=0.0)
    with pytest.raises(IllegalTransition, match="failed"):
        table.started(0, "127.0.0.1:1+2", now=0.0)


def test_ended_leases_are_remembered_within_a_bound() -> None:
    table = warm_table(CATCH, deadline=1.0, max_age=1.0)
    first = None
    for i in range(MAX_ENDED_LEASES + 5):
        lease = table.claim("builtin.Catch-v0", None, None, None, now=float(i))
        assert lease is not None
        first = first or lease.id
        table.release(lease.id, now=float(i))
        table.reset_done(lease.remote, now=float(i))
    assert len(table.ended) == MAX_ENDED_LEASES
    assert "no such lease" in table.why_ended(first)


def test_a_deadline_past_the_maximum_age_is_refused() -> None:
    with pytest.raises(ValueError, match="deadline"):
        PoolTable(deadline=10.0, max_age=5.0)


def test_the_pool_says_so_before_it_overcommits_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from remotes.capacity import CACHE_ENV
    from remotes.pool.service import PoolSpec, capacity_warning

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "frame-cpu.json"))  # the default estimate
    lockstep = PoolSpec(Kind("builtin.Catch-v0", "lockstep"), 200)
    assert capacity_warning([PoolSpec(CATCH, 64), lockstep], cores=2) is None
    warning = capacity_warning([PoolSpec(CATCH, 256)], cores=2)
    assert warning is not None and "256 real-time remotes" in warning and "2 cores" in warning
    assert "nice 19" in warning
