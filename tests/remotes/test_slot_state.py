"""The agent's slot lifecycle (``remotes/slot_state.py``): every transition of its table,
an illegal event refused with an error naming the slot, its phase and the event, and —
read from the source with :mod:`ast`, nothing imported — no module but the table's
assigns a slot's ``phase`` (the others fire events)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from remotes.slot_state import SLOT_TABLE, IllegalSlotTransition, Phase, SlotEvent, fire
from tests.import_graph import ROOT, modules

#: Every transition, written out: the table must hold exactly these.
TRANSITIONS: Final = {
    **{(phase, SlotEvent.CONNECT): Phase.RUNNING for phase in Phase},
    **{(phase, SlotEvent.RESET): Phase.RUNNING for phase in Phase},
    **{(phase, SlotEvent.LOST): Phase.AWAY for phase in Phase},
    (Phase.RUNNING, SlotEvent.EPISODE_END): Phase.ENDED,
    (Phase.RUNNING, SlotEvent.NEED_RESET): Phase.NEEDS_RESET,
    (Phase.AWAY, SlotEvent.BACK): Phase.RUNNING,
}

#: Packages whose modules hold or step slots (envserver has a machine of its own).
PACKAGES: Final = ("remotes", "universe_remote", "benchmarks")
TABLE_MODULE: Final = "remotes.slot_state"


@dataclass
class _Slot:
    index: int = 3
    phase: Phase = Phase.RUNNING


@pytest.mark.parametrize(("start", "event"), sorted(TRANSITIONS, key=str))
def test_each_listed_transition(start: Phase, event: SlotEvent) -> None:
    slot = _Slot(phase=start)
    assert fire(slot, event) is TRANSITIONS[start, event]
    assert slot.phase is TRANSITIONS[start, event]


def test_the_table_holds_exactly_the_listed_transitions() -> None:
    table = {(p, e): to for p, moves in SLOT_TABLE.items() for e, to in moves.items()}
    assert table == TRANSITIONS


def test_the_error_exit_leaves_every_phase() -> None:
    for phase in Phase:
        assert SLOT_TABLE[phase][SlotEvent.LOST] is Phase.AWAY


def test_an_illegal_event_is_refused_and_the_phase_kept() -> None:
    illegal = [(p, e) for p in Phase for e in SlotEvent if (p, e) not in TRANSITIONS]
    assert (Phase.ENDED, SlotEvent.EPISODE_END) in illegal
    for phase, event in illegal:
        slot = _Slot(phase=phase)
        with pytest.raises(IllegalSlotTransition) as caught:
            fire(slot, event)
        assert slot.phase is phase
        assert (caught.value.index, caught.value.phase, caught.value.event) == (3, phase, event)
    slot = _Slot(phase=Phase.AWAY)
    with pytest.raises(IllegalSlotTransition, match=r"slot 3: episode end is not possible "
                       r"while its remote is away \(allowed there: .*back"):
        fire(slot, SlotEvent.EPISODE_END)


def phase_writers(text: str) -> list[int]:
    """The lines of ``text`` that assign an attribute ``phase`` (``x.phase = ...``, in
    a chain, a tuple, annotated, augmented, or by ``setattr(x, "phase", ...)``)."""
    lines = []
    for node in ast.walk(ast.parse(text)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                node.func.id == "setattr" and len(node.args) >= 2):
            name = node.args[1]
            if isinstance(name, ast.Constant) and name.value == "phase":
                lines.append(node.lineno)
        while targets:
            target = targets.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                targets.extend(target.elts)
            elif isinstance(target, ast.Starred):
                targets.append(target.value)
            elif isinstance(target, ast.Attribute) and target.attr == "phase":
                lines.append(target.lineno)
    return lines


def test_only_the_table_module_assigns_a_slots_phase() -> None:
    found = {name: phase_writers(path.read_text()) for name, path in modules(PACKAGES).items()}
    assert len(found) > 50 and "remotes.lockstep" in found
    assert found.pop(TABLE_MODULE), "the table's module writes the phase (fire)"
    offenders = {
        str(Path(modules(PACKAGES)[name]).relative_to(ROOT)): lines
        for name, lines in found.items() if lines
    }
    assert offenders == {}, "fire a remotes.slot_state.SlotEvent instead of assigning .phase"


@pytest.mark.parametrize("text", [
    "slot.phase = Phase.AWAY\n",
    "a, self.slots[0].phase = 1, Phase.ENDED\n",
    "x = slot.phase = Phase.AWAY\n",
    "slot.phase: Phase = Phase.AWAY\n",
    "setattr(slot, 'phase', Phase.AWAY)\n",
])
def test_the_check_sees_each_way_of_assigning(text: str) -> None:
    assert phase_writers(text) == [1]
    assert phase_writers("if slot.phase is Phase.AWAY:\n    phase = slot.phase\n") == []
