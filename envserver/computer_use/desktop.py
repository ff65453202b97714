"""An X desktop's clipboard and folder as tools (``clipboard``, ``files``), listed on
remotes whose runtime has them (``x11.*``: :class:`runtimes.desktop_io.DesktopIO`), and
its programs' accessible elements (``desktop_tree``, ``desktop_action``) on those served
with ``--option accessibility=true`` (:mod:`runtimes.atspi`).

Setting the clipboard and putting a file change the desktop, so they take the seat as
any action does; getting and listing only look, as a screenshot does; a click on an
element is a ``computer`` click at its centre (real X input), so it is one too.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any, Final

from runtimes.atspi import Accessibility, AccessibilityUnavailable, render
from runtimes.desktop_io import MAX_CLIPBOARD_CHARS, MAX_PUT_BYTES, DeskRefused, DesktopIO

from .actions import Screen
from .errors import ToolError

TOOLS: Final = ("clipboard", "files")
#: An element action -> the ``computer`` action done at its centre.
ELEMENT_ACTIONS: Final = {"click": "left_click", "double_click": "double_click",
                          "right_click": "right_click"}
CLIPBOARD_ACTIONS: Final = ("get", "set")
FILE_ACTIONS: Final = ("list", "get", "put")


def io_of(runtime: object) -> DesktopIO | None:
    """The runtime's clipboard and folder, if it has them."""
    io = getattr(runtime, "desktop", None)
    return io if isinstance(io, DesktopIO) else None


def accessibility_of(runtime: object) -> Accessibility | None:
    """The runtime's accessibility bus, if it was asked for."""
    bus = getattr(runtime, "accessibility", None)
    return bus if isinstance(bus, Accessibility) else None


