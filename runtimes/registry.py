"""Which environment ids exist and how to build their runtimes.

Families are looked up lazily so that ``universe-remote list`` and a built-in remote
never import optional dependencies (ale-py, a browser) they do not use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

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

_loaded: dict[str, dict[str, Callable[..., Runtime]]] = {}
#: family -> why it could not be loaded (its optional dependency is missing).
missing: dict[str, str] = {}


def _family(name: str) -> dict[str, Callable[..., Runtime]]:
    if name not in _loaded:
        try:
            module = importlib.import_module(FAMILIES[name])
        except ModuleNotFoundError as exc:
            if exc.name is not None and exc.name.startswith(FAMILIES[name]):
                raise  # our own module is missing: a packaging bug, not an absent extra
            _loaded[name] = {}
            missing[name] = f"{exc}; install it with: {EXTRAS.get(name, 'pip install ' + str(exc.name))}"
        else:
            _loaded[name] = dict(module.RUNTIMES)
    return _loaded[name]


def env_ids() -> list[str]:
    """Every env id this installation can serve, sorted."""
    return sorted(env_id for family in FAMILIES for env_id in _family(family))


def lookup(env_id: str) -> Callable[..., Runtime]:
    """The runtime class (or factory) for ``env_id``; raises :class:`UnknownEnvironment`."""
    family = env_id.split(".", 1)[0]
    factory = _family(family).get(env_id) if family in FAMILIES else None
    if factory is None:
        raise UnknownEnvironment(env_id, env_ids(), missing.get(family))
    return factory


def make(env_id: str, **kwargs: object) -> Runtime:
    """A new runtime for ``env_id``."""
    return lookup(env_id)(**kwargs)
