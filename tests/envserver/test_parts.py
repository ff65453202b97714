"""The remote is a composition of parts that own their state (docs/design.md): each field
is written by one class, and no part writes a field of the game core it holds (it asks
the core to: ``fire``, ``begin_episode``, ``branch``). Read from the source with
:mod:`ast`: a field written by two classes of one object — a base and its subclass, or a
part through the core it holds — is one no reader can own.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections import defaultdict
from typing import Final

from envserver.acting import Acting
from envserver.game_core import GameCore
from envserver.recovery import Recovery
from envserver.remote import Remote
from envserver.restores import Restores
from rewarder.server import RewarderServer
from rewarder.server_admission import Admission

PARTS: Final = (Recovery, Restores, Acting)


def _writes(cls: type) -> list[tuple[ast.expr, str]]:
    """Every attribute ``cls``'s own source assigns (``x.y = ...``, ``x.y += ...``): the
    object written to and the field."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                targets.extend(target.elts if isinstance(target, ast.Tuple) else [target])
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets.append(node.target)
        found += [(t.value, t.attr) for t in targets if isinstance(t, ast.Attribute)]
    return found


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _is_core(node: ast.expr) -> bool:
    """``core`` or ``self.core``: the game core a part holds."""
    return (isinstance(node, ast.Name) and node.id == "core") or (
        isinstance(node, ast.Attribute) and node.attr == "core" and _is_self(node.value))


def test_each_field_of_a_remotes_objects_is_written_by_one_class() -> None:
    for root in (Remote, GameCore, *PARTS):
        writers: dict[str, set[str]] = defaultdict(set)
        for cls in root.__mro__[:-1]:  # (object aside)
            for target, field in _writes(cls):
                if _is_self(target):
                    writers[field].add(cls.__name__)
        shared = {field: sorted(names) for field, names in writers.items() if len(names) > 1}
        assert shared == {}, f"fields of {root.__name__} written by more than one class"
        assert writers, root  # (the check sees the fields)


def test_no_part_writes_a_field_of_the_core_it_holds() -> None:
    for part in (Remote, *PARTS):
        written = [field for target, field in _writes(part) if _is_core(target)]
        assert written == [], f"{part.__name__} writes the core's {written}"


def test_the_check_sees_a_field_written_through_the_core() -> None:
    class Part:
        def __init__(self, core: GameCore) -> None:
            self.core = core

        def restore(self) -> None:
            self.core.episode_id += 1

    assert [(ast.unparse(t), f) for t, f in _writes(Part)] == [
        ("self", "core"), ("self.core", "episode_id")]
    assert _is_core(_writes(Part)[1][0])


def _reads_of_self(cls: type) -> set[str]:
    """The attributes ``cls``'s own source reads or calls on ``self``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and _is_self(node.value) and isinstance(node.ctx, ast.Load)}


def test_each_part_reads_only_what_it_owns() -> None:
    """A part reads its own fields and methods (what it uses of others it holds, as
    ``self.core`` or callables it was given): a field it reads but no code of its own
    writes is one it was assembled with, by inheritance. The rewarder port's admission
    is such a part of its server (rewarder/server_admission.py)."""
    for part in (*PARTS, Admission):
        owned = {field for target, field in _writes(part) if _is_self(target)}
        owned |= set(vars(part))
        assert _reads_of_self(part) - owned == set(), f"{part.__name__} reads fields it does not own"
    assert RewarderServer.__mro__ == (RewarderServer, object), "the server holds its parts"
    assert {"clients", "seated", "viewer_port"} <= {f for t, f in _writes(Admission) if _is_self(t)}
