"""The computer-use tools as JSON-RPC: :func:`answer` (``tools/list``, ``tools/call``,
``ping``; an unknown method is -32601), which the MCP port (:mod:`.server`) and
OpenEnv's MCP messages (its RFC 003: ``{"type": "mcp", "data": <JSON-RPC request>}`` on
``/ws``, answered ``{"type": "mcp", "data": <JSON-RPC response>}``, and the bare
request on ``POST /mcp``) both answer with.

Holds :class:`OpenEnvTools`: a :class:`~.tools.Desk` of the remote's, the same tools as
the MCP port's. Each OpenEnv session is one client (its seat kept until the session
closes); each ``POST /mcp`` is a client for that request only. No SDK here: MCP's
messages are plain JSON-RPC.
"""

from __future__ import annotations

from typing import Any, Final

from .. import version
from ..agent_port import RemoteLike
from .errors import ToolError
from .tools import Client, Desk, tool_list

#: JSON-RPC's error codes this answers with.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
#: The MCP protocol versions this speaks (the initialize handshake's), oldest first; a
#: client asking for another is answered with the newest (MCP's negotiation).
PROTOCOL_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: The version an OpenEnv ``initialize`` is answered with.
PROTOCOL_VERSION: Final = "2025-06-18"
#: The requests answered (``initialize`` by whoever keeps sessions).
METHODS: Final = ("initialize", "ping", "tools/list", "tools/call")


def negotiate(asked: Any) -> str:
    """The protocol version to answer a client that asked for ``asked``."""
    return asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]


async def answer(desk: Desk, client: Client, request: dict[str, Any]) -> dict[str, Any]:
    """The JSON-RPC response to ``request`` (not ``initialize``) from ``client``."""
    ident, method = request.get("id"), request.get("method")
    params = request.get("params") or {}
    if not isinstance(params, dict):
        return error(ident, INVALID_PARAMS, "params is a JSON object")
    if method == "tools/list":
        return result(ident, {"tools": tool_list(desk.remote)})
    if method == "tools/call":
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return error(ident, INVALID_PARAMS, 'tools/call takes {"name": ..., "arguments": {...}}')
        try:
            content = await desk.call(client, name, arguments)
        except ToolError as exc:
            return result(ident, {"content": [{"type": "text", "text": str(exc)}], "isError": True})
        return result(ident, {"content": content, "isError": False})
    if method == "ping":
        return result(ident, {})
    return error(ident, METHOD_NOT_FOUND, f"Method not found: {str(method)[:40]!r}; this server answers "
                 f"{', '.join(METHODS)}")


class OpenEnvTools:
    """The tools over OpenEnv's MCP messages, one client per session."""

    def __init__(self, remote: RemoteLike, take_over: bool = False) -> None:
        self.desk = Desk(remote, port_name="OpenEnv MCP", take_over=take_over)
        self.clients: dict[object, Client] = {}

    def held_by(self) -> str | None:
        return self.desk.held_by()

    async def answer(self, session: object, request: Any) -> dict[str, Any]:
        """The JSON-RPC response to ``request`` from ``session`` (kept as one client)."""
        client = self.clients.get(session)
        if client is None:
            client = self.clients[session] = self.desk.client(str(getattr(session, "name", "")))
        return await self._answer(client, request)

    async def answer_once(self, request: Any) -> dict[str, Any]:
        """The response to a request of its own (``POST /mcp``): its seat ends with it."""
        client = self.desk.client("POST /mcp")
        try:
            return await self._answer(client, request)
        finally:
            client.close()

    def forget(self, session: object) -> None:
        """``session`` closed: let go of its seat."""
        client = self.clients.pop(session, None)
        if client is not None:
            client.close()

    async def _answer(self, client: Client, request: Any) -> dict[str, Any]:
        ident = request.get("id") if isinstance(request, dict) else None
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            return error(ident, INVALID_REQUEST, 'a JSON-RPC request: {"jsonrpc": "2.0", "id": 1, '
                          '"method": "tools/list"}')
        if request["method"] == "initialize":
            return result(ident, {"protocolVersion": PROTOCOL_VERSION, "capabilities": {"tools": {}},
                                  "serverInfo": {"name": "universe-remote",
                                                 "version": version.server_version()}})
        return await answer(self.desk, client, request)


def result(ident: Any, body: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": body}


def error(ident: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}
