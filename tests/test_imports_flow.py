"""Types flow one way (docs/design.md, "Imports flow one way"): no import circle among the
modules of rewarder, vncdriver, recordings and runtimes, nor inside envserver or remotes,
counting every import — at the top, inside functions and under ``if TYPE_CHECKING:``. Read
from the source with :mod:`ast` (``tests/import_graph.py``): nothing is imported.

Where two modules need each other's types, one side names a small ``Protocol`` of what it
uses (``vncdriver.server_connection.Host``, ``client_connection.Dialling``,
``rewarder.keeper.Idle``, ``runtimes.builtin_state.CatchGame``, the browser runtime's
``browser_snapshots.Replaying`` and ``browser_agents.Recorder``), or the shared part moves
down into a module both import (``runtimes.builtin_rules``). Above them the same holds:
envserver's front ends, property table and rewarder front name what they use of the
remote (``front_ends.Hosting``, ``agent_port.RemoteLike``, ``properties.Described``,
``rewarder_front.Served``) and ``envserver/remote.py`` checks ``Remote`` against each
under mypy; the remote's parts likewise name what they use of its game core
(``recovery.Recoverable``, ``restores.Branching``, ``acting.Actable``); in remotes,
``holders.Holder`` and ``lane_view.LaneView``.
"""

from __future__ import annotations

from typing import Final

from tests.import_graph import Graph, circles, modules

PACKAGES: Final = ("rewarder", "vncdriver", "recordings", "runtimes")
GRAPH: Final = Graph(modules(PACKAGES))
#: The two packages above, each on its own (they never import each other).
TOP_GRAPHS: Final = {package: Graph(modules([package])) for package in ("envserver", "remotes")}

#: The parts a remote is composed of (``envserver.remote.Remote`` builds them): each holds
#: the game core and names what it uses of it in a protocol of its own.
REMOTE_PARTS: Final = ("envserver.recovery", "envserver.restores", "envserver.acting")
#: The modules that may name ``Remote`` (all above it): the serve path that builds remotes
#: (games), the recorder attached to one, and the batch step over a process's remotes.
ABOVE_THE_REMOTE: Final = frozenset({"envserver.games", "envserver.recorder", "envserver.batch"})


def test_the_bottom_packages_import_each_other_without_a_circle() -> None:
    graph = GRAPH.edges
    assert len(graph) > 80, sorted(graph)
    assert "vncdriver.server_connection" in graph["vncdriver.server"]
    assert "runtimes.builtin_state" in graph["runtimes.builtin"]
    assert "runtimes.browser_agents" in graph["runtimes.browser_snapshots"]
    assert circles(graph) == [], "import circles (type-only and function-level imports count)"


def test_the_check_sees_type_only_and_function_level_imports() -> None:
    """A made-up ``vncdriver.server_connection`` that imports its server only for a type
    annotation, and one that imports it inside a function: each closes a circle."""
    for text in ("if TYPE_CHECKING:\n    from .server import VNCServer\n",
                 "def f():\n    from . import server\n"):
        imported = GRAPH.imports("vncdriver.server_connection", text)[0]
        assert imported == {"vncdriver.server"}
        graph = {**GRAPH.edges, "vncdriver.server_connection": imported}
        pair = {"vncdriver.server", "vncdriver.server_connection"}
        assert any(pair <= set(circle) for circle in circles(graph))


def test_envserver_and_remotes_import_their_own_modules_without_a_circle() -> None:
    """Type-only imports count too: a front end that names ``Remote`` for an annotation
    is an arrow back up to the module that starts it."""
    envserver, remotes = TOP_GRAPHS["envserver"].edges, TOP_GRAPHS["remotes"].edges
    assert len(envserver) > 30 and "envserver.front_ends" in envserver["envserver.remote"]
    assert len(remotes) > 30 and "remotes.lane" in remotes["remotes.stepper"]
    assert circles(envserver) == [], "envserver import circles (type-only imports count)"
    assert circles(remotes) == [], "remotes import circles (type-only imports count)"


def test_the_check_sees_a_type_only_arrow_back_to_the_remote() -> None:
    """A made-up ``envserver.front_ends`` that names ``Remote`` only under ``if
    TYPE_CHECKING:`` closes a circle with the remote that starts it."""
    graph = TOP_GRAPHS["envserver"]
    text = "if TYPE_CHECKING:\n    from .remote import Remote\n"
    imported = graph.imports("envserver.front_ends", text)[0]
    assert imported == {"envserver.remote"}
    edges = {**graph.edges, "envserver.front_ends": imported}
    assert any({"envserver.front_ends", "envserver.remote"} <= set(c) for c in circles(edges))


def test_the_remotes_parts_and_front_ends_never_name_the_remote() -> None:
    """Type-only imports count: the parts and the front ends depend on small protocols
    (``Game``, ``Recoverable``, ``RemoteLike``...), never on ``Remote``; the parts never
    on the core's module or on each other."""
    edges = TOP_GRAPHS["envserver"].edges
    assert "envserver.game_core" in edges["envserver.remote"]
    naming = {module for module, imported in edges.items() if "envserver.remote" in imported}
    assert naming <= ABOVE_THE_REMOTE, sorted(naming - ABOVE_THE_REMOTE)
    for part in REMOTE_PARTS:
        reached = edges[part] & {"envserver.game_core", *REMOTE_PARTS}
        assert reached == set(), f"{part} imports {sorted(reached)}"
    assert {module for module, imported in edges.items()
            if "envserver.game_core" in imported} == {"envserver.remote"}
