"""The remote's state machine, without sockets: every legal transition and every illegal one."""

from __future__ import annotations

import itertools

import pytest

from envserver.state import (
    LOCKSTEP_TABLE,
    REALTIME_TABLE,
    TABLES,
    UNDER_WAY,
    Event,
    IllegalTransition,
    RemoteState,
    State,
)

S, E = State, Event

#: Every legal move, written out by hand (not derived from the tables under test).
EXPECTED: dict[str, set[tuple[State, Event, State]]] = {
    "realtime": {
        (S.STARTING, E.RESET, S.RESETTING),
        (S.STARTING, E.SHUTDOWN, S.CLOSING),
        (S.RESETTING, E.RESET_DONE, S.RUNNING),
        (S.RESETTING, E.ENV_SWITCH, S.RESETTING),
        (S.RESETTING, E.MODE_SWITCH, S.RESETTING),
        (S.RESETTING, E.ERROR, S.RECOVERING),
        (S.RESETTING, E.SHUTDOWN, S.CLOSING),
        (S.RUNNING, E.RESET, S.RESETTING),
        (S.RUNNING, E.TICK, S.RUNNING),
        (S.RUNNING, E.EPISODE_DONE, S.RESETTING),
        (S.RUNNING, E.ERROR, S.RECOVERING),
        (S.RUNNING, E.SHUTDOWN, S.CLOSING),
        (S.RECOVERING, E.RECOVERED, S.RUNNING),
        (S.RECOVERING, E.ERROR, S.RECOVERING),
        (S.RECOVERING, E.SHUTDOWN, S.CLOSING),
        (S.CLOSING, E.SHUTDOWN, S.CLOSING),
    },
    "lockstep": {
        (S.STARTING, E.RESET, S.RESETTING),
        (S.STARTING, E.SHUTDOWN, S.CLOSING),
        (S.RESETTING, E.RESET_DONE, S.RUNNING),
        (S.RESETTING, E.ENV_SWITCH, S.RESETTING),
        (S.RESETTING, E.MODE_SWITCH, S.RESETTING),
        (S.RESETTING, E.ERROR, S.RECOVERING),
        (S.RESETTING, E.SHUTDOWN, S.CLOSING),
        (S.RUNNING, E.RESET, S.RESETTING),
        (S.RUNNING, E.STEP, S.STEPPING),
        (S.RUNNING, E.ERROR, S.RECOVERING),
        (S.RUNNING, E.SHUTDOWN, S.CLOSING),
        (S.STEPPING, E.STEP_DONE, S.RUNNING),
        (S.STEPPING, E.EPISODE_DONE, S.DONE),
        (S.STEPPING, E.ERROR, S.RECOVERING),
        (S.STEPPING, E.ABORT, S.RUNNING),
        (S.STEPPING, E.SHUTDOWN, S.CLOSING),
        (S.DONE, E.RESET, S.RESETTING),
        (S.DONE, E.SHUTDOWN, S.CLOSING),
        (S.RECOVERING, E.RECOVERED, S.RUNNING),
        (S.RECOVERING, E.ERROR, S.RECOVERING),
        (S.RECOVERING, E.SHUTDOWN, S.CLOSING),
        (S.CLOSING, E.SHUTDOWN, S.CLOSING),
    },
}

ALL = [
    (mode, state, event)
    for mode, state, event in itertools.product(sorted(TABLES), State, Event)
]


def test_tables_hold_exactly_the_expected_moves() -> None:
    for mode, table in (("realtime", REALTIME_TABLE), ("lockstep", LOCKSTEP_TABLE)):
        moves = {(s, e, t) for s, row in table.items() for e, t in row.items()}
        assert moves == EXPECTED[mode]


@pytest.mark.parametrize(("mode", "state", "event"), ALL)
def test_every_transition(mode: str, state: State, event: Event) -> None:
    machine = RemoteState(mode, state)
    legal = {(s, e): t for s, e, t in EXPECTED[mode]}
    if (state, event) in legal:
        assert machine.allows(event)
        assert machine.fire(event) is legal[state, event]
        assert machine.state is legal[state, event]
    else:
        assert not machine.allows(event)
        with pytest.raises(IllegalTransition) as caught:
            machine.fire(event)
        assert machine.state is state  # an illegal event changes nothing
        message = str(caught.value)
        assert event.value in message and state.value in message and mode in message


