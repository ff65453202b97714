"""Which environment ids exist and how to build their runtimes.

Holds :func:`env_ids`, :func:`lookup` and :func:`make` (what a remote serves: each
family's runtime module, imported on first use, so a built-in remote never imports
ale-py or looks for a browser), :func:`catalogue` (the ids, found without importing
any family's runtime module: what the agent side registers with gymnasium at
``import remotes``, and what ``universe-remote list`` prints) and :func:`unknown`, the
one error for an id nobody knows: every place that refuses an id (``serve``,
``start_local``, ``start_ray``, ``gymnasium.make``'s ``env_id=``, an env's ``env_id=``)
counts the catalogue, as ``list`` prints it, and names the package a family lacks.

The catalogue reads what the optional packages ship as files: ale-py's ROMs and the
``miniwob`` wheel's task pages, neither package imported, and no program (Xvnc,
Chromium, the X programs) looked for: those are the remote's business, which may run
elsewhere. Its naming rules repeat the families' (``runtimes.atari.env_id_for``,
``runtimes.browser.env_id_for``, ``runtimes.x11.PROGRAMS``), which import what they
run; ``tests/runtimes/test_registry.py`` keeps the two equal.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from . import known_names
from .base import Runtime
from .errors import UnknownEnvironment

#: family -> module whose ``RUNTIMES`` maps env ids to runtime classes.
FAMILIES: dict[str, str] = {
    "builtin": "runtimes.builtin",
    "atari": "runtimes.atari",
    "miniwob": "runtimes.browser",
    "x11": "runtimes.x11",
}
#: family -> how to install what it needs, for families with optional dependencies.
EXTRAS: dict[str, str] = {
    "atari": "pip install 'universe-remote[atari]'",
    "miniwob": "pip install 'universe-remote[browser]' and "
    "apt-get install tigervnc-standalone-server chromium",
    "x11": "apt-get install tigervnc-standalone-server tigervnc-tools "
    "(and x11-apps or xterm for the programs)",
}

#: family -> the Python package it needs, for families that need one.
PACKAGES: Final = {"atari": "ale_py", "miniwob": "miniwob"}
#: What installs the programs every family runs, from a checkout of universe-remote.
SYSTEM_SCRIPT: Final = "scripts/install-system-packages"

_loaded: dict[str, dict[str, Callable[..., Runtime]]] = {}
#: family -> why it could not be loaded (its optional dependency is missing).
missing: dict[str, str] = {}


def _install_hint(family: str, why: str) -> str:
    """How to install what a family lacks, then what it lacks (one wording for every
    message: what to do comes first)."""
    return f"install it first: {EXTRAS.get(family, 'pip install ' + PACKAGES.get(family, family))} ({why})"


def _program_hint(program: str, package: str, detail: str) -> str:
    """How to install a program a family runs, then why it is needed: a family whose
    Python package is here lacks only the program (no ``pip install`` to send anyone to)."""
    return (f"install {program} first: apt-get install {package} (or, in a checkout of "
            f"universe-remote, {SYSTEM_SCRIPT}, which installs every program the remotes run); "
            f"{program} is not installed ({detail})")


def missing_hint(env_id: str) -> str | None:
    """How to install what ``env_id``'s family lacks here, and what it lacks, if it lacks
    something (its package, found without importing it; or, once its module was tried, a
    program), else None."""
    family = env_id.split(".", 1)[0]
    if family in missing:
        return missing[family]
    package = PACKAGES.get(family)
    if package is not None and _package_dir(package) is None:
        return _install_hint(family, f"No module named {package!r}")
    if family in FAMILIES and env_id in catalogue() and env_id not in _family(family):
        return missing.get(family) or _install_hint(
            family, f"{env_id} is listed, but its program is not on this machine")
    return None


def unknown(env_id: str, served: Iterable[str] = ()) -> UnknownEnvironment:
    """The error for an id neither this install's :func:`catalogue` nor ``served`` (ids
    remotes serve now) has: the closest ids, the count ``universe-remote list`` prints,
    and the install hint when its family is missing here."""
    return UnknownEnvironment(env_id, sorted(set(catalogue()) | set(served)), missing_hint(env_id))


def check(env_id: str, served: Iterable[str] = (), here: bool = False) -> None:
    """Raise :func:`unknown`'s error unless the catalogue or ``served`` has ``env_id``;
    with ``here`` (a remote is about to start on this machine) also when its family's
    package is not installed here."""
    if env_id not in catalogue() and env_id not in set(served):
        raise unknown(env_id, served)
    if here and missing_hint(env_id) is not None:
        raise unknown(env_id, served)


def _family(name: str) -> dict[str, Callable[..., Runtime]]:
    if name not in _loaded:
        try:
            module = importlib.import_module(FAMILIES[name])
        except ModuleNotFoundError as exc:
            if exc.name is not None and exc.name.startswith(FAMILIES[name]):
                raise  # our own module is missing: a packaging bug, not an absent extra
            _loaded[name] = {}
            program, package = getattr(exc, "program", None), getattr(exc, "package", None)
            if program and package and (name not in PACKAGES or _package_dir(PACKAGES[name])):
                missing[name] = _program_hint(program, package, getattr(exc, "detail", "not on PATH"))
            else:
                missing[name] = _install_hint(name, str(exc))
        else:
            _loaded[name] = dict(module.RUNTIMES)
    return _loaded[name]


def env_ids() -> list[str]:
    """Every env id this installation can serve, sorted.

    Returns:
        The ids (``builtin.Catch-v0``...).
    """
    return sorted(env_id for family in FAMILIES for env_id in _family(family))


def lookup(env_id: str) -> Callable[..., Runtime]:
    """The runtime class (or factory) for ``env_id``; raises :class:`UnknownEnvironment`.

    Args:
        env_id: an id (``family.Name-vN``).

    Returns:
        The class or factory; call it (or :func:`make`) for a runtime.

    Raises:
        UnknownEnvironment: no installed family serves ``env_id`` (the message names the
            closest ids, or what to install).
    """
    family = env_id.split(".", 1)[0]
    factory = _family(family).get(env_id) if family in FAMILIES else None
    if factory is None:
        raise unknown(env_id)
    return factory


def make(env_id: str, **kwargs: object) -> Runtime:
    """A new runtime for ``env_id``.

    Args:
        env_id: an id (``family.Name-vN``).
        **kwargs: the runtime's own options (``serve --option``).

    Returns:
        The runtime, its :meth:`~runtimes.base.Runtime.astart` not yet called.

    Raises:
        UnknownEnvironment: no installed family serves ``env_id``.
    """
    return lookup(env_id)(**kwargs)


# The catalogue: ids without importing the families ------------------------------------

#: ROMs ale-py ships that need two players; ale-py registers no env for them either, and
#: its emulator refuses them (``isSupportedROM``), so ``runtimes.atari`` serves none.
MULTIPLAYER_ROMS: Final = frozenset({"combat", "joust", "maze_craze", "warlords"})
#: The names in ``x11.<Name>-v0``: ``runtimes.x11.PROGRAMS``'s keys and ``Command``. A
#: remote serves a program only where it is installed; the catalogue lists them all.
X11_NAMES: Final = ("XEyes", "XClock", "XLogo", "XCalc", "XTerm", "Command")


def _package_dir(name: str) -> Path | None:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def atari_env_id(rom: str) -> str:
    """``"montezuma_revenge"`` -> ``"atari.MontezumaRevenge-v0"`` (``runtimes.atari``'s rule)."""
    return f"atari.{rom.title().replace('_', '')}-v0"


def miniwob_env_id(page: str) -> str:
    """``"click-test-2.html"`` -> ``"miniwob.ClickTest2-v0"`` (``runtimes.browser``'s rule)."""
    stem = Path(page).name.removesuffix(".html")
    return "miniwob." + "".join(part[:1].upper() + part[1:] for part in stem.split("-")) + "-v0"


def _atari_ids() -> list[str]:
    """One id per single-player ROM in the installed ale-py wheel (its ``roms/*.bin``),
    or, without ale-py, in the one :mod:`.known_names` lists (remotes elsewhere have it)."""
    package = _package_dir("ale_py")
    if package is None:
        return [atari_env_id(rom) for rom in known_names.ATARI_ROMS if rom not in MULTIPLAYER_ROMS]
    return list(_atari_ids_in(package))


@functools.cache
def _atari_ids_in(package: Path) -> tuple[str, ...]:
    """An installed ale-py's ids, read once per process (below, ``_miniwob_ids_in``)."""
    roms = (path.stem for path in (package / "roms").glob("*.bin"))
    return tuple(atari_env_id(rom) for rom in roms if rom not in MULTIPLAYER_ROMS)


def _miniwob_ids() -> list[str]:
    """One id per task page of the installed ``miniwob`` wheel (``html/miniwob/*.html``),
    or, without it, of the one :mod:`.known_names` lists."""
    package = _package_dir("miniwob")
    if package is None:
        return [miniwob_env_id(f"{page}.html") for page in known_names.MINIWOB_PAGES]
    return list(_miniwob_ids_in(package))


@functools.cache
def _miniwob_ids_in(package: Path) -> tuple[str, ...]:
    """An installed miniwob's ids, read once per process: an agent asks the catalogue at
    every env it makes, and scanning the wheel's folders cost ~10 ms each time (most of
    a warm pool's claim -> first observation, issue 44)."""
    return tuple(miniwob_env_id(page.name) for page in (package / "html" / "miniwob").glob("*.html"))


def _x11_ids() -> list[str]:
    return [f"x11.{name}-v0" for name in X11_NAMES]


#: family -> its ids without importing its runtime module; families not here are cheap
#: to import (numpy only) and are listed by importing them.
LISTERS: Final[dict[str, Callable[[], list[str]]]] = {
    "atari": _atari_ids,
    "miniwob": _miniwob_ids,
    "x11": _x11_ids,
}


def catalogue() -> list[str]:
    """Every env id this installation knows, sorted, without importing ale-py, miniwob or
    a family's runtime module (far cheaper than :func:`env_ids`, which imports them).

    A superset of :func:`env_ids`: it also names ids whose programs this machine lacks
    (a remote in a container may have them).
    """
    ids: set[str] = set()
    for family in FAMILIES:
        lister = LISTERS.get(family)
        ids.update(lister() if lister is not None else _family(family))
    return sorted(ids)
