"""``universe-remote mcp ADDRESS``: a running remote's computer-use tools over stdio.

MCP hosts that launch their tools as processes (Claude Desktop, Claude Code's ``claude
mcp add``, the OpenAI Agents SDK's ``MCPServerStdio``) start this command; it is an MCP
server on stdin/stdout whose ``tools/list`` and ``tools/call`` are the remote's own,
relayed over its MCP port (``serve ENV --mcp-port``; docs/computer-use.md).

Why a relay and not a client of the rewarder and VNC: the tools — who drives, settling,
rewards, recordings, the page's structure — live in the remote once
(:mod:`envserver.computer_use`), so both transports answer alike, and this process holds
no state to lose: it is the SDK's client and the SDK's server, joined.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
from typing import Any, Final
from urllib.parse import urlsplit

#: The path of the remote's MCP endpoint.
PATH: Final = "/mcp"
#: Seconds to wait for the remote's answer to a tool call (a long ``wait`` and a settle).
CALL_TIMEOUT: Final = 120.0
#: Seconds to connect to the remote.
CONNECT_TIMEOUT: Final = 30.0


def mcp_url(address: str) -> str:
    """``host:port`` or a URL (``https://host:port``; ``/mcp`` added when it has no path)."""
    if "://" not in address:
        address = f"http://{address}"
    parts = urlsplit(address)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
        raise ValueError(f"the remote's MCP port is HOST:PORT or http(s)://HOST:PORT/mcp, not {address!r}")
    return address if parts.path not in ("", "/") else f"{parts.scheme}://{parts.netloc}{PATH}"


async def relay(url: str, password: str | None = None, ca: str | None = None) -> None:
    """Serve the remote at ``url``'s tools on stdio until stdin closes."""
    import httpx
    from mcp import ClientSession, types
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    headers = {"Authorization": f"Bearer {password}"} if password else {}
    verify: Any = ssl.create_default_context(cafile=ca) if ca else True
    timeout = httpx.Timeout(CONNECT_TIMEOUT, read=CALL_TIMEOUT)
    async with httpx.AsyncClient(headers=headers, verify=verify, timeout=timeout) as http, \
            streamable_http_client(url, http_client=http) as (read, write, _), \
            ClientSession(read, write) as remote:
        init = await remote.initialize()
        server: Any = Server("universe-remote", version=init.serverInfo.version,
                             instructions=init.instructions)

        @server.list_tools()
        async def list_tools() -> list[types.Tool]:
            return (await remote.list_tools()).tools

        @server.call_tool(validate_input=False)  # the remote validates, and says what was wrong
        async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            return await remote.call_tool(name, arguments)

        async with stdio_server() as (stdin, stdout):
            await server.run(stdin, stdout, server.create_initialization_options())


def run(args: argparse.Namespace) -> int:
    try:
        url = mcp_url(args.address)
    except ValueError as exc:
        print(f"universe-remote mcp: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(relay(url, args.password, args.ca))
    except Exception as exc:  # noqa: BLE001 (the host shows stderr: say what failed)
        print(f"universe-remote mcp: {url}: {_reason(exc)}", file=sys.stderr)
        return 1
    return 0


def _reason(exc: BaseException) -> str:
    """What failed, in the remote's words when it answered (a wrong password: its 401)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    response = getattr(exc, "response", None)
    if response is not None:
        status: Any = getattr(response, "status_code", "?")
        meaning = {401: "a missing or wrong password (--password)", 429: "too many wrong passwords: "
                   "this address is blocked for a while", 403: "a web page's Origin"}.get(status, "")
        return f"the remote answered HTTP {status}" + (f": {meaning}" if meaning else "")
    return f"{exc!r} (is the remote serving --mcp-port there?)"


def add_commands(sub: Any) -> None:
    what = ("relay a running remote's computer-use tools (its --mcp-port) over stdio, for MCP "
            "hosts that launch tools as processes (docs/computer-use.md)")
    parser = sub.add_parser("mcp", help=what, description=what[0].upper() + what[1:] + ".")
    parser.add_argument("address", metavar="ADDRESS",
                        help="the remote's MCP port: HOST:PORT or http(s)://HOST:PORT/mcp")
    parser.add_argument("--password", default=None,
                        help="the remote's password (default: $UNIVERSE_REMOTE_PASSWORD)")
    parser.add_argument("--ca", default=None, metavar="PEM",
                        help="the certificate (or CA) to trust for an https:// remote")
    parser.set_defaults(func=run)
