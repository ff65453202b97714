"""Run by tests/envserver/test_mcp_sdk_majors.py with the python of an environment that
has only ``'.[mcp]'`` (tests/sdk_venv.py): the installed MCP SDK's own clients against a
remote's MCP port and the stdio relay. Prints one JSON line of what they saw.

``PYTHONPATH=<source tree> python mcp_sdk_check.py URL``
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from benchmarks import mcp_sdk  # (the source tree is on PYTHONPATH; the SDK is the venv's)


def _info(result: Any) -> dict[str, Any]:
    assert not mcp_sdk.is_error(result), result.content[0].text
    parsed: dict[str, Any] = json.loads(result.content[-1].text)
    return parsed


async def main(url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {"mcp": __import__("importlib.metadata").metadata.version("mcp")}
    async with mcp_sdk.session(url) as client:
        seen["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
        reset = await client.call_tool("reset", {"seed": 1})
        seen["reset"] = [c.type for c in reset.content]
        seen["mime"] = mcp_sdk.mime_type(reset.content[0])
        key = await client.call_tool("computer", {"action": "key", "text": "Left"})
        seen["key"] = _info(key)["episode_id"]
        bad = await client.call_tool("computer", {"action": "fly"})
        seen["bad"] = [mcp_sdk.is_error(bad), bad.content[0].text]
        seen["you_drive"] = _info(await client.call_tool("state", {}))["you_drive"]
    if mcp_sdk.major() >= 2:  # 2.x's own high-level client (it probes server/discover first)
        import mcp

        async with mcp.Client(url) as high:
            seen["client_state"] = _info(await high.call_tool("state", {}))["env_id"]
    relay = [sys.executable, ["-m", "universe_remote", "mcp", url]]
    async with mcp_sdk.stdio_session(relay[0], relay[1], dict(os.environ)) as stdio:  # type: ignore[arg-type]
        seen["relay_tools"] = sorted(t.name for t in (await stdio.list_tools()).tools)
        seen["relay_state"] = _info(await stdio.call_tool("state", {}))["env_id"]
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
