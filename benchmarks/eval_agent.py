"""A scripted computer-use agent for ``universe-remote eval``, as a callable and as an MCP host.

MiniWoB (``miniwob.*``): :mod:`benchmarks.mcp_agent`'s agent — the web oracle
(:mod:`benchmarks.web_oracle`) decides from the ``page`` tool, and each decision becomes
``computer`` actions at the element's click point in screenshot pixels. An X11 desktop
(``x11.*``): it clicks :data:`DESKTOP_POINT`, types ``episode <seed>`` and presses Return
(what the Tk entries of tests/envserver/mcp_tk_entries.py write down, and a judge reads).

- ``universe-remote eval TASKS --agent benchmarks.eval_agent:scripted``: the callable.
- ``universe-remote eval TASKS --agent-command 'python -m benchmarks.eval_agent {task} {seed} {mcp}'``:
  a minimal MCP host (JSON lines over the server command's stdio, no SDK) playing the same.
  ``--forever``: it takes screenshots until it is stopped (a budget's test).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from typing import Any, Final

from benchmarks.mcp_agent import computer_calls
from benchmarks.web_oracle import MAX_STEPS, SOLVERS, act
from runtimes.registry import miniwob_env_id

Call = Callable[[str, dict[str, Any]], dict[str, Any]]

#: Where the agent clicks on a desktop: the first Tk entry (its window at the top left).
DESKTOP_POINT: Final = [60, 10]
#: MiniWoB env id -> the oracle's task name.
TASK_OF: Final = {miniwob_env_id(task): task for task in SOLVERS}


def info(result: dict[str, Any]) -> dict[str, Any]:
    """A tool result's JSON text; a tool error raises."""
    texts = [c["text"] for c in result.get("content", ()) if c.get("type") == "text"]
    if result.get("isError"):
        raise RuntimeError(texts[0] if texts else "tool error")
    parsed: dict[str, Any] = json.loads(texts[-1])
    return parsed


def play(call: Call, env_id: str, seed: int, instruction: str | None = None) -> None:
    """One episode, already reset, through ``call`` (a tool call)."""
    if env_id.startswith("x11."):
        call("computer", {"action": "left_click", "coordinate": DESKTOP_POINT})
        call("computer", {"action": "type", "text": f"episode {seed}"})
        call("computer", {"action": "key", "text": "Return"})
        return
    task = TASK_OF.get(env_id)
    if task is None:
        raise ValueError(f"the scripted agent plays MiniWoB's {sorted(TASK_OF)} and x11.*, not {env_id}")
    if instruction is None:
        instruction = info(call("state", {})).get("instruction") or ""
    for _ in range(MAX_STEPS):
        page = info(call("page", {}))
        action = act(task, instruction, page)
        if action is None:
            return
        for args in computer_calls(action, page, "anthropic"):
            result = call("computer", args)
            if not result.get("isError") and info(result).get("done"):
                return


def scripted(episode: Any) -> None:
    """The callable for ``eval --agent benchmarks.eval_agent:scripted``."""
    play(episode.call, episode.task, episode.seed, episode.instruction)


class Host:
    """A minimal MCP host: the server command on stdio, JSON-RPC a line each way."""

    def __init__(self, command: str) -> None:
        self.process = subprocess.Popen(shlex.split(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.numbers = 0
        hello = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "eval_agent", "version": "0"}})
        self.server = hello.get("serverInfo", {})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.tools = [tool["name"] for tool in self.request("tools/list", {})["tools"]]

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdout is not None
        self.numbers += 1
        self.send({"jsonrpc": "2.0", "id": self.numbers, "method": method, "params": params})
        while line := self.process.stdout.readline():
            answer = json.loads(line)
            if answer.get("id") == self.numbers:
                if "error" in answer:
                    raise RuntimeError(answer["error"].get("message"))
                result: dict[str, Any] = answer["result"]
                return result
        raise ConnectionError("the MCP server closed its stdout")

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(10)


def run_host(argv: list[str]) -> int:
    forever = "--forever" in argv
    words = [w for w in argv if w != "--forever"]
    if len(words) != 3:
        print("usage: python -m benchmarks.eval_agent [--forever] TASK SEED 'MCP SERVER COMMAND'",
              file=sys.stderr)
        return 2
    env_id, seed, command = words[0], int(words[1]), words[2]
    host = Host(command)
    try:
        if "computer" not in host.tools:
            raise RuntimeError(f"the server offers no computer tool: {host.tools}")
        while forever:
            if host.call("computer", {"action": "screenshot"}).get("isError"):
                return 0  # the harness refuses: the budget is spent
        play(host.call, env_id, seed)
    finally:
        host.close()
    return 0


if __name__ == "__main__":
    sys.exit(run_host(sys.argv[1:]))
