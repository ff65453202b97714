"""envserver's modules import each other without a circle (imports under ``if
TYPE_CHECKING:`` aside; those inside functions count, since a circle through one is still
a circle of design), and no module imports another's private names (``_name``) or reaches
for them as ``module._name``. Read from the source with :mod:`ast` (``tests/import_graph.py``):
nothing is imported. ``tests/test_imports_flow.py`` holds envserver (and remotes, and the
packages below) to the stricter rule, type-only imports counted.
"""

from __future__ import annotations

from typing import Final

from tests.import_graph import Graph, circles, modules

GRAPH: Final = Graph(modules(["envserver"]), type_checking=False)


def test_envserver_modules_import_each_other_without_a_circle() -> None:
    graph = GRAPH.edges
    assert len(graph) > 30 and "envserver.game_core" in graph["envserver.remote"]
    # (a package's __init__ names its modules in words; one that imported them would be
    # a circle with each module that imports the package)
    assert circles(graph) == []


def test_no_envserver_module_uses_anothers_private_names() -> None:
    assert [line for module in GRAPH.known for line in GRAPH.imports(module)[1]] == []


def test_the_checks_see_a_circle_and_a_private_name() -> None:
    """The two checks on a made-up graph and a made-up module."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    text = ("from .game_core import _x\nfrom . import remote as r\nr._y\n"
            "if TYPE_CHECKING:\n    from .cli import Z\n")
    imported, private = GRAPH.imports("envserver.games", text)
    assert imported == {"envserver.game_core", "envserver.remote"}
    assert private == ["envserver.games:1: from envserver.game_core import _x",
                       "envserver.games:3: r._y"]
