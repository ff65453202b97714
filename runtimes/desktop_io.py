"""What an agent moves in and out of an X desktop besides input and pixels: the
clipboard, and files in a folder the program sees (docs/computer-use.md, "Clipboard and
files").

Holds :class:`DesktopIO` (one per X11 runtime), :class:`Sandbox` (a folder that names
resolve inside of, or are refused) and their limits. A refusal is :class:`DeskRefused`,
whose message says what was wrong and what to send instead.

**Clipboard.** It travels over the runtime's own connection to Xvnc (RFB's cut text), not
through a helper program: Xvnc owns the X selections (CLIPBOARD and PRIMARY) when a client
sets its clipboard, and sends the CLIPBOARD's text when an X program takes it (the
runtime's display has ``-SendCutText=1 -SendPrimary=0``: a mere text selection is not a
copy). RFB's cut text is Latin-1: other characters cannot be set, and arrive as ``?``.
Xvnc does not speak X's INCR transfer, so a copy a program hands over in pieces (GTK 3's
over about 256 KB, Tk's over a few KB) never arrives: the clipboard holds the copy before.

**Files.** Each runtime has a folder of its own (a temporary directory, removed with
the runtime), emptied at every reset so that an episode starts alike; the program runs in
it (its working directory) and finds it in ``$UNIVERSE_REMOTE_FILES``. Names are
relative paths inside it: an absolute path, ``..``, or a link that leads out is refused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from vncdriver.client import VNCClient

#: Most bytes a file put may hold: base64 makes it 4/3 larger, and it must fit one MCP
#: request (MAX_REQUEST_BYTES, 1 MiB).
MAX_PUT_BYTES: Final = 512 * 1024
#: Most bytes a file get answers with: one answer a host holds in memory and a model reads.
MAX_GET_BYTES: Final = 8 * 1024 * 1024
#: Most bytes the folder may hold after a put: an agent cannot fill the remote's disk.
MAX_FOLDER_BYTES: Final = 64 * 1024 * 1024
#: Entries a listing names (a program may make many more).
MAX_LISTED: Final = 1000
#: Characters of a file's path inside the folder.
MAX_PATH_CHARS: Final = 255
#: Characters the clipboard may be set to (well inside one MCP request).
MAX_CLIPBOARD_CHARS: Final = 100_000
#: The variable that tells the program where its folder is.
FILES_ENV: Final = "UNIVERSE_REMOTE_FILES"
#: Xvnc options of a desktop whose clipboard the agent reads (see the module's docstring).
CLIPBOARD_ARGS: Final = ("-SendCutText=1", "-SendPrimary=0")


class DeskRefused(ValueError):
    """A clipboard or file request that cannot be done; the message says why and what to do."""


class Sandbox:
    """A folder whose files an agent may put and get by relative path."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, name: object) -> Path:
        """The file ``name`` names inside the folder, or :class:`DeskRefused`."""
        if not isinstance(name, str) or not name.strip():
            raise DeskRefused("'path' is a file's path inside the remote's folder, like 'notes.txt' "
                              "or 'in/data.csv'")
        if len(name) > MAX_PATH_CHARS or "\0" in name:
            raise DeskRefused(f"'path' is at most {MAX_PATH_CHARS} characters with no NUL")
        pure = PurePosixPath(name)
        if pure.is_absolute() or ".." in pure.parts:
            raise DeskRefused(f"path {name[:60]!r} leads out of the remote's folder: give a path "
                              "inside it, relative, with no '..' ('notes.txt', 'in/data.csv')")
        root = self.root.resolve()
        full = (root / pure).resolve()
        if full == root or not full.is_relative_to(root):
            raise DeskRefused(f"path {name[:60]!r} leads out of the remote's folder (through a link): "
                              "give a path inside it")
        return full

    def put(self, name: object, data: bytes) -> int:
        """Write ``data`` to file ``name`` (its folders made as needed); its size."""
        path = self.path(name)
        if len(data) > MAX_PUT_BYTES:
            raise DeskRefused(f"a file put holds at most {MAX_PUT_BYTES} bytes, not {len(data)}: "
                              "split it, or have the program fetch it")
        if path.is_dir():
            raise DeskRefused(f"{name!s:.60} is a folder in the remote's folder; name a file")
        old = path.stat().st_size if path.is_file() else 0
        if self.size() - old + len(data) > MAX_FOLDER_BYTES:
            raise DeskRefused(f"the remote's folder would hold more than {MAX_FOLDER_BYTES} bytes; "
                              "get or leave out files first (a reset empties it)")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.put")
            temporary.write_bytes(data)
            os.replace(temporary, path)
        except OSError as exc:
            raise DeskRefused(f"cannot write {name!s:.60}: {exc.strerror}") from None
        return len(data)

    def get(self, name: object) -> bytes:
        """File ``name``'s bytes, or :class:`DeskRefused` (missing, a folder, too big)."""
        path = self.path(name)
        if not path.is_file():
            what = "a folder" if path.is_dir() else "not there"
            raise DeskRefused(f"{name!s:.60} is {what} in the remote's folder; files there: "
                              f"{', '.join(str(e['path']) for e in self.listing()[:20]) or 'none'}")
        size = path.stat().st_size
        if size > MAX_GET_BYTES:
            raise DeskRefused(f"{name!s:.60} holds {size} bytes; a get answers at most {MAX_GET_BYTES}")
        try:
            return path.read_bytes()[:MAX_GET_BYTES]
        except OSError as exc:
            raise DeskRefused(f"cannot read {name!s:.60}: {exc.strerror}") from None

    def listing(self) -> list[dict[str, object]]:
        """The folder's files (``path``, ``bytes``), at most :data:`MAX_LISTED`, by path."""
        out: list[dict[str, object]] = []
        for directory, folders, files in os.walk(self.root):
            folders.sort()
            for file in sorted(files):
                path = Path(directory, file)
                if path.is_file() and not path.is_symlink():
                    out.append({"path": path.relative_to(self.root).as_posix(),
                                "bytes": path.stat().st_size})
                    if len(out) >= MAX_LISTED:
                        return out
        return out

    def size(self) -> int:
        return sum(int(e["bytes"]) for e in self.listing())  # type: ignore[call-overload]

    def clear(self) -> None:
        """Empty the folder (a new episode)."""
        for entry in self.root.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


