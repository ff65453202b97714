"""Which of the project's modules import which, read from the source with :mod:`ast`
(nothing is imported), and the circles in that graph: what ``tests/envserver/test_imports.py``
and ``tests/test_imports_flow.py`` check.

An import counts wherever it is: at the top, inside a function (a circle through a lazy
import is still a circle of design) and, unless asked otherwise, under ``if
TYPE_CHECKING:`` (a type named across a circle is still an arrow back). ``from . import x``
is an import of module ``x`` when there is one, else of the package's ``__init__``.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(packages: Iterable[str]) -> dict[str, Path]:
    """Every module of ``packages`` (top-level package names), by dotted name."""
    return {_name(p): p for package in packages for p in sorted((ROOT / package).rglob("*.py"))}


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST, type_checking: bool) -> Iterator[ast.AST]:
    """Every node, and those under ``if TYPE_CHECKING:`` only with ``type_checking``."""
    for child in ast.iter_child_nodes(tree):
        if not type_checking and _type_checking(child):
            assert isinstance(child, ast.If)
            for other in child.orelse:
                yield other
                yield from _nodes(other, type_checking)
            continue
        yield child
        yield from _nodes(child, type_checking)


class Graph:
    """The imports among ``known`` modules (see :func:`modules`)."""

    def __init__(self, known: Mapping[str, Path], *, type_checking: bool = True) -> None:
        self.known, self.type_checking = known, type_checking

    def _module_of(self, dotted: str) -> str | None:
        """The known module ``dotted`` names (or an attribute of), if any."""
        while dotted:
            if dotted in self.known:
                return dotted
            dotted = dotted.rpartition(".")[0]
        return None

    def _source(self, module: str, node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module or ""
        base = module.split(".")
        if self.known[module].name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - node.level + 1]
        return ".".join([*base, *([node.module] if node.module else [])])

    def imports(self, module: str, text: str | None = None) -> tuple[set[str], list[str]]:
        """The known modules ``module`` imports (its source, or ``text``), and its uses of
        their private names (``from m import _x``, ``m._x``)."""
        imported: set[str] = set()
        private: list[str] = []
        aliases: dict[str, str] = {}
        tree = ast.parse(self.known[module].read_text() if text is None else text)
        for node in _nodes(tree, self.type_checking):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if (found := self._module_of(alias.name)) is not None:
                        imported.add(found)
                        aliases[alias.asname or alias.name] = found
            elif isinstance(node, ast.ImportFrom):
                source = self._source(module, node)
                for alias in node.names:
                    found = self._module_of(f"{source}.{alias.name}") or self._module_of(source)
                    if found is None:
                        continue
                    imported.add(found)
                    if f"{source}.{alias.name}" in self.known:
                        aliases[alias.asname or alias.name] = found
                    elif alias.name.startswith("_"):
                        private.append(
                            f"{module}:{node.lineno}: from {source} import {alias.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                    and node.value.id in aliases):
                private.append(f"{module}:{node.lineno}: {node.value.id}.{node.attr}")
        imported.discard(module)
        return imported, private

    @functools.cached_property
    def edges(self) -> dict[str, set[str]]:
        """Each known module and the known modules it imports (read once)."""
        return {module: self.imports(module)[0] for module in self.known}


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

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
                found.append(sorted([*group, module]))

    for module in graph:
        if module not in index:
            visit(module)
    return sorted(found)