def test_illegal_events_say_what_to_do() -> None:
    with pytest.raises(IllegalTransition, match="reset with mode 'lockstep'"):
        RemoteState("realtime", S.RUNNING).fire(E.STEP)
    with pytest.raises(IllegalTransition, match="episode is done; send v0.env.reset"):
        RemoteState("lockstep", S.DONE).fire(E.STEP)
    with pytest.raises(IllegalTransition, match="wait for describe env_state 'running'"):
        RemoteState("lockstep", S.RECOVERING).fire(E.STEP)


def test_mode_switches_only_while_resetting() -> None:
    machine = RemoteState("realtime", S.RUNNING)
    with pytest.raises(IllegalTransition):
        machine.switch_mode("lockstep")
    assert machine.mode == "realtime"
    machine.fire(E.RESET)
    machine.switch_mode("lockstep")
    assert (machine.mode, machine.state) == ("lockstep", S.RESETTING)
    machine.fire(E.RESET_DONE)
    assert machine.fire(E.STEP) is S.STEPPING  # the lockstep table now applies
    with pytest.raises(ValueError, match="mode must be one of"):
        RemoteState("turbo")


def test_universe_clients_see_only_resetting_and_running() -> None:
    assert {state.wire for state in State} == {"resetting", "running"}
    assert [s for s in State if s.wire == "running"] == [S.RUNNING, S.STEPPING, S.DONE]


def test_a_lockstep_episode_end_to_end() -> None:
    machine = RemoteState("lockstep")
    path = [E.RESET, E.RESET_DONE, E.STEP, E.STEP_DONE, E.STEP, E.EPISODE_DONE, E.RESET,
            E.RESET_DONE, E.STEP, E.ERROR, E.ERROR, E.RECOVERED, E.SHUTDOWN]
    states = [machine.fire(event) for event in path]
    assert states == [S.RESETTING, S.RUNNING, S.STEPPING, S.RUNNING, S.STEPPING, S.DONE,
                      S.RESETTING, S.RUNNING, S.STEPPING, S.RECOVERING, S.RECOVERING,
                      S.RUNNING, S.CLOSING]


#: Every (mode, state) a remote can be in: starting, and each state its table enters.
REACHABLE = [
    (mode, state) for mode, table in sorted(TABLES.items()) for state in State
    if state is S.STARTING or any(state in row.values() for row in table.values())
]


@pytest.mark.parametrize(("mode", "state"), REACHABLE)
@pytest.mark.parametrize("changed", [True, False])
def test_the_error_exit_takes_every_state_under_way_out(
    mode: str, state: State, changed: bool
) -> None:
    """h11's process_error: whatever raised between an event and its completion, the
    machine leaves the state under way, to recovering, or back to running if a step had
    changed nothing yet; it never raises."""
    machine = RemoteState(mode, state)
    after = machine.process_error(changed)
    assert after is machine.state
    if state is S.CLOSING:
        assert after is S.CLOSING
    elif state is S.STEPPING and not changed:
        assert after is S.RUNNING  # ABORT: nothing changed
    elif state in UNDER_WAY or state in (S.RUNNING, S.RECOVERING):
        assert after is S.RECOVERING
    assert after not in UNDER_WAY


@pytest.mark.parametrize("mode", sorted(TABLES))
def test_no_state_is_one_that_no_event_leaves(mode: str) -> None:
    """Every state a table can enter, but closing, has an event that leads elsewhere, and
    every state under way has the error exit."""
    table = TABLES[mode]
    entered = {target for row in table.values() for target in row.values()}
    for state in entered - {S.CLOSING}:
        assert any(target is not state for target in table[state].values()), state
    for state in UNDER_WAY & entered:
        assert table[state][E.ERROR] is S.RECOVERING
