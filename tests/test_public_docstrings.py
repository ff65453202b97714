"""The public API explains itself as gymnasium's does: every public callable that takes
arguments says what each is in an ``Args:`` section, and every one that returns something
says what in ``Returns:`` (``Yields:`` for a generator).

Public means what users import: each package's ``__all__`` (resolved lazily, as the
packages do), the modules below that users import by path, and the public methods of
each class among them, down the class's bases that are ours. Read with :mod:`inspect`;
nothing is called. A name whose optional extra is not installed skips, naming the extra.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from tests.optional import need_extra

#: The modules whose ``__all__`` is the public face, and the extra each needs (None: none).
PUBLIC: Final[dict[str, str | None]] = {
    "remotes": None,
    "remotes.pool": None,
    "remotes.parallel": "multiagent",
    "remotes.play": None,
    "rewarder": None,
    "runtimes": None,
    "vncdriver": None,
    "recordings": None,
    "universe_remote.evaluate": None,
}
#: Where the project's own code lives: bases outside it (gymnasium's Env, Exception) are
#: documented by their owners.
ROOT: Final = Path(__file__).resolve().parent.parent
#: A section header as Google style (and gymnasium) writes it, alone on its line.
_SECTION: Final = re.compile(r"^\s*(Args|Returns|Yields|Raises):\s*$", re.MULTILINE)
#: An ``Args:`` section: the indented lines after its header.
_ARGS: Final = re.compile(r"^\s*Args:\s*\n((?:[ \t]+\S.*\n?|[ \t]*\n)*)", re.MULTILINE)
#: One argument in it, at the section's first indent: ``name:`` or ``**name:``.
_ARG: Final = re.compile(r"^ {4}\**(\w+)\s*(?:\([^)]*\))?:", re.MULTILINE)
#: Return annotations that mean "nothing is returned".
_NOTHING: Final = frozenset({"None", "NoReturn", "Never", "typing.NoReturn"})


def _ours(obj: Any) -> bool:
    """Whether ``obj`` was written in this repository: not a library's, nor generated (a
    dataclass's ``__init__``, whose fields say what they are in ``#:`` comments)."""
    code = getattr(inspect.unwrap(obj), "__code__", None)
    if code is not None:
        source = code.co_filename
    else:
        try:
            source = inspect.getsourcefile(obj) or ""
        except TypeError:
            return False
    path = Path(source).resolve()
    # The venv may live inside the checkout (make's .venv): a library there is not ours.
    return path.is_file() and path.is_relative_to(ROOT) and "site-packages" not in path.parts


def _callables(module: Any) -> Iterator[tuple[str, Callable[..., Any]]]:
    """Each public function, each class's written ``__init__`` and each public method of a
    class or of its bases that are ours, as (dotted name, callable)."""
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj):
            yield from _members(name, obj)
        elif inspect.isroutine(obj) and _ours(obj):
            yield name, obj


def _members(name: str, cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    init = cls.__dict__.get("__init__")
    if init is not None and _ours(init):
        yield f"{name}.__init__", init
    seen: set[str] = set()
    for base in cls.__mro__:
        if not _ours(base):
            continue
        for attr, value in vars(base).items():
            if attr.startswith("_") or attr in seen:
                continue
            seen.add(attr)
            func = value.__func__ if isinstance(value, staticmethod | classmethod) else value
            if inspect.isfunction(func) and _ours(func) and not attr.startswith("test"):
                yield f"{name}.{attr}", getattr(cls, attr)


def _parameters(func: Callable[..., Any]) -> list[str]:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    return [p for p in signature.parameters if p not in ("self", "cls")]


def _returns(func: Callable[..., Any]) -> bool:
    """Whether ``func`` is annotated as returning something (``__init__`` never does)."""
    if func.__name__ == "__init__":
        return False
    annotation = inspect.signature(func).return_annotation
    if annotation is inspect.Signature.empty:
        return False
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return text not in _NOTHING


def _sections(doc: str | None) -> set[str]:
    return set(_SECTION.findall(doc or ""))


def _listed(doc: str) -> set[str]:
    """The argument names the ``Args:`` sections of ``doc`` describe."""
    return {name for section in _ARGS.findall(doc) for name in _ARG.findall(section)}


def missing_sections(module: Any) -> list[str]:
    """``name: section`` for each section a public callable of ``module`` lacks."""
    missing = []
    for name, func in _callables(module):
        # A class's constructor may say its arguments in the class docstring instead.
        doc = inspect.getdoc(func)
        if name.endswith(".__init__"):
            doc = (doc or "") + "\n" + (inspect.getdoc(getattr(module, name.split(".")[0])) or "")
        sections = _sections(doc)
        parameters = _parameters(func)
        if parameters and "Args" not in sections:
            missing.append(f"{name}: Args")
        elif unlisted := [p for p in parameters if p not in _listed(doc or "")]:
            missing.append(f"{name}: Args of {', '.join(unlisted)}")
        if _returns(func) and not sections & {"Returns", "Yields"}:
            missing.append(f"{name}: Returns")
    return missing


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_every_public_callable_says_its_args_and_returns(package: str) -> None:
    if (extra := PUBLIC[package]) is not None:
        need_extra(extra)
    missing = missing_sections(importlib.import_module(package))
    assert not missing, f"{package}: public callables without their docstring sections:\n" + "\n".join(
        missing
    )


def test_the_check_sees_a_missing_section() -> None:
    """The walk itself: a function with a parameter and no ``Args:`` is named, and one
    whose ``Args:`` leaves a parameter out; one with both sections whole is not."""

    def bare(x: int) -> int:
        """Doubles."""
        return 2 * x

    def told(x: int, *, times: int = 2) -> int:
        """Multiplies.

        Args:
            x: what to multiply.
            times: by what.

        Returns:
            ``x`` times ``times``.
        """
        return times * x

    def half_told(x: int, times: int = 2) -> int:
        """Multiplies.

        Args:
            x: what to multiply.

        Returns:
            The product.
        """
        return times * x

    names = {"__all__": ["bare", "told", "half_told"], "bare": staticmethod(bare),
             "told": staticmethod(told), "half_told": staticmethod(half_told)}
    module = type("M", (), names)
    assert missing_sections(module) == ["bare: Args", "bare: Returns", "half_told: Args of times"]
