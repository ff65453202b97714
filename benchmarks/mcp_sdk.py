"""The official MCP SDK's client, on either of its majors (1.x, 2.x), as the benchmarks and
tests use it: a session over streamable HTTP or over stdio, and the fields of a result.

The two majors differ where a client touches them: 2.x's HTTP client is httpx2 (1.x's
httpx) and its results' fields are snake_case (``is_error``, ``mime_type``,
``input_schema``; 1.x: ``isError``, ``mimeType``, ``inputSchema``). Nothing of the
remote imports the SDK: it is the peer that proves the remote speaks MCP.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from importlib import metadata
from typing import Any, Final

#: Seconds to connect, and to wait for a call's answer (a long wait and a settle).
CONNECT_TIMEOUT: Final = 30.0
CALL_TIMEOUT: Final = 120.0


def major() -> int:
    """The installed SDK's major version."""
    return int(metadata.version("mcp").split(".")[0])


def http_module() -> Any:
    """The HTTP client module the installed SDK's transport takes (httpx2 from 2.0 on)."""
    if major() >= 2:
        import httpx2

        return httpx2
    import httpx

    return httpx


@contextlib.asynccontextmanager
async def session(url: str, password: str | None = None, ca: str | None = None) -> AsyncIterator[Any]:
    """An initialized client session over streamable HTTP (``Authorization: Bearer`` when
    ``password``; ``ca``: the certificate to trust for https://)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    http = http_module()
    headers = {"Authorization": f"Bearer {password}"} if password else {}
    verify: Any = ssl.create_default_context(cafile=ca) if ca else True
    async with http.AsyncClient(headers=headers, verify=verify,
                                timeout=http.Timeout(CONNECT_TIMEOUT, read=CALL_TIMEOUT)) as client, \
            streamable_http_client(url, http_client=client) as streams, \
            ClientSession(streams[0], streams[1]) as mcp_session:
        await mcp_session.initialize()
        yield mcp_session


@contextlib.asynccontextmanager
async def stdio_session(command: str, args: list[str],
                        env: dict[str, str] | None = None) -> AsyncIterator[Any]:
    """An initialized client session with a server the SDK launches as a process (a host's way)."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=command, args=args, env=env)
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as mcp_session:
        await mcp_session.initialize()
        yield mcp_session


def is_error(result: Any) -> bool:
    """A tool result's ``isError``."""
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


def mime_type(content: Any) -> str:
    """An image content's ``mimeType``."""
    return str(getattr(content, "mime_type", None) or getattr(content, "mimeType", ""))


def input_schema(tool: Any) -> dict[str, Any]:
    """A tool's ``inputSchema``."""
    schema: dict[str, Any] = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", {})
    return schema
