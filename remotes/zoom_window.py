"""A window that shows a remote's screen zoomed: what ``render_mode="human"`` and
``universe-remote watch`` open.

Holds :func:`zoom_for` (the integer zoom a screen gets), :func:`watch` (the window) and
:func:`main` (``python -m remotes.zoom_window``, the process :mod:`remotes.human` starts).

Our games draw 160x210 screens; TigerVNC's viewer has no scaling, so it showed them at
1x, a stamp on a laptop's screen, a third of it under its "Press F8" notice. This window
is a VNC viewer of our own (:class:`vncdriver.VNCClient`, shared, view only: it sends no
input) that draws each new picture at an integer zoom (nearest neighbour: pixels stay
square, as the agent sees them), in Tk (the standard library's GUI). It closes by itself
when the remote goes away.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from rewarder.auth import PASSWORD_ENV
from vncdriver.addresses import parse_address
from vncdriver.client import VNCClient

from .address import RemoteAddress
from .listening import nothing_listens

log = logging.getLogger(__name__)

#: The size a small screen is zoomed towards: a window about this big (3x a 160x210
#: game), without going past it.
TARGET_WIDTH: Final = 640
TARGET_HEIGHT: Final = 640
#: The largest zoom (a screen smaller than this fraction of the target stays small).
MAX_ZOOM: Final = 4
#: The share of the display a zoomed window may cover at most.
DISPLAY_SHARE: Final = 0.9
#: Milliseconds between two looks for a new picture (the remote draws 60 a second).
FRAME_MS: Final = 16
#: Seconds to connect (the remote is running: it is being watched).
CONNECT_TIMEOUT: Final = 30.0


def zoom_for(width: int, height: int, display: tuple[int, int] | None = None) -> int:
    """The integer zoom of a ``width`` x ``height`` screen: as large as fits the target
    size (and :data:`DISPLAY_SHARE` of ``display``, when known), at most :data:`MAX_ZOOM`,
    at least 1."""
    if width <= 0 or height <= 0:
        return 1
    zoom = min(MAX_ZOOM, TARGET_WIDTH // width, TARGET_HEIGHT // height)
    if display is not None:
        zoom = min(zoom, int(display[0] * DISPLAY_SHARE) // width, int(display[1] * DISPLAY_SHARE) // height)
    return max(1, zoom)


def _ppm(frame: np.ndarray) -> bytes:
    """``uint8[H, W, 3]`` as a binary PPM, the format Tk's photo images read from memory."""
    height, width = frame.shape[:2]
    return b"P6 %d %d 255\n" % (width, height) + np.ascontiguousarray(frame).tobytes()


