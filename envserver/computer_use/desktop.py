"""An X desktop's clipboard and folder as tools (``clipboard``, ``files``), listed on
remotes whose runtime has them (``x11.*``: :class:`runtimes.desktop_io.DesktopIO`).

Setting the clipboard and putting a file change the desktop, so they take the seat as
any action does; getting and listing only look, as a screenshot does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any, Final

from runtimes.desktop_io import MAX_CLIPBOARD_CHARS, MAX_PUT_BYTES, DeskRefused, DesktopIO

from .errors import ToolError

TOOLS: Final = ("clipboard", "files")
CLIPBOARD_ACTIONS: Final = ("get", "set")
FILE_ACTIONS: Final = ("list", "get", "put")


def io_of(runtime: object) -> DesktopIO | None:
    """The runtime's clipboard and folder, if it has them."""
    io = getattr(runtime, "desktop", None)
    return io if isinstance(io, DesktopIO) else None


def tool_list(runtime: object) -> list[dict[str, Any]]:
    """The tools (MCP ``Tool`` as JSON) of ``runtime``'s desktop, if it has one."""
    if io_of(runtime) is None:
        return []

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
