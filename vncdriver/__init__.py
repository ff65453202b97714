"""The pixel channel: our own RFB 3.8 (VNC) client and server.

Sans-I/O core (no asyncio, no sockets): :mod:`.errors`, :mod:`.limits`,
:mod:`.pixelformat`, :mod:`.messages`, :mod:`.streams`, :mod:`.handshake`,
:mod:`.encodings` (Raw, CopyRect, Tight, ZRLE), :mod:`.client_protocol`,
:mod:`.server_protocol`, :mod:`.tiles` (the server's change tracking) and
:mod:`.keysyms`. The asyncio shells own these objects and only move bytes: the client
(:mod:`.client`, :mod:`.client_connection`, :mod:`.client_updates`,
:mod:`.client_stats`) and the server (:mod:`.server`,
:mod:`.server_connection`, :mod:`.server_attached`).

Public (imported lazily from here): :class:`VNCClient` and :func:`connect`,
:class:`VNCServer`, and the errors of :mod:`vncdriver.errors`; the sans-I/O modules above
for whoever builds a shell of their own. The rest is internal.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

#: Each public name, and the module that holds it.
_PUBLIC: Final = {
    "VNCClient": "client", "connect": "client", "VNCServer": "server", "VNCError": "errors",
    "UnknownKey": "errors", "AuthenticationFailed": "errors", "ServerRefused": "errors",
    "ConnectTimeout": "errors", "ConnectionLost": "errors", "ProtocolError": "errors",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    """Import a public name's module only when the name is used."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'vncdriver' has no attribute {name!r}")
    return getattr(importlib.import_module(f"vncdriver.{_PUBLIC[name]}"), name)