class _Remote:
    """The VNC connection, on an event loop in a thread of its own (Tk owns the main one)."""

    def __init__(self, address: str, password: str | None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="zoom-window", daemon=True)
        self.thread.start()
        self.client = VNCClient(address, password=password, start_timeout=CONNECT_TIMEOUT,
                                shared=True, name=address)
        self._run(self.client.start(), CONNECT_TIMEOUT + 5)

    def _run(self, coroutine: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _frame(self) -> tuple[int, np.ndarray] | None:
        if not self.client.connected:
            return None
        return self.client.updates, self.client.frame()

    def frame(self) -> tuple[int, np.ndarray] | None:
        """(update number, a copy of the picture), or None once the connection ended."""
        result: tuple[int, np.ndarray] | None = self._run(self._frame(), CONNECT_TIMEOUT)
        return result

    def close(self) -> None:
        try:
            self._run(self.client.close(), CONNECT_TIMEOUT)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(CONNECT_TIMEOUT)


def watch(
    address: str, password: str | None = None, zoom: int | None = None, title: str | None = None
) -> int:
    """Show ``address``'s screen until the window is closed or the remote goes (0), or
    the remote cannot be reached (1). ``zoom``: None picks :func:`zoom_for`'s."""
    import tkinter

    why = _nothing_listens(address)
    if why is not None:  # at once, as RemoteEnv does, not after CONNECT_TIMEOUT of retries
        print(f"universe-remote watch: cannot watch {address}: {why}", file=sys.stderr)
        return 1
    try:
        remote = _Remote(address, password)
    except Exception as exc:  # refused, wrong password, nothing there: say so and stop
        print(f"universe-remote watch: cannot watch {address}: {exc}", file=sys.stderr)
        return 1
    try:
        root = tkinter.Tk(className="universe-remote")
        display = (root.winfo_screenwidth(), root.winfo_screenheight())
        small = tkinter.PhotoImage(master=root)
        big = tkinter.PhotoImage(master=root)
        label = tkinter.Label(root, image=big, borderwidth=0, background="black")
        label.pack()
        shown: dict[str, Any] = {"update": -1, "size": None, "zoom": 1}

        def draw() -> None:
            got = remote.frame()
            if got is None:  # the remote went away: so does its window
                root.destroy()
                return
            update, frame = got
            if update != shown["update"]:
                height, width = frame.shape[:2]
                if shown["size"] != (width, height):
                    shown["size"] = (width, height)
                    shown["zoom"] = zoom or zoom_for(width, height, display)
                    big.configure(width=width * shown["zoom"], height=height * shown["zoom"])
                    root.title(f"{title or address} ({shown['zoom']}x) - universe-remote")
                small.configure(data=_ppm(frame), format="PPM")
                big.tk.call(big.name, "copy", small.name, "-zoom", shown["zoom"], shown["zoom"])
                shown["update"] = update
            root.after(FRAME_MS, draw)

        draw()
        root.mainloop()
    except tkinter.TclError as exc:  # no display, or it went away
        print(f"universe-remote watch: no window: {exc}", file=sys.stderr)
        return 1
    finally:
        remote.close()
    return 0


def _nothing_listens(address: str) -> str | None:
    """Why nothing can answer at ``address`` soon (:func:`remotes.listening.nothing_listens`:
    loopback, refused, and no remote starting here), else None (then connect as usual)."""
    try:
        host, port = parse_address(address)
    except ValueError:
        return None  # the connect says what is wrong with it
    return asyncio.run(nothing_listens(RemoteAddress(host, port, None)))


def can_zoom() -> bool:
    """Whether this Python has Tk (Debian's python3-tk) to draw the window with."""
    try:
        import tkinter  # noqa: F401
    except ImportError:
        return False
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``watch``'s arguments (``universe-remote watch`` and ``python -m remotes.zoom_window``)."""
    parser.add_argument("address", metavar="ADDRESS",
                        help="the remote's VNC address: 127.0.0.1::5900, vnc://127.0.0.1:5900+15900")
    parser.add_argument("--zoom", type=int, default=None, metavar="N",
                        help=f"draw each pixel N x N (default: what makes a window about "
                             f"{TARGET_WIDTH}x{TARGET_HEIGHT}, at most {MAX_ZOOM})")
    parser.add_argument("--title", default=None, help="the window's title (default: the address)")


def vnc_address(text: str) -> tuple[str, str | None]:
    """The VNC address for :class:`VNCClient` and the password an agent address carries
    (``vnc://host:5900+15900?password=...``); a VNC address (``host::5900``) as it is."""
    if "://" not in text:
        return text, None
    from .address import parse_remotes

    (remote, *_), password = parse_remotes(text)
    if remote.vnc is None:
        raise ValueError(f"{text!r} names no VNC port to watch")
    return remote.vnc, password


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m remotes.zoom_window", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.zoom is not None and args.zoom < 1:
        parser.error(f"--zoom must be 1 or more, not {args.zoom}")
    address, password = vnc_address(args.address)
    return watch(address, password or os.environ.get(PASSWORD_ENV) or None, args.zoom, args.title)


if __name__ == "__main__":
    sys.exit(main())
