"""The browser runtime is a composition (docs/design.md, "Browser and desktop runtimes"):
``MiniWoBRuntime`` is a ``DisplayRuntime`` holding its parts — ``BrowserHost``,
``TaskEpisodes``, ``PageAgents``, ``Snapshots`` — each a plain class and the only writer
of its private fields. Read from the source with :mod:`ast`: nothing is imported, so
this runs without the browser extra.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
MODULES: Final = sorted((ROOT / "runtimes").glob("browser*.py"))
#: The parts and where each lives: plain classes, composed, not inherited.
PARTS: Final = {"BrowserHost": "browser_host", "TaskEpisodes": "browser_episodes",
                "PageAgents": "browser_agents", "Snapshots": "browser_snapshots"}
#: Private names of another object of the same class, where an env switch hands the
#: browser over: the old runtime's poller stopped, the old host's fields moved.
SAME_CLASS: Final = {("MiniWoBRuntime", "old"), ("BrowserHost", "old")}


def classes(path: Path) -> dict[str, ast.ClassDef]:
    tree = ast.parse(path.read_text(), str(path))
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def reach_ins(path: Path, source: str | None = None) -> list[str]:
    """``x._name`` in ``path``'s source (or ``source``) where ``x`` is not ``self``,
    ``cls`` or ``super()`` nor, in :data:`SAME_CLASS`, another of the class's own objects."""
    tree = ast.parse(source if source is not None else path.read_text(), str(path))
    found = []

    def visit(node: ast.AST, owner: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child.name)
                continue
            if (isinstance(child, ast.Attribute) and child.attr.startswith("_")
                    and not child.attr.startswith("__") and child.attr != "_replace"):
                value = child.value
                name = value.id if isinstance(value, ast.Name) else ast.unparse(value)
                if name not in ("self", "cls", "super()") and (owner, name) not in SAME_CLASS:
                    found.append(f"{path.stem}:{child.lineno}: {ast.unparse(child)}")
            visit(child, owner)

    visit(tree, None)
    return found


def test_the_runtime_is_a_display_runtime_that_holds_its_parts() -> None:
    root = classes(ROOT / "runtimes" / "browser.py")["MiniWoBRuntime"]
    assert [ast.unparse(base) for base in root.bases] == ["DisplayRuntime"]
    init = next(f for f in root.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    made = {ast.unparse(node.func) for node in ast.walk(init) if isinstance(node, ast.Call)}
    assert set(PARTS) <= made, made
    for part, module in PARTS.items():
        assert classes(ROOT / "runtimes" / f"{module}.py")[part].bases == [], part


def test_no_browser_module_reaches_into_anothers_private_fields() -> None:
    assert len(MODULES) >= 5, MODULES
    assert [line for path in MODULES for line in reach_ins(path)] == []


def test_the_check_sees_a_private_field_written_from_outside() -> None:
    """What ``browser_snapshots.restore`` did before the parts (``runtime._text = ...``)."""
    path = ROOT / "runtimes" / "browser_snapshots.py"
    text = "async def restore(runtime, data):\n    runtime._text = None\n    old._profile\n"
    assert reach_ins(path, text) == ["browser_snapshots:2: runtime._text",
                                     "browser_snapshots:3: old._profile"]
