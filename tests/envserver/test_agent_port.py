"""The agent ports' shared adapter (sans-I/O), and the game's boundary with the rewarder."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from envserver.agent_port import MAX_PENDING_EPISODES, Held, Ledger

ENVSERVER = Path(__file__).resolve().parents[2] / "envserver"
#: The game and the agent ports: they speak envserver.orders, never the rewarder's wire
#: (remote.py, the composition root, builds the rewarder's server, and so imports it).
GAME_MODULES = (
    "game_core.py", "recovery.py", "restores.py", "acting.py", "players.py",
    "inputs.py", "lockstep_frames.py", "runtime_choice.py", "orders.py", "agent_port.py",
    "dmrpc/world.py", "dmrpc/session.py", "dmrpc/specs.py", "openenv/session.py",
    "openenv/schemas.py",
)
#: What only the rewarder's front end (rewarder_front.py) may take from rewarder/.
WIRE_ONLY = ("rewarder.errors", "rewarder.server")


def test_held_keys_change_by_releases_then_presses() -> None:
    held = Held()
    assert held.keys_to({"Left", "Up"}) == [("KeyEvent", "Left", True), ("KeyEvent", "Up", True)]
    assert held.keys_to({"Up", "Right"}) == [("KeyEvent", "Left", False), ("KeyEvent", "Right", True)]
    assert held.keys_to({"Up", "Right"}) == []  # holding is no event
    assert held.keys == {"Up", "Right"}


def test_held_pointer_moves_only_when_it_changes() -> None:
    held = Held()
    assert held.pointer_to(0, 0, 0) == []  # where it starts
    assert held.pointer_to(5, 7, 1) == [("PointerEvent", 5, 7, 1)]
    assert held.pointer_to(5, 7, 1) == []
    assert held.pointer_to(5, 7, 0) == [("PointerEvent", 5, 7, 0)]  # a release is a change


def test_the_ledger_adds_rewards_keeps_the_last_screen_once_and_stays_bounded() -> None:
    ledger = Ledger()
    screens = iter([np.full((2, 2, 3), 1, np.uint8), np.full((2, 2, 3), 2, np.uint8)])
    ledger.heard(1, 0.5, False)
    ledger.heard(1, 1.0, True, lambda: next(screens), {"lives": 2})
    ledger.heard(1, 0.0, True, lambda: next(screens))  # an end told twice keeps the first screen
    seen = ledger.pop(1)
    assert (seen.reward, seen.done, seen.info) == (1.5, True, {"lives": 2})
    assert seen.final_screen is not None and int(seen.final_screen.max()) == 1
    assert ledger.pop(1).reward == 0.0 and not ledger.pop(1).done  # popped: seen
    for episode in range(10, 10 + MAX_PENDING_EPISODES + 3):
        ledger.heard(episode, 1.0, False)
    assert sorted(ledger.episodes) == list(
        range(13, 10 + MAX_PENDING_EPISODES + 3)
    )  # the oldest went first
    ledger.forget_before(15)
    assert min(ledger.episodes) == 15


def _imports(path: Path) -> set[str]:
    """Modules ``path`` imports at run time (``if TYPE_CHECKING:`` blocks left out)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(node) for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_game_and_the_agent_ports_never_reach_into_the_rewarders_wire() -> None:
    """A lockstep step never climbs back into rewarder/ for an error type or the
    requester's player: only the rewarder's front end maps them (issue 33)."""
    offenders = {
        name: sorted(_imports(ENVSERVER / name) & set(WIRE_ONLY)) for name in GAME_MODULES
    }
    assert {name: found for name, found in offenders.items() if found} == {}
    assert set(WIRE_ONLY) <= _imports(ENVSERVER / "rewarder_front.py")
