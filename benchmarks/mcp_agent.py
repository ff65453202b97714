"""A scripted computer-use agent through MCP on MiniWoB tasks; settled screenshots vs fixed sleeps.

The agent (:func:`play`) speaks only the ``computer`` tool's actions — Anthropic's
(``left_click`` at a coordinate, ``key`` "ctrl+a", ``type``) or OpenAI's action objects
(``click{x, y}``, ``keypress{keys}``, ``type{text}``) — through the official MCP SDK's
client, over a remote's MCP port (``serve --mcp-port``). It decides with the project's
web oracle (:mod:`benchmarks.web_oracle`, which reads the page's elements and returns
BrowserGym action strings) and turns each call into pointer and keyboard actions at
the element's click point in screenshot pixels (the ``page`` tool's, scaled like the
screenshot). Every action answers with the screenshot taken once the screen settled.

Rows: per task, episodes won over :data:`SEEDS` seeds, Anthropic's actions and OpenAI's;
then the median seconds from sending an action to holding its settled screenshot on
click tasks, against the same actions answered without settling after BrowserGym's 0.5 s
sleep (episodes won too), the same agent on a lockstep remote (each action a step of a
frame: no settling to wait for) and, as a ratio, Anthropic's reference 2.0 s; the same for
pointer moves on an X11 desktop (``x11.XEyes-v0``, whose eyes follow them); then the MCP
port's overhead per action against the rewarder's on one lockstep remote (a key step
of one frame of ``builtin.Catch-v0``: a ``computer`` ``key`` call, with its screenshot,
through the SDK's client and as bare JSON-RPC POSTs, vs ``RemoteEnv.step``).

``python -m benchmarks mcp_agent`` (``--quick``: fewer seeds and tasks).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

from benchmarks import mcp_sdk
from benchmarks.common import quick, ratio, table
from benchmarks.mcp_sdk import is_error
from benchmarks.web_oracle import MAX_STEPS, act

#: Tasks the agent plays: ones the oracle solves with clicks and text (no select_option).
TASKS: Final = (
    "click-test", "click-test-2", "click-button", "click-button-sequence", "click-link",
    "click-dialog", "click-tab", "click-collapsible", "click-checkboxes", "click-widget",
    "enter-text", "enter-password", "login-user", "focus-text",
)
#: Seeds per task (0..SEEDS-1).
SEEDS: Final = quick(5, 1)
#: Click tasks of the settle-against-sleep comparison.
CLICK_TASKS: Final = ("click-test", "click-button", "click-dialog", "click-collapsible", "click-tab")
#: BrowserGym's wait after every action, and Anthropic's reference environment's (seconds).
BROWSERGYM_SLEEP: Final = 0.5
ANTHROPIC_SLEEP: Final = 2.0
#: Seconds a serve may take to print its banner.
START_TIMEOUT: Final = 60.0
#: Pointer moves on the X11 desktop (x11.XEyes-v0).
DESKTOP_MOVES: Final = quick(30, 6)
#: Key steps of the overhead comparison.
OVERHEAD_STEPS: Final = quick(300, 50)
_MCP_LINE: Final = re.compile(r"mcp\s+(https?://\S+)")
_AGENT_LINE: Final = re.compile(r"agent address\s+(\S+)")


class Served:
    """``universe-remote serve ENV --mcp-port 0 ...`` in a process: its MCP URL."""

    def __init__(self, env_id: str, *extra: str, env: dict[str, str] | None = None,
                 python: str = sys.executable) -> None:
        self.process = subprocess.Popen(
            [python, "-m", "universe_remote", "serve", env_id, "--mcp-port", "0",
             "--rewarder-port", "0", "--vnc-port", "0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, **(env or {})},
        )
        self.url = self.address = ""
        ready = threading.Event()
        threading.Thread(target=self._read, args=(ready,), daemon=True).start()
        if not ready.wait(START_TIMEOUT) or not self.url:
            self.close()
            raise RuntimeError(f"universe-remote serve {env_id} did not print its MCP port")

    def _read(self, ready: threading.Event) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if found := _MCP_LINE.search(line):
                self.url = found.group(1)
            if found := _AGENT_LINE.search(line):
                self.address = found.group(1)
                ready.set()
        ready.set()

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.asynccontextmanager
async def session(url: str, password: str | None = None) -> AsyncIterator[Any]:
    """An MCP client session over streamable HTTP (the SDK's client, either major)."""
    async with mcp_sdk.session(url, password) as client:
        yield client


def info_of(result: Any) -> dict[str, Any]:
    """The JSON text of a tool result (its last content)."""
    if is_error(result):
        raise RuntimeError(result.content[0].text)
    parsed: dict[str, Any] = json.loads(result.content[-1].text)
    return parsed


_CALL: Final = re.compile(r"^\s*(\w+)\((.*)\)\s*$")


def computer_calls(action: str, page: dict[str, Any], style: str) -> list[dict[str, Any]]:
    """The oracle's action string as ``computer`` tool arguments, in ``style``
    ("anthropic" or "openai"), at each element's click point in screenshot pixels."""
    by_bid = {e["bid"]: e for e in page["elements"]}
    out: list[dict[str, Any]] = []
    for line in action.splitlines():
        found = _CALL.match(line)
        if found is None:
            raise ValueError(f"not a call: {line!r}")
        name, args = found.group(1), ast.literal_eval(f"({found.group(2)},)")
        element = by_bid[args[0]]
        x, y = element.get("point") or [element["bbox"][0] + element["bbox"][2] // 2,
                                        element["bbox"][1] + element["bbox"][3] // 2]
        if name not in ("click", "focus", "fill"):
            raise ValueError(f"the agent does not map {name}()")
        if style == "anthropic":
            out.append({"action": "left_click", "coordinate": [x, y]})
            if name == "fill":
                out += [{"action": "key", "text": "ctrl+a"}, {"action": "key", "text": "BackSpace"}]
                if args[1]:
                    out.append({"action": "type", "text": args[1]})
        else:
            out.append({"type": "click", "x": x, "y": y, "button": "left"})
            if name == "fill":
                out += [{"type": "keypress", "keys": ["CTRL", "A"]},
                        {"type": "keypress", "keys": ["BACKSPACE"]}]
                if args[1]:
                    out.append({"type": "type", "text": args[1]})
    return out


@dataclass
class Played:
    """One episode the agent played."""

    won: bool = False
    done: bool = False
    actions: int = 0
    #: Seconds from sending each click to holding its answer.
    seconds: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def play(client: Any, task: str, seed: int, style: str = "anthropic",
               sleep: float | None = None) -> Played:
    """One episode of ``task`` (its env switched to by the reset); ``sleep``: answer
    without settling, after sleeping that long (a fixed-sleep agent)."""
    from runtimes.registry import miniwob_env_id

    played = Played()
    reset = info_of(await client.call_tool("reset", {"seed": seed, "env_id": miniwob_env_id(task),
                                                     "screenshot": False}))
    instruction = reset.get("instruction") or ""
    for _ in range(MAX_STEPS):
        page = info_of(await client.call_tool("page", {}))
        action = act(task, instruction, page)
        if action is None:
            break
        for args in computer_calls(action, page, style):
            if sleep is not None:
                args = {**args, "settle": False, "screenshot": False}
            started = time.monotonic()
            result = await client.call_tool("computer", args)
            if sleep is not None:
                await asyncio.sleep(sleep)
                result = await client.call_tool("computer", {"action": "screenshot"})
            if args.get("action") == "left_click" or args.get("type") == "click":
                played.seconds.append(time.monotonic() - started)
            played.actions += 1
            if is_error(result):
                played.errors.append(result.content[0].text)
                continue
            info = info_of(result)
            if info["done"]:
                played.done, played.won = True, info["reward"] > 0
                return played
        if sleep is not None:  # the fixed-sleep agent's answers said nothing: ask
            info = info_of(await client.call_tool("state", {}))
            if info["done"]:
                played.done, played.won = True, info["reward"] > 0
                return played
    return played


async def _tasks(url: str, style: str, tasks: tuple[str, ...], seeds: int,
                 sleep: float | None = None) -> dict[str, list[Played]]:
    out: dict[str, list[Played]] = {}
    async with session(url) as client:
        for task in tasks:
            out[task] = [await play(client, task, seed, style, sleep) for seed in range(seeds)]
    return out


def _won(results: dict[str, list[Played]]) -> tuple[int, int]:
    episodes = [p for played in results.values() for p in played]
    return sum(p.won for p in episodes), len(episodes)


def _raw_calls(url: str, arguments: dict[str, Any], count: int) -> list[float]:
    """Seconds per ``computer`` call as bare JSON-RPC POSTs (the SDK's HTTP client, not its
    MCP client): the server's share of a call."""
    httpx = mcp_sdk.http_module()

    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with httpx.Client(timeout=30) as http:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {},
                 "clientInfo": {"name": "bench", "version": "0"}}
        opened = http.post(url, headers=headers,
                           json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
        headers |= {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "computer", "arguments": arguments}}
        seconds = []
        for _ in range(count):
            started = time.monotonic()
            http.post(url, headers=headers, json=body).raise_for_status()
            seconds.append(time.monotonic() - started)
        http.delete(url, headers=headers)
    return seconds


async def _overhead(served: Served) -> tuple[float, float, float]:
    """Median seconds of a one-frame key step: through MCP's SDK client, as bare JSON-RPC,
    through the rewarder."""
    from remotes import RemoteEnv

    mcp: list[float] = []
    async with session(served.url) as client:
        await client.call_tool("reset", {"seed": 0, "screenshot": False})
        for i in range(OVERHEAD_STEPS):
            started = time.monotonic()
            key = "Left" if i % 2 else "Right"
            info_of(await client.call_tool("computer", {"action": "key", "text": key}))
            mcp.append(time.monotonic() - started)
    raw = _raw_calls(served.url, {"action": "key", "text": "Left"}, OVERHEAD_STEPS)
    env = RemoteEnv(served.address, mode="lockstep")
    rewarder: list[float] = []
    try:
        env.reset(seed=0)
        for i in range(OVERHEAD_STEPS):
            started = time.monotonic()
            key = "Left" if i % 2 else "Right"
            _, _, terminated, truncated, _ = env.step([("KeyEvent", key, True), ("KeyEvent", key, False)])
            rewarder.append(time.monotonic() - started)
            if terminated or truncated:
                env.reset()
    finally:
        env.close()
    return statistics.median(mcp), statistics.median(raw), statistics.median(rewarder)


async def _desktop_moves(url: str) -> list[float]:
    """Seconds from each pointer move to its settled screenshot on ``x11.XEyes-v0`` (the
    eyes follow the pointer, then the screen is still)."""
    seconds = []
    async with session(url) as client:
        await client.call_tool("reset", {"seed": 0, "screenshot": False})
        for i in range(DESKTOP_MOVES):
            started = time.monotonic()
            info_of(await client.call_tool("computer", {"action": "mouse_move",
                                                        "coordinate": [1000 if i % 2 else 20, 384]}))
            seconds.append(time.monotonic() - started)
    return seconds


def main() -> None:
    tasks = TASKS if SEEDS > 1 else TASKS[:10]
    print(f"mcp_agent: {len(tasks)} MiniWoB tasks x {SEEDS} seeds through MCP (streamable HTTP), "
          f"load {os.getloadavg()[0]:.1f}")
    served = Served("miniwob.ClickTest-v0")
    try:
        by_style = {style: asyncio.run(_tasks(served.url, style, tasks, SEEDS))
                    for style in ("anthropic", "openai")}
        rows = [[task, *(f"{sum(p.won for p in by_style[s][task])}/{SEEDS}" for s in by_style)]
                for task in tasks]
        table(["task", "anthropic computer", "openai actions"], rows)
        for style, results in by_style.items():
            won, played = _won(results)
            print(f"{style}: {won}/{played} episodes won ({100 * won / played:.0f} %)")
        settled = asyncio.run(_tasks(served.url, "anthropic", CLICK_TASKS, SEEDS))
        slept = asyncio.run(_tasks(served.url, "anthropic", CLICK_TASKS, SEEDS, sleep=BROWSERGYM_SLEEP))
    finally:
        served.close()
    paused = Served("miniwob.ClickTest-v0", "--mode", "lockstep")
    try:
        stepped = asyncio.run(_tasks(paused.url, "anthropic", CLICK_TASKS, SEEDS))
    finally:
        paused.close()
    lockstep = statistics.median(s for played in stepped.values() for p in played for s in p.seconds)
    fast = statistics.median(s for played in settled.values() for p in played for s in p.seconds)
    slow = statistics.median(s for played in slept.values() for p in played for s in p.seconds)
    table(["click -> screenshot", "median ms", "episodes won", "vs settled"], [
        ["MCP, settled", f"{fast * 1000:.0f}", "{}/{}".format(*_won(settled)), "1.00"],
        [f"MCP, {BROWSERGYM_SLEEP:g} s sleep (BrowserGym)", f"{slow * 1000:.0f}",
         "{}/{}".format(*_won(slept)), ratio(slow, fast)],
        [f"{ANTHROPIC_SLEEP:g} s sleep (Anthropic's reference)", f"{ANTHROPIC_SLEEP * 1000:.0f}", "-",
         ratio(ANTHROPIC_SLEEP, fast)],
        ["MCP on a lockstep remote (a step of a frame)", f"{lockstep * 1000:.0f}",
         "{}/{}".format(*_won(stepped)), ratio(lockstep, fast)],
    ])
    eyes = Served("x11.XEyes-v0")
    try:
        moved = statistics.median(asyncio.run(_desktop_moves(eyes.url)))
    finally:
        eyes.close()
    table(["x11.XEyes-v0: pointer move -> screenshot", "median ms", "vs settled"], [
        ["MCP, settled", f"{moved * 1000:.0f}", "1.00"],
        [f"{BROWSERGYM_SLEEP:g} s sleep", f"{BROWSERGYM_SLEEP * 1000:.0f}", ratio(BROWSERGYM_SLEEP, moved)],
        [f"{ANTHROPIC_SLEEP:g} s sleep", f"{ANTHROPIC_SLEEP * 1000:.0f}", ratio(ANTHROPIC_SLEEP, moved)],
    ])
    catch = Served("builtin.Catch-v0", "--mode", "lockstep")
    try:
        mcp, raw, rewarder = asyncio.run(_overhead(catch))
    finally:
        catch.close()
    table(["one-frame key step (Catch, lockstep)", "median ms", "vs rewarder"], [
        ["MCP computer key (the SDK's client)", f"{mcp * 1000:.2f}", ratio(mcp, rewarder)],
        ["MCP computer key (bare JSON-RPC POSTs)", f"{raw * 1000:.2f}", ratio(raw, rewarder)],
        ["rewarder (RemoteEnv.step)", f"{rewarder * 1000:.2f}", "1.00"],
    ])
    won, played = _won(by_style["anthropic"])
    print(f"mcp_agent: {len(tasks)} tasks, {100 * won / played:.0f} % won with Anthropic's actions; "
          f"click -> settled screenshot {fast * 1000:.0f} ms median ({ratio(slow, fast)} faster than a "
          f"{BROWSERGYM_SLEEP:g} s sleep, {ratio(ANTHROPIC_SLEEP, fast)} than {ANTHROPIC_SLEEP:g} s); MCP "
          f"{(mcp - rewarder) * 1000:+.2f} ms per step over the rewarder ({(raw - rewarder) * 1000:+.2f} ms "
          "without the SDK's client)")


if __name__ == "__main__":
    main()