def tool_list(runtime: object, answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools (MCP ``Tool`` as JSON) of ``runtime``'s desktop, if it has one
    (``answer``: the acting tools' answer arguments)."""
    if io_of(runtime) is None:
        return []
    tree = []
    if accessibility_of(runtime) is not None:
        tree = [
            {"name": "desktop_tree", "inputSchema": {"type": "object", "properties": {},
                                                     "additionalProperties": False},
             "description": (
                 "The desktop programs' accessible elements (AT-SPI: GTK, Qt): the tree as text, "
                 "and each element's id, role, name, value, states, box and click point in "
                 "screenshot pixels.")},
            {"name": "desktop_action", "description": (
                "Click an element of desktop_tree by its id (real input at its centre, where it "
                "is now); answers as computer does."),
             "inputSchema": {"type": "object", "required": ["element"], "additionalProperties": False,
                             "properties": {
                                 "action": {"type": "string", "enum": list(ELEMENT_ACTIONS),
                                            "description": "click (the default), double_click, right_click"},
                                 "element": {"type": "string", "description": "an id: 'e12'"},
                                 **answer}}},
        ]

    def schema(properties: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": properties, "required": ["action"],
                "additionalProperties": False}

    return [
        {"name": "clipboard", "description": (
            "The desktop's clipboard: get its text (what a program last copied, or what was set), "
            "or set it (then paste with ctrl+v). Latin-1 text."),
         "inputSchema": schema({
             "action": {"type": "string", "enum": list(CLIPBOARD_ACTIONS)},
             "text": {"type": "string", "maxLength": MAX_CLIPBOARD_CHARS, "description": "set: the text"}})},
        {"name": "files", "description": (
            "Files in the remote's folder, the program's working directory ($UNIVERSE_REMOTE_FILES; "
            "emptied at each reset): list them, get one (text, or base64 data), put one."),
         "inputSchema": schema({
             "action": {"type": "string", "enum": list(FILE_ACTIONS)},
             "path": {"type": "string", "description": "a path inside the folder: 'notes.txt', 'in/a.csv'"},
             "text": {"type": "string", "description": "put: the file's text (UTF-8)"},
             "data": {"type": "string", "description": f"put: the file's bytes, base64 (at most "
                                                       f"{MAX_PUT_BYTES} bytes)"}})},
        *tree,
    ]


def acts(name: str, args: dict[str, Any]) -> bool:
    """Whether the call changes the desktop (so only its driver may make it)."""
    return args.get("action") in ("set", "put")


async def call(io: DesktopIO, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Tool ``name``'s answer (JSON text); :class:`ToolError` says what was wrong."""
    try:
        if name == "clipboard":
            return _clipboard(io, args)
        return await asyncio.to_thread(_files, io, args)
    except DeskRefused as exc:
        raise ToolError(str(exc)) from None


def _clipboard(io: DesktopIO, args: dict[str, Any]) -> dict[str, Any]:
    action = args.get("action")
    if action == "get":
        return {"action": "get", "text": io.clipboard()}
    if action == "set":
        io.set_clipboard(args.get("text"))
        return {"action": "set", "chars": len(args["text"])}
    raise ToolError(f"clipboard takes action 'get' or 'set' (with 'text'), not {str(action)[:20]!r}")


def _files(io: DesktopIO, args: dict[str, Any]) -> dict[str, Any]:
    action, sandbox = args.get("action"), io.sandbox
    if action == "list":
        return {"action": "list", "folder": str(io.folder), "files": sandbox.listing()}
    if action == "get":
        data = sandbox.get(args.get("path"))
        out: dict[str, Any] = {"action": "get", "path": args["path"], "bytes": len(data)}
        try:
            out["text"] = data.decode()
        except UnicodeDecodeError:
            out["data"] = base64.b64encode(data).decode()
        return out
    if action == "put":
        if ("text" in args) == ("data" in args):
            raise ToolError("files put takes 'path' and one of 'text' (UTF-8) or 'data' (base64)")
        if "text" in args:
            if not isinstance(args["text"], str):
                raise ToolError("'text' is a string")
            data = args["text"].encode()
        else:
            try:
                data = base64.b64decode(str(args["data"]), validate=True)
            except (binascii.Error, ValueError):
                raise ToolError("'data' is the file's bytes in base64 (RFC 4648, no line breaks)") from None
        size = sandbox.put(args.get("path"), data)
        return {"action": "put", "path": args["path"], "bytes": size, "folder": str(io.folder)}
    raise ToolError(f"files takes action 'list', 'get' or 'put', not {str(action)[:20]!r}")


async def tree(bus: Accessibility, screen: Screen) -> dict[str, Any]:
    """``desktop_tree``'s answer: the text tree and the elements, boxes in screenshot pixels."""
    try:
        elements = await bus.tree()
    except (AccessibilityUnavailable, LookupError, TimeoutError) as exc:
        raise ToolError(f"the desktop's accessibility bus did not answer ({exc}); reset the remote") from None
    out = []
    for e in elements:
        item: dict[str, Any] = {"id": e.id, "role": e.role, "name": e.name, "states": e.states}
        if e.value is not None:
            item["value"] = e.value
        if e.box is not None and (shot := _shot_box(e.box, screen)) is not None:
            item["bbox"], item["point"] = shot
        out.append(item)
    return {"tree": render(elements), "elements": out,
            "screenshot_size": [screen.shot_width, screen.shot_height]}


def _shot_box(box: tuple[int, int, int, int], screen: Screen) -> tuple[list[int], list[int]] | None:
    """A screen box as a screenshot box ``[x, y, w, h]`` and its centre; None when off the screen."""
    x, y, w, h = box
    left, top = max(0, x), max(0, y)
    right, bottom = min(screen.width, x + w), min(screen.height, y + h)
    if left >= right or top >= bottom:
        return None
    x0, y0 = screen.to_shot(left, top)
    x1, y1 = screen.to_shot(right - 1, bottom - 1)
    centre = screen.to_shot((left + right - 1) // 2, (top + bottom - 1) // 2)
    return [x0, y0, x1 - x0 + 1, y1 - y0 + 1], list(centre)


async def element_click(bus: Accessibility, args: dict[str, Any], screen: Screen) -> dict[str, Any]:
    """``desktop_action``'s arguments as a ``computer`` click at the element's centre now."""
    action, element = args.get("action", "click"), args.get("element")
    if action not in ELEMENT_ACTIONS:
        raise ToolError(f"desktop_action's action is {', '.join(ELEMENT_ACTIONS)}, not {str(action)[:20]!r}")
    if not isinstance(element, str):
        raise ToolError("'element' is an element's id from desktop_tree: 'e12'")
    try:
        box = await bus.box(element)
    except (LookupError, TimeoutError, AccessibilityUnavailable) as exc:
        raise ToolError(str(exc) or f"element {element} did not answer; read the tree again") from None
    shot = _shot_box(box, screen)
    if shot is None:
        raise ToolError(f"element {element} is off the screen ({box}); it cannot be clicked")
    rest = {k: v for k, v in args.items() if k not in ("action", "element")}
    return {"action": ELEMENT_ACTIONS[action], "coordinate": shot[1], **rest}
