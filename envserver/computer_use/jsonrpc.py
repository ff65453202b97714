"""The computer-use tools as OpenEnv's MCP messages (its RFC 003): ``{"type": "mcp", "data":
<JSON-RPC request>}`` on ``/ws``, answered ``{"type": "mcp", "data": <JSON-RPC response>}``,
and the bare JSON-RPC request on ``POST /mcp``.

Holds :class:`OpenEnvTools`: ``tools/list`` and ``tools/call`` (and ``initialize``,
``ping``) answered by a :class:`~.tools.Desk` of the remote's, the same tools as the MCP
port's. Each OpenEnv session is one client (its seat kept until the session closes);
each ``POST /mcp`` is a client for that request only. No SDK here: OpenEnv's messages
are plain JSON-RPC, and a remote without the ``mcp`` extra answers them too.
"""

from __future__ import annotations

from typing import Any, Final

from .. import version
from ..agent_port import RemoteLike
from .errors import ToolError
from .tools import Client, Desk, tool_list

#: JSON-RPC's error codes this answers with.
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
#: The MCP protocol version ``initialize`` answers with.
PROTOCOL_VERSION: Final = "2025-06-18"


class OpenEnvTools:
    """The tools over OpenEnv's MCP messages, one client per session."""

    def __init__(self, remote: RemoteLike) -> None:
        self.desk = Desk(remote, port_name="OpenEnv MCP")
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
            return _error(ident, INVALID_REQUEST, 'a JSON-RPC request: {"jsonrpc": "2.0", "id": 1, '
                          '"method": "tools/list"}')
        method, params = request["method"], request.get("params") or {}
        if method == "tools/list":
            return _result(ident, {"tools": tool_list(self.desk.remote)})
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments") or {}
            if not isinstance(name, str) or not isinstance(arguments, dict):
                return _error(ident, INVALID_PARAMS, 'tools/call takes {"name": ..., "arguments": {...}}')
            try:
                content = await self.desk.call(client, name, arguments)
            except ToolError as exc:
                return _result(ident, {"content": [{"type": "text", "text": str(exc)}], "isError": True})
            return _result(ident, {"content": content, "isError": False})
        if method == "initialize":
            return _result(ident, {"protocolVersion": PROTOCOL_VERSION, "capabilities": {"tools": {}},
                                   "serverInfo": {"name": "universe-remote",
                                                  "version": version.server_version()}})
        if method == "ping":
            return _result(ident, {})
        return _error(ident, METHOD_NOT_FOUND, f"no method {method[:40]!r}: tools/list, tools/call")


def _result(ident: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def _error(ident: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}
