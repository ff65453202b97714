"""The reward channel, both ends: Universe's v0 rewarder protocol over WebSocket.

Public (imported lazily from here, each from its module): the asyncio client
(:class:`RewarderClient`, :func:`connect`), the blocking client lockstep agents step with
(:class:`BlockingRewarder`), the server (:class:`RewarderServer` and what it calls,
:class:`EnvHandler`), the errors (:mod:`rewarder.errors`), Universe's ``Authorization``
value (:func:`basic_auth`) and the suite any v0 server can run (:mod:`rewarder.compliance`).
The sans-I/O protocol is :mod:`rewarder.protocol` and :mod:`rewarder.parsers`; every other
module is internal: its names may change without notice.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

#: Each public name, and the module that holds it.
_PUBLIC: Final = {
    "RewarderClient": "client", "connect": "client", "BlockingRewarder": "blocking",
    "RewarderServer": "server", "EnvHandler": "server", "basic_auth": "dial",
    "RewarderError": "errors", "BadRequest": "errors", "ProtocolError": "errors",
    "RemoteError": "errors", "ConnectionClosed": "errors", "Refused": "errors",
    "ConnectTimeout": "errors", "RewarderServerCompliance": "compliance",
    "ServerUnderTest": "compliance",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    """Import a public name's module only when the name is used (``serve`` and the
    blocking client load none of the others)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'rewarder' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rewarder.{_PUBLIC[name]}"), name)