class DesktopIO:
    """An X desktop's clipboard (over the runtime's connection to Xvnc) and its folder."""

    def __init__(self, screen: Callable[[], VNCClient | None]) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="universe-x11-files-")  # removed with us
        self.sandbox = Sandbox(Path(self._folder.name))
        #: The runtime's connection to the display, while it is up.
        self._screen = screen

    @property
    def folder(self) -> Path:
        return self.sandbox.root

    def clipboard(self) -> str | None:
        """The clipboard's text as the remote last heard it (None: nothing was copied yet)."""
        screen = self._screen()
        return screen.clipboard if screen is not None else None

    def set_clipboard(self, text: object) -> None:
        """Set the desktop's clipboard (CLIPBOARD and PRIMARY) to ``text``."""
        if not isinstance(text, str):
            raise DeskRefused("clipboard set takes 'text', a string")
        if len(text) > MAX_CLIPBOARD_CHARS:
            raise DeskRefused(
                f"the clipboard takes at most {MAX_CLIPBOARD_CHARS} characters, not {len(text)}")
        try:
            text.encode("latin-1")
        except UnicodeEncodeError as exc:
            raise DeskRefused(
                f"the X clipboard reaches the desktop as Latin-1 text (RFB's cut text): "
                f"{text[exc.start:exc.start + 1]!r} at {exc.start} is not Latin-1; type it instead "
                "(computer action 'type')") from None
        screen = self._screen()
        if screen is None or not screen.connected:
            raise DeskRefused("the X display is not up; reset the remote first")
        screen.cut_text(text)
        screen.clipboard = text  # Xvnc owns the selection now, and does not echo it back

    def close(self) -> None:
        self._folder.cleanup()
