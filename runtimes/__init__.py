"""Environments only: what a remote serves, knowing nothing of sockets or servers.

Public (imported lazily from here): the contract a runtime keeps (:class:`Runtime`,
:class:`StepResult`, the input events :class:`KeyEvent`, :class:`PointerEvent`,
:class:`PlayerEvent`), the registry of env ids (:mod:`runtimes.registry`: ``make``,
``env_ids``, ``lookup``) and the suite every runtime passes (:mod:`runtimes.compliance`).
A new environment subclasses :class:`Runtime` (README, "Add your own"). Every other module
is internal: its names may change without notice.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

#: Each public name, and the module that holds it.
_PUBLIC: Final = {
    "Runtime": "base", "StepResult": "base", "KeyEvent": "base", "PointerEvent": "base",
    "PlayerEvent": "base", "InputEvent": "base", "make": "registry", "env_ids": "registry",
    "lookup": "registry", "RuntimeCompliance": "compliance",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    """Import a public name's module only when the name is used."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'runtimes' has no attribute {name!r}")
    return getattr(importlib.import_module(f"runtimes.{_PUBLIC[name]}"), name)
