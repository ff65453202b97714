"""envserver's modules import each other without a circle (imports under ``if
TYPE_CHECKING:`` aside; those inside functions count, since a circle through one is still
a circle of design), and no module imports another's private names (``_name``) or reaches
for them as ``module._name``. Read from the source with :mod:`ast`: nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

import envserver

PACKAGE: Final = Path(envserver.__file__).parent
ROOT: Final = PACKAGE.parent


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: Final = {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _module_of(dotted: str) -> str | None:
    """The envserver module ``dotted`` names (or an attribute of), if any."""
    while dotted:
        if dotted in MODULES:
            return dotted
        dotted = dotted.rpartition(".")[0]
    return None


def _source(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if MODULES[module].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(tree):
        if _type_checking(child):
            assert isinstance(child, ast.If)
            for other in child.orelse:
                yield other
                yield from _nodes(other)
            continue
        yield child
        yield from _nodes(child)


def _imports(module: str, text: str | None = None) -> tuple[set[str], list[str]]:
    """The envserver modules ``module`` imports (its source, or ``text``), and its uses of
    their private names."""
    imported: set[str] = set()
    private: list[str] = []
    aliases: dict[str, str] = {}
    tree = ast.parse(MODULES[module].read_text() if text is None else text)
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (found := _module_of(alias.name)) is not None:
                    imported.add(found)
                    aliases[alias.asname or alias.name] = found
        elif isinstance(node, ast.ImportFrom):
            source = _source(module, node)
            for alias in node.names:
                found = _module_of(f"{source}.{alias.name}") or _module_of(source)
                if found is None:
                    continue
                imported.add(found)
                if f"{source}.{alias.name}" in MODULES:
                    aliases[alias.asname or alias.name] = found
                elif alias.name.startswith("_"):
                    private.append(f"{module}:{node.lineno}: from {source} import {alias.name}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                and node.value.id in aliases):
            private.append(f"{module}:{node.lineno}: {node.value.id}.{node.attr}")
    imported.discard(module)
    return imported, private


def _circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while (top := stack.pop()) != module:
                group.append(top)
            if group:
                circles.append(sorted([*group, module]))

    for module in graph:
        if module not in index:
            visit(module)
    return circles


def test_envserver_modules_import_each_other_without_a_circle() -> None:
    graph = {module: _imports(module)[0] for module in MODULES}
    assert len(graph) > 30 and "envserver.episodes" in graph["envserver.remote"]
    # (a package's __init__ names its modules in words; one that imported them would be
    # a circle with each module that imports the package)
    assert _circles(graph) == []


def test_no_envserver_module_uses_anothers_private_names() -> None:
    assert [line for module in MODULES for line in _imports(module)[1]] == []


def test_the_checks_see_a_circle_and_a_private_name() -> None:
    """The two checks on a made-up graph and a made-up module."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    text = ("from .episodes import _x\nfrom . import remote as r\nr._y\n"
            "if TYPE_CHECKING:\n    from .cli import Z\n")
    imported, private = _imports("envserver.games", text)
    assert imported == {"envserver.episodes", "envserver.remote"}
    assert private == ["envserver.games:1: from envserver.episodes import _x",
                       "envserver.games:3: r._y"]
