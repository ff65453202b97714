"""The computer-use tools of one remote, and who may drive it through them.

Holds :class:`Desk` (one per remote: the tools' schemas, the client that drives, each
call done on the remote) and :class:`Client` (one MCP session, or one OpenEnv session
that speaks MCP: what it holds down, the reward it has not been told yet). Results are
MCP content as JSON (``{"type": "image", ...}``, ``{"type": "text", ...}``), so the SDK's
server (:mod:`.server`) and OpenEnv's messages (:mod:`.jsonrpc`) answer with the same.

**Who drives.** A client that acts (any ``computer`` action but ``screenshot``,
``cursor_position`` and ``zoom``; ``reset``; ``browser_action``) becomes the remote's
agent if nobody drives it — no other client of this port, no rewarder, dm_env_rpc or
OpenEnv agent — and keeps the seat until its session ends or it hands it back (``seat``
``release``); any other client is refused with a tool error naming who drives, and may
still watch (screenshots, ``state``, ``page``). On a port that checks a password, a
client may take the seat over from this port's driver (``seat`` ``take_over``): it knows
the password, so it is trusted as much. Its input is the agent's (``agent_source``), so
recordings name it ``agent``.

**Snapshots** (docs/snapshots.md): ``snapshot`` and ``restore`` are listed on remotes
whose runtime can save its state, and go through the remote's own
:meth:`~envserver.restores.Restores.snapshot` and ``restore`` (as ``v0.env.snapshot``
does); only the driver may take or restore one, and a remote that cannot says why.

**An action** sends its events at once (real time) and, unless told not to
(``settle: false``), waits for the screen to settle (the remote's settle path,
``Runtime.asettle``, at most ``max_ms``) on browser and desktop remotes, or for the
next frame on games; then answers with the screenshot and the reward since the last
call. On a lockstep remote each run of events is one step of a frame, and each wait
advances its seconds' frames.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import io
import itertools
import time
from typing import Any, Final

import numpy as np
import orjson

from rewarder.snapshot_messages import MAX_TOKEN_CHARS, parse_restore, snapshot_body
from runtimes.base import StepResult

from .. import agent_port
from ..agent_port import Held, RemoteLike
from ..orders import LOCKSTEP, OBS_VNC, ActOrder, Refused, ResetOrder, StepOrder
from ..snapshots import MAX_SNAPSHOTS
from . import actions, desktop, shots
from .actions import Plan, Screen
from .errors import ToolError

#: Milliseconds an action waits for the screen to settle unless the call says.
DEFAULT_SETTLE_MS: Final = 10_000
#: Most milliseconds a call may ask to wait for settling.
MAX_SETTLE_MS: Final = 60_000
#: Seconds an answer waits, in real time, for the episode after one that ended to begin
#: (the remote's automatic reset: ~0.1 s for MiniWoB), so its screenshot is that
#: episode's first, as docs/computer-use.md says.
NEXT_EPISODE_WAIT: Final = 10.0
#: Seconds a game's action waits for the frame that shows it.
FRAME_TIMEOUT: Final = agent_port.STEP_TIMEOUT
#: PNG's zlib level for screenshots: 1 is several times faster than 6 for a few % more bytes.
PNG_LEVEL: Final = 1
#: JPEG quality of ``format: "jpeg"`` screenshots.
JPEG_QUALITY: Final = 85
#: Characters of the page's text tree a ``page`` call returns.
MAX_TREE_CHARS: Final = 60_000
FORMATS: Final = ("png", "jpeg")
#: The tools listed only on remotes whose runtime can save its state.
SNAPSHOT_TOOLS: Final = ("snapshot", "restore")
#: The ``seat`` tool's actions.
SEAT_ACTIONS: Final = ("release", "take_over")

_POINT: Final = {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}
_ANSWER: Final = {
    "screenshot": {"type": ["boolean", "string"], "enum": [True, False, *shots.SHOT_MODES], "description": (
        "full (or true, the default): the whole screenshot; changed: only the box that changed "
        "since this session's last screenshot (its place in 'region'), or none and 'unchanged'; "
        "none (or false): no screenshot")},
    "settle": {"type": "boolean", "description": "false: answer at once, not once the screen is still"},
    "max_ms": {"type": "integer", "minimum": 0, "maximum": MAX_SETTLE_MS,
               "description": f"most milliseconds to wait for a still screen (default {DEFAULT_SETTLE_MS})"},
    "format": {"type": "string", "enum": list(FORMATS), "description": "the screenshot's encoding (png)"},
}


def _schema(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        out["required"] = list(required)
    return out


def computer_schema() -> dict[str, Any]:
    """The ``computer`` tool's arguments: Anthropic's action (``action``) or OpenAI's
    action object (``type``), and how to answer."""
    return _schema({
        "action": {"type": "string", "enum": list(actions.ANTHROPIC_ACTIONS),
                   "description": "Anthropic computer_20250124/computer_20251124 action"},
        "coordinate": {**_POINT, "description": "[x, y] in screenshot pixels"},
        "start_coordinate": {**_POINT, "description": "left_click_drag's start, [x, y]"},
        "text": {"type": "string", "description": "type: the text; key/hold_key: xdotool keys "
                 "('ctrl+s', 'Return', 'shift+Tab'); clicks and scroll: modifiers held"},
        "duration": {"type": "number", "minimum": 0, "maximum": actions.MAX_WAIT_SECONDS,
                     "description": "wait and hold_key: seconds"},
        "scroll_direction": {"type": "string", "enum": list(actions.WHEEL)},
        "scroll_amount": {"type": "integer", "minimum": 1, "maximum": actions.MAX_SCROLL_AMOUNT},
        "region": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4,
                   "description": "zoom: [x0, y0, x1, y1] in screenshot pixels"},
        "type": {"type": "string", "enum": list(actions.OPENAI_ACTIONS),
                 "description": "OpenAI computer_use_preview action type (instead of 'action')"},
        "x": {"type": "number"}, "y": {"type": "number"},
        "button": {"type": "string", "enum": ["left", "right", "wheel", "back", "forward"]},
        "path": {"type": "array", "items": {"type": "object"}, "description": "drag: [{x, y}, ...]"},
        "keys": {"type": "array", "items": {"type": "string"}, "description": "keypress: ['CTRL', 'A']"},
        "scroll_x": {"type": "number"}, "scroll_y": {"type": "number"},
        **_ANSWER,
    })


def tool_list(remote: RemoteLike) -> list[dict[str, Any]]:
    """The tools (MCP ``Tool`` as JSON) for ``remote``: a browser remote has two more."""
    screen = Screen.of(remote.runtime.width, remote.runtime.height)
    size = f"{screen.shot_width}x{screen.shot_height}"
    tools = [
        {"name": "computer", "inputSchema": computer_schema(), "description": (
            f"Use the remote's screen (screenshots are {size} pixels; coordinates are "
            "screenshot pixels). Anthropic's computer actions, or OpenAI's action objects. "
            "Answers with the screenshot once the screen has settled, and the reward, done "
            "and episode since the last call.")},
        {"name": "reset", "description": "Begin a new episode (seed: the same seed, the same task).",
         "inputSchema": _schema({"seed": {"type": "integer", "minimum": 0}, "env_id": {"type": "string"},
                                 **_ANSWER})},
        {"name": "state", "inputSchema": _schema({}), "description": (
            "Reward since the last call, the episode's return, done, the episode id, the "
            "instruction, the last settle timing, who drives, the screenshot's size.")},
        {"name": "wait_until_settled",
         "description": "Wait until the screen is still (at most max_ms); the screenshot.",
         "inputSchema": _schema(dict(_ANSWER))},
        {"name": "seat", "description": (
            "Who drives: release hands the seat back (this client goes on watching); take_over "
            "seats this client in place of another client of this port (remotes with a password)."),
         "inputSchema": _schema({"action": {"type": "string", "enum": list(SEAT_ACTIONS)}}, ("action",))},
    ]
    if remote.runtime.snapshot_refusal is None:
        tools += [
            {"name": "snapshot", "description": (
                "Save the remote's state now: a token for restore (the remote keeps its newest "
                "ones), and with export: true the state's bytes as base64, restorable on another "
                "remote of the same env id."),
             "inputSchema": _schema({"export": {
                 "type": "boolean", "description": "also answer with the state's bytes (base64)"}})},
            {"name": "restore", "description": (
                "Go back to a snapshot's state (its token, or its exported bytes as state): a new "
                "branch of the episode; answers as reset does, with the restored screenshot."),
             "inputSchema": _schema({
                 "token": {"type": "string", "maxLength": MAX_TOKEN_CHARS, "description": "snapshot's token"},
                 "state": {"type": "string", "description": "snapshot's exported bytes, base64"},
                 **_ANSWER})},
        ]
    tools += desktop.tool_list(remote.runtime, _ANSWER)
    if remote.runtime.action_strings:
        tools += [
            {"name": "page", "inputSchema": _schema({}), "description": (
                "The page's structure: its accessibility tree as text, and its elements with "
                "their bid and their box and click point in screenshot pixels.")},
            {"name": "browser_action", "inputSchema": _schema(
                {"action": {"type": "string", "description": "BrowserGym action string: "
                            "click('a12'), fill('a7', 'text'), press('a7', 'Enter'), ..."}, **_ANSWER},
                ("action",)), "description": "Run a BrowserGym action string on the page's elements."},
        ]
    return tools


class Client:
    """One session of the tools: what it holds, what it has not been told yet."""

    def __init__(self, desk: Desk, name: str) -> None:
        self.desk, self.name = desk, name
        self.held = Held()
        self.reward = 0.0  # since the last answer
        self.done = False  # an episode ended since the last answer
        self.returns: dict[int, float] = {}
        self.instruction: str | None = None
        self.settle: dict[str, Any] | None = None
        self.ended: int | None = None  # the episode that ended since the last answer
        self.episode_began = asyncio.Event()  # set as each episode begins
        self.last_begun = desk.remote.episode_id  # the newest episode begun (reset done)
        self.lock = asyncio.Lock()  # one call at a time per session
        self.taken_by: str | None = None  # who took the seat over from it
        #: The last screenshot this session was sent (as scaled), for "screenshot": "changed".
        self.last_shot: np.ndarray | None = None
        remote = desk.remote
        remote.result_sinks.append(self._on_result)
        remote.episode_sinks.append(self._on_episode)
        self.closed = False

    def close(self) -> None:
        """The session ended: let go of the seat (and what it held) and stop listening."""
        if self.closed:
            return
        self.closed = True
        self.desk.release(self)
        remote = self.desk.remote
        remote.result_sinks.remove(self._on_result)
        remote.episode_sinks.remove(self._on_episode)

    def _on_result(self, episode_id: int, result: StepResult) -> None:
        if result.text is not None:
            self.instruction = result.text
        if result.reward:
            self.reward += result.reward
            self.returns[episode_id] = self.returns.get(episode_id, 0.0) + result.reward
        if result.done:
            self.done = True
            self.ended = episode_id

    def _on_episode(self, episode_id: int, seed: int, text: str | None) -> None:
        self.instruction = text
        self.last_begun = episode_id
        self.episode_began.set()
        for old in [e for e in self.returns if e < episode_id - agent_port.MAX_PENDING_EPISODES]:
            del self.returns[old]

    def told(self) -> dict[str, Any]:
        """What the client has not been told yet (then it has)."""
        remote = self.desk.remote
        out: dict[str, Any] = {"reward": self.reward, "done": self.done, "episode_id": remote.episode_id,
                               "episode_return": self.returns.get(remote.episode_id, 0.0)}
        if self.done and self.ended is not None:
            # (In real time the remote has begun the next one: the screenshot is its first.)
            out["ended_episode"] = {"episode_id": self.ended, "return": self.returns.get(self.ended, 0.0)}
        self.reward, self.done, self.ended = 0.0, False, None
        return out


class Desk:
    """The computer-use tools of one remote: its clients, who drives, each call."""

    def __init__(self, remote: RemoteLike, port_name: str = "MCP", take_over: bool = False) -> None:
        self.remote, self.port_name = remote, port_name
        #: Whether a client may take the seat from this port's driver (the port checks a password).
        self.take_over = take_over
        self.driver: Client | None = None
        #: What the driver held at each snapshot this port took (the newest MAX_SNAPSHOTS).
        self.held: dict[str, Held] = {}
        self._numbers = itertools.count(1)

    def client(self, peer: str = "") -> Client:
        """A new session's client (close it when the session ends)."""
        where = f" from {peer}" if peer else ""
        return Client(self, f"{self.port_name} session {next(self._numbers)}{where}")

    def held_by(self) -> str | None:
        """Which client of this port drives the remote (the other front ends ask)."""
        return f"an {self.port_name} client ({self.driver.name})" if self.driver is not None else None

    def seat_free(self) -> bool:
        """Nobody drives the remote, through this port or another."""
        return self.driver is None and self.remote.agent() is None

    def _seat(self, client: Client, args: dict[str, Any]) -> dict[str, Any]:
        action = args.get("action")
        if action == "release":
            was = self.driver is client
            self.release(client)
            return {"action": "release", "released": was, "driver": self.held_by() or self.remote.agent()}
        if action != "take_over":
            raise ToolError(f"seat takes action 'release' or 'take_over', not {str(action)[:20]!r}")
        if self.driver is not client and self.driver is not None:
            if not self.take_over:
                raise ToolError(f"{self.held_by()} drives this remote; taking over needs a remote with a "
                                "password (serve --password): here the seat frees when its driver releases "
                                "it or its session ends (its lease runs out once its host is gone)")
            gone = self.driver
            self.release(gone)  # (what it held is let go; its session goes on, watching)
            gone.taken_by = client.name
        self.take(client)
        return {"action": "take_over", "you_drive": True}

    def take(self, client: Client) -> None:
        """Seat ``client`` as the agent, or :class:`ToolError` naming who drives."""
        if self.driver is client:
            return
        remote = self.remote
        if remote.players > 1:
            raise ToolError(f"{remote.env_id} has {remote.players} players; computer-use tools drive "
                            "single-player remotes; this client may watch (screenshot, state)")
        holder = self.held_by() or remote.agent()
        if holder is not None:
            raise ToolError(f"{holder} drives this remote; one agent at a time: this client may "
                            "watch (computer screenshot, zoom, cursor_position; state; page) or act "
                            "once it has left")
        self.driver = client

    def release(self, client: Client) -> None:
        if self.driver is client:
            self.driver = None
            self.remote.client_left(observer=False)

    @property
    def screen(self) -> Screen:
        return Screen.of(self.remote.runtime.width, self.remote.runtime.height)

    # Calls ------------------------------------------------------------------------------

    async def call(self, client: Client, name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        """Tool ``name`` called by ``client``: its content; :class:`ToolError` refuses."""
        if not isinstance(args, dict):
            raise ToolError("a tool's arguments are a JSON object")
        _check_names(self.remote, name, args)
        _check_answer(args)  # before anything is sent
        async with client.lock:
            try:
                if name == "computer":
                    return await self._computer(client, args)
                if name == "reset":
                    return await self._reset(client, args)
                if name == "state":
                    return [_text(self._state(client))]
                if name == "seat":
                    return [_text(self._seat(client, args))]
                if name == "wait_until_settled":
                    return await self._answer(client, "wait_until_settled", args, settle=True)
                if name == "page" and self.remote.runtime.action_strings:
                    return [_text(await self._page())]
                if name == "browser_action" and self.remote.runtime.action_strings:
                    return await self._browser_action(client, args)
                if (bus := desktop.accessibility_of(self.remote.runtime)) is not None:
                    if name == "desktop_tree":
                        return [_text(await desktop.tree(bus, self.screen))]
                    if name == "desktop_action":
                        click = await desktop.element_click(bus, args, self.screen)
                        return await self._computer(client, click)
                if name in desktop.TOOLS and (io := desktop.io_of(self.remote.runtime)) is not None:
                    if desktop.acts(name, args):
                        self.take(client)
                    return [_text(await desktop.call(io, name, args))]
                if name in SNAPSHOT_TOOLS:
                    return await self._snapshot_tool(client, name, args)
            except Refused as exc:
                raise ToolError(exc.reason) from None
        names = ", ".join(t["name"] for t in tool_list(self.remote))
        raise ToolError(f"no tool {name[:40]!r} on this remote ({self.remote.env_id}): {names}")

    async def _computer(self, client: Client, args: dict[str, Any]) -> list[dict[str, Any]]:
        screen = self.screen
        held = copy.deepcopy(client.held)
        plan = actions.parse(args, screen, held)
        if plan.navigates and self.remote.runtime.action_strings:
            raise ToolError(
                f"button {plan.navigates!r} would move the browser's history (Alt+"
                f"{'Left' if plan.navigates == 'back' else 'Right'}) away from the task's page: a "
                "browser remote keeps its page and refuses navigation (docs/browser.md); nothing "
                "was sent. Click the page's own controls, or reset")
        if plan.acts:
            self.take(client)
            await self._run(plan)
            client.held = held
        if plan.cursor:
            x, y = screen.to_shot(*client.held.pointer)
            return [_text({"action": "cursor_position", "coordinate": [x, y], **client.told()})]
        if plan.zoom is not None:
            zoomed = self._image(self._zoom(plan.zoom, screen), args)
            return [zoomed, _text({"action": "zoom", **client.told()})]
        settle = plan.acts and args.get("settle", True)
        return await self._answer(client, plan.action, args, settle=bool(settle))

    async def _run(self, plan: Plan) -> None:
        remote = self.remote
        if remote.mode == LOCKSTEP:
            for step in plan.steps:
                frames = 1 if isinstance(step, list) else max(1, round(step * remote.fps))
                events = tuple(step) if isinstance(step, list) else ()
                await agent_port.step(remote, StepOrder(events=events, frames=frames))
            return
        for step in plan.steps:
            if isinstance(step, list):
                remote.action(ActOrder(events=tuple(step)))
            else:
                await asyncio.sleep(step)  # the action is to wait (wait, hold_key)

    async def _settle(self, max_ms: int) -> dict[str, Any]:
        """Wait for the screen to settle (browser, desktop) or the next frame (games)."""
        remote = self.remote
        started = time.monotonic()
        if remote.mode == LOCKSTEP:
            return {"settled_s": 0.0, "how": "lockstep: the step's frames are drawn"}
        try:
            async with asyncio.timeout(max_ms / 1000):
                if remote.runtime.settles:
                    body = await remote.act(ActOrder(settle=True))
                    out = dict(body.get("settle") or {})
                    out["how"] = "the screen was still"
                else:
                    await remote.wait_frame()
                    out = {"how": "the next frame"}
        except TimeoutError:
            out = {"how": f"not settled within max_ms {max_ms}", "deadline_hit": True}
        out["settled_s"] = round(time.monotonic() - started, 4)
        return out

    async def _next_episode(self, client: Client) -> None:
        """In real time, once an episode has ended, wait (at most NEXT_EPISODE_WAIT) for the
        automatic reset to begin the next, so the answer shows that episode's first screen
        (the answer raced the reset: its screenshot was the ended episode's, and no
        ``ended_episode`` said so)."""
        remote = self.remote
        if remote.mode == LOCKSTEP or not client.done or client.ended is None:
            return
        deadline = time.monotonic() + NEXT_EPISODE_WAIT
        while client.last_begun <= client.ended:  # (the id moves as a reset begins: the
            # sink says it is done, its first frame drawn)
            client.episode_began.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await client.episode_began.wait()

    async def _answer(
        self, client: Client, action: str, args: dict[str, Any], *, settle: bool
    ) -> list[dict[str, Any]]:
        """The screenshot (once settled, if asked) and what the client was not told yet."""
        max_ms = args.get("max_ms", DEFAULT_SETTLE_MS)
        info: dict[str, Any] = {"action": action}
        if settle:
            client.settle = info["settle"] = await self._settle(max_ms)
            await self._next_episode(client)
        info.update(client.told())
        if client.instruction:
            info["instruction"] = client.instruction
        mode = shots.shot_mode(args.get("screenshot", True))
        if mode == "none":
            return [_text(info)]
        image = self._shot(self.screen)
        pixels = np.asarray(image)
        if mode == "changed":
            box = shots.changed_box(client.last_shot, pixels)
            whole = box == (0, 0, image.width, image.height)
            info["screenshot"] = "unchanged" if box is None else "full" if whole else "changed"
            if box is None:
                return [_text(info)]
            if not whole:
                info["region"] = list(box)
                image = image.crop(box)
        client.last_shot = pixels
        return [self._image(image, args), _text(info)]

    async def _reset(self, client: Client, args: dict[str, Any]) -> list[dict[str, Any]]:
        seed, env_id = args.get("seed"), args.get("env_id")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise ToolError(f"'seed' is an integer >= 0, not {str(seed)[:20]}")
        self.take(client)
        try:
            await agent_port.reset(self.remote, ResetOrder(env_id=env_id, seed=seed))
        except ValueError as exc:  # a seat check of the barrier
            raise ToolError(str(exc)) from None
        client.held = Held()
        client.told()
        return await self._answer(client, "reset", {**args, "settle": False}, settle=False)

    async def _snapshot_tool(self, client: Client, name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        """``snapshot`` or ``restore`` through the remote's own path (``v0.env.snapshot``'s)."""
        refusal = self.remote.runtime.snapshot_refusal
        if refusal is not None:
            raise ToolError(f"{self.remote.env_id} cannot snapshot or restore: {refusal}")
        remote: Any = self.remote  # a Remote: its Restores part
        if name == "snapshot":
            export = args.get("export", False)
            if not isinstance(export, bool):
                raise ToolError(f"'export' is true or false, not {str(export)[:20]}")
            self.take(client)
            token, episode_id, frame, data = await remote.snapshot(export)
            self.held[token] = copy.deepcopy(client.held)
            while len(self.held) > MAX_SNAPSHOTS:
                self.held.pop(next(iter(self.held)))
            return [_text({"action": "snapshot", **snapshot_body(token, episode_id, frame, data),
                           "episode_id": episode_id})]
        if ("token" in args) == ("state" in args):
            raise ToolError("restore takes exactly one of 'token' (a snapshot's) or 'state' (its "
                            "exported bytes, base64, from snapshot with export: true)")
        try:
            request = parse_restore(None, 0.0, {"token": args.get("token"), "state": args.get("state")})
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        self.take(client)
        replied: dict[str, Any] = {}
        await remote.restore(request.token, request.state, OBS_VNC,
                             lambda episode_id, body=None: replied.update(body or {}))
        # What the driver held when the snapshot was taken (the runtime holds it again):
        # this port's record of its token, else (exported bytes) what the game's state has.
        kept = self.held.get(request.token or "")
        if kept is None:
            keys, (x, y, buttons) = self.remote.runtime.held_input()
            kept = Held(set(keys), (x, y), buttons)
        client.held = copy.deepcopy(kept)
        client.told()
        out = await self._answer(client, "restore", {**args, "settle": False}, settle=False)
        out[-1] = _text({**orjson.loads(out[-1]["text"]), "restored": replied.get("restored")})
        return out

    def _state(self, client: Client) -> dict[str, Any]:
        remote, screen = self.remote, self.screen
        return {
            **client.told(), "instruction": client.instruction, "settle": client.settle,
            "env_id": remote.env_id, "mode": remote.mode, "frame": remote.frame,
            "remote_state": remote.describe().get("remote_state"),
            "screenshot_size": [screen.shot_width, screen.shot_height],
            "screen_size": [screen.width, screen.height],
            "driver": self.held_by() or remote.agent(), "you_drive": self.driver is client,
        }

    async def _page(self) -> dict[str, Any]:
        page = (await self.remote.page(frozenset({"elements", "tree"}))).get("page", {})
        screen = self.screen
        elements = []
        for element in page.get("elements", []):
            out = dict(element)
            x, y, w, h = element["bbox"]
            x0, y0 = screen.to_shot(max(0, int(x)), max(0, int(y)))
            x1, y1 = screen.to_shot(max(0, int(x + w)), max(0, int(y + h)))
            out["bbox"] = [x0, y0, x1 - x0, y1 - y0]
            if "point" in element:
                px, py = element["point"]
                out["point"] = list(screen.to_shot(max(0, int(px)), max(0, int(py))))
            elements.append(out)
        tree = page.get("axtree") or ""
        return {"tree": tree[:MAX_TREE_CHARS], "elements": elements,
                "screenshot_size": [screen.shot_width, screen.shot_height]}

    async def _browser_action(self, client: Client, args: dict[str, Any]) -> list[dict[str, Any]]:
        action = args.get("action")
        if not isinstance(action, str) or not action:
            raise ToolError("'action' is a BrowserGym action string: click('a12'), fill('a7', 'hello')")
        self.take(client)
        if self.remote.mode == LOCKSTEP:
            _, body = await agent_port.step(self.remote, StepOrder(web=action, frames=1))
            error = body.get("info", {}).get("web.last_action_error")
        else:
            done = await self.remote.act(ActOrder(web=action))
            error = done.get("last_action_error")
        out = await self._answer(client, "browser_action", args, settle=bool(args.get("settle", True)))
        if error:
            out[-1] = _text({**orjson.loads(out[-1]["text"]), "last_action_error": error})
        return out

    # Images -----------------------------------------------------------------------------

    def _shot(self, screen: Screen) -> Any:
        from PIL import Image

        image = Image.fromarray(np.ascontiguousarray(self.remote.screen()))
        if screen.scaled:
            image = image.resize((screen.shot_width, screen.shot_height), Image.Resampling.LANCZOS)
        return image

    def _zoom(self, box: tuple[int, int, int, int], screen: Screen) -> Any:
        """The native box, scaled to fill the screenshot's size keeping its aspect."""
        from PIL import Image

        x0, y0, x1, y1 = box
        crop = Image.fromarray(np.ascontiguousarray(self.remote.screen()[y0:y1, x0:x1]))
        scale = min(screen.shot_width / crop.width, screen.shot_height / crop.height)
        size = (max(1, round(crop.width * scale)), max(1, round(crop.height * scale)))
        return crop.resize(size, Image.Resampling.LANCZOS) if size != crop.size else crop

    @staticmethod
    def _image(image: Any, args: dict[str, Any]) -> dict[str, Any]:
        form = args.get("format", "png")
        buffer = io.BytesIO()
        if form == "png":
            image.save(buffer, "PNG", compress_level=PNG_LEVEL)
        else:
            image.save(buffer, "JPEG", quality=JPEG_QUALITY)
        return {"type": "image", "data": base64.b64encode(buffer.getvalue()).decode(),
                "mimeType": f"image/{form}"}


def _check_names(remote: RemoteLike, name: str, args: dict[str, Any]) -> None:
    """:class:`ToolError` for an argument the tool does not take (its schema's properties)."""
    for tool in tool_list(remote):
        if tool["name"] == name:
            known = tool["inputSchema"]["properties"]
            unknown = sorted(set(args) - set(known))
            if unknown:
                raise ToolError(f"{name} takes no argument {unknown[0][:40]!r}; it takes "
                                f"{', '.join(known) or 'none'}")
            return


def _check_answer(args: dict[str, Any]) -> None:
    """:class:`ToolError` for a bad ``max_ms``, ``screenshot`` or ``format`` (OpenEnv's
    messages have no schema check)."""
    max_ms = args.get("max_ms", DEFAULT_SETTLE_MS)
    if not isinstance(max_ms, int) or isinstance(max_ms, bool) or not 0 <= max_ms <= MAX_SETTLE_MS:
        raise ToolError(f"'max_ms' is milliseconds from 0 to {MAX_SETTLE_MS}, not {str(max_ms)[:20]}")
    shots.shot_mode(args.get("screenshot", True))
    if args.get("format", "png") not in FORMATS:
        raise ToolError(f"'format' is png or jpeg, not {str(args.get('format'))[:20]!r}")


def _text(body: dict[str, Any]) -> dict[str, Any]:
    return {"type": "text", "text": orjson.dumps(body, default=str).decode()}
