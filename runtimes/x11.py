"""Any X program on a TigerVNC display, as a remote with no reward: ``x11.<Program>-v0``.

Holds :class:`X11Runtime` (one X program on one Xvnc display), :data:`PROGRAMS` (the
fixed table of programs offered by name), :class:`X11Command` (``x11.Command-v0``: the
command in :data:`COMMAND_ENV`), :class:`CommandMissing` and :data:`RUNTIMES`, the table
``runtimes.registry`` reads. Only the programs of :data:`PROGRAMS` that are installed
(``shutil.which``) get an env id; ``x11-apps`` brings xeyes, xclock, xlogo and xcalc,
``xterm`` brings xterm. Importing this module raises
:class:`~runtimes.xdisplay.ProgramMissing` (a ModuleNotFoundError) when Xvnc is not
installed: the registry then lists no ``x11.*`` ids and ``serve`` names the package.

**Screen.** The program draws on an Xvnc display of :data:`SCREEN_WIDTH` x
:data:`SCREEN_HEIGHT` (``serve --option screen=WxH`` for another size, between
:data:`MIN_SCREEN` and :data:`MAX_SCREEN`: :func:`parse_screen`) with no window manager,
which the remote reads over a Unix socket and serves from its own VNC server
(``runtimes.xruntime``). The programs of the table are asked to fill it (``-geometry
WxH+0+0``; xterm gets a terminal-sized window at the top left); a command runs as given,
so its window goes wherever the program puts it.

**Episodes.** There is no reward (always 0) and no end: an episode lasts until a client
resets, or until the program exits by itself. Then the episode ends (``done``) with
``info["x11.exit_code"]`` (the exit status; -N when signal N killed it) and the remote
starts the next one. Every reset stops the program (with its process group) and starts
it afresh; the seed is ignored, since an X program has no seed to take. A program that
keeps exiting within :data:`QUICK_EXIT` seconds is restarted after a growing pause
(:data:`RESTART_DELAY` doubling up to :data:`RESTART_DELAY_MAX`), not in a tight loop.
Real time only: an X program cannot be stepped frame by frame, so there is no lockstep.

**Input.** Viewers' and agents' input over VNC, the rewarder's (``v0.agent.action``) and
MCP's, any X key and the three buttons, reach the program as real X input through the
remote's connection to the display. :data:`KEYS` lists the common keys, for samplers and
front ends with a fixed key vector (dm_env_rpc, OpenEnv's key field).

**Besides input and pixels** (docs/computer-use.md): the clipboard and a folder that is
the program's working directory (:attr:`X11Runtime.desktop`, ``runtimes.desktop_io``),
and with ``--option accessibility=true`` its accessible elements
(:attr:`X11Runtime.accessibility`, ``runtimes.atspi``).

**Any command.** ``x11.Command-v0`` runs the command in ``$UNIVERSE_REMOTE_X11_COMMAND``,
read when the runtime is made and split like a shell would (``shlex``) but not run by one
(write ``sh -c '...'`` for pipes or ``&&``)::

    UNIVERSE_REMOTE_X11_COMMAND='xlogo -fg red' universe-remote serve x11.Command-v0
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import shlex
import shutil
import time
from typing import Any, ClassVar, Final

from vncdriver import keysyms

from .atspi import Accessibility, check_installed
from .base import StepResult
from .desktop_io import CLIPBOARD_ARGS, FILES_ENV, DesktopIO
from .errors import RuntimeFailure
from .xdisplay import XVNC_PACKAGE, XProgram, find_program, log_tail
from .xruntime import DisplayRuntime

log = logging.getLogger(__name__)

# Screen ------------------------------------------------------------------------------------

SCREEN_WIDTH: Final = 1024
SCREEN_HEIGHT: Final = 768
#: Frames per second of the remote's loop: it only forwards input and watches the program.
FPS: Final = 60.0
#: X Toolkit option that makes a program's window fill the screen (no window manager);
#: a runtime of another size (``screen=WxH``) gives its own size instead.
FILL_SCREEN: Final = ("-geometry", f"{SCREEN_WIDTH}x{SCREEN_HEIGHT}+0+0")
#: ``screen=WxH`` bounds: below QVGA no program's window fits; above 4K UHD a frame is
#: over 25 MB per copy (the remote keeps several) and no computer-use model sees it whole.
MIN_SCREEN: Final = (320, 240)
MAX_SCREEN: Final = (3840, 2160)

# Programs ----------------------------------------------------------------------------------

#: Name in the env id -> argv. Only those whose program is on PATH become env ids.
PROGRAMS: Final[dict[str, tuple[str, ...]]] = {
    "XEyes": ("xeyes", *FILL_SCREEN),
    "XClock": ("xclock", "-update", "1", *FILL_SCREEN),
    "XLogo": ("xlogo", *FILL_SCREEN),
    "XCalc": ("xcalc", *FILL_SCREEN),
    "XTerm": ("xterm", "-geometry", "120x40+0+0"),  # xterm's geometry is in characters
}
#: Environment variable holding the command ``x11.Command-v0`` runs.
COMMAND_ENV: Final = "UNIVERSE_REMOTE_X11_COMMAND"

# Episodes ----------------------------------------------------------------------------------

#: Seconds a reset waits for the restarted program to draw (its window, its first
#: frame); past it the reset returns the screen as it is.
FIRST_DRAW_TIMEOUT: Final = 2.0
#: A program that exits within this many seconds of its start exited "quickly".
QUICK_EXIT: Final = 2.0
#: Pause before restarting a program after its second quick exit in a row; it doubles
#: with every further one, up to RESTART_DELAY_MAX (a crashing program must not spin).
RESTART_DELAY: Final = 0.25
RESTART_DELAY_MAX: Final = 10.0

# Input -------------------------------------------------------------------------------------

#: The common keys (what a sampler draws from, what fixed key vectors hold): printable
#: ASCII, editing and arrow keys, and the modifiers. Any other X key is taken too
#: (``any_key``): function keys, the keypad, Super, Print, Menu.
KEYS: Final = tuple(
    dict.fromkeys(
        [keysyms.canonical(chr(c)) for c in range(0x20, 0x7F)]
        + ["Return", "BackSpace", "Tab", "Escape", "Delete", "Insert", "Home", "End",
           "Prior", "Next", "Left", "Right", "Up", "Down", "Shift_L", "Shift_R",
           "Control_L", "Control_R", "Alt_L", "Alt_R"]
    )
)
#: Left, middle and right buttons.
BUTTONS: Final = 0b111


class CommandMissing(RuntimeFailure):
    """``x11.Command-v0`` has no command to run, or its program is not installed."""


def parse_screen(text: object) -> tuple[int, int]:
    """``"1280x800"`` -> (1280, 800); ValueError saying what to write for anything else."""
    found = re.fullmatch(r"\s*(\d{1,5})\s*[xX×]\s*(\d{1,5})\s*", str(text))
    (low_w, low_h), (high_w, high_h) = MIN_SCREEN, MAX_SCREEN
    bounds = f"{low_w}x{low_h} to {high_w}x{high_h}"
    if found is None:
        raise ValueError(f"screen is WIDTHxHEIGHT in pixels (from {bounds}: 1280x800, 1920x1080), "
                         f"not {str(text)[:40]!r}")
    width, height = int(found.group(1)), int(found.group(2))
    if not (low_w <= width <= high_w and low_h <= height <= high_h):
        raise ValueError(f"screen {width}x{height} is not within {bounds}")
    return width, height


class X11Runtime(DisplayRuntime):
    """One X program on an Xvnc display that is the remote's VNC server; no reward.

    ``X11Runtime(screen="1920x1080")`` is an instance of a subclass of that size (every
    class attribute, the size included, stays true of the instance), as MiniWoB's
    ``screen=full`` is.
    """

    width: ClassVar[int] = SCREEN_WIDTH
    height: ClassVar[int] = SCREEN_HEIGHT
    fps: ClassVar[float] = FPS
    keys: ClassVar[tuple[str, ...]] = KEYS
    any_key: ClassVar[bool] = True  # a desktop: every key a person has
    buttons: ClassVar[int] = BUTTONS
    options: ClassVar[tuple[str, ...]] = ("screen", "accessibility")
    #: The program and its arguments; set per subclass (or per instance, for a command).
    argv: tuple[str, ...] = ()
    #: Whether the program is asked to fill the screen (``-geometry WxH+0+0`` appended).
    fills_screen: ClassVar[bool] = False
    #: Xvnc sends the clipboard's text when a program copies (``runtimes.desktop_io``).
    display_args: ClassVar[tuple[str, ...]] = CLIPBOARD_ARGS

    def __new__(cls, screen: str | None = None, accessibility: bool = False) -> X11Runtime:
        if screen is not None:
            size = parse_screen(screen)
            base = cls.__dict__.get("_unsized", cls)
            cls = base if size == (base.width, base.height) else _sized(base, *size)
        return super().__new__(cls)

    def __init__(self, screen: str | None = None, accessibility: bool = False) -> None:
        """``accessibility``: start AT-SPI on the display, so that agents can read its
        programs' elements (:mod:`runtimes.atspi`, the ``desktop_tree`` tool)."""
        super().__init__()
        if not isinstance(accessibility, bool):
            raise ValueError(f"accessibility is true or false, not {accessibility!r}")
        if accessibility:
            check_installed()
        #: The display's accessibility bus (``accessibility=true``), else None.
        self.accessibility = Accessibility() if accessibility else None
        #: The program of the current episode (None before the first reset).
        self.program: XProgram | None = None
        self._started_at = 0.0  # time.monotonic() of the program's start
        self._quick_exits = 0  # quick exits in a row, for the restart pause
        self._failure: str | None = None  # the program could not be started
        self._reported = False  # this episode's end has been reported
        #: The clipboard and the program's folder (its working directory).
        self.desktop = DesktopIO(lambda: self.screen)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {**super().describe(), "x11.program": cls.argv[0] if cls.argv else None}

    # Lifecycle -----------------------------------------------------------------------------

    async def astart(self) -> None:
        """Start the display; the first reset starts the program."""
        await super().astart()
        log.info("%s: %s for %s", self.env_id, self.display, shlex.join(self.argv))

    async def _on_display(self) -> None:
        if self.accessibility is not None and self.display is not None:
            await self.accessibility.start(self.display)

    async def aclose(self) -> None:
        if self.accessibility is not None:
            await self.accessibility.aclose()
        await super().aclose()

    async def _stop_programs(self) -> None:
        if self.program is not None:
            program, self.program = self.program, None
            await self._stop_program(program)

    # Episodes ------------------------------------------------------------------------------

    async def _restart_program(self) -> int:
        """Stop the program and start it again; the display's update count in between
        (the new program's first frame comes after it)."""
        if self.display is None or self.screen is None:
            raise RuntimeError(f"{self.env_id} is not started; the remote awaits astart() first")
        exited_by_itself = self._reported or (self.program is not None and not self.program.running)
        if exited_by_itself and time.monotonic() - self._started_at < QUICK_EXIT:
            self._quick_exits += 1
        elif exited_by_itself or self.program is not None:
            self._quick_exits = 0
        await self._stop_programs()
        await asyncio.to_thread(self.desktop.sandbox.clear)  # an episode starts with it empty
        self._reported, self._failure = False, None
        if self._quick_exits >= 2:
            delay = min(RESTART_DELAY * 2 ** (self._quick_exits - 2), RESTART_DELAY_MAX)
            log.warning(
                "%s: %s keeps exiting at once (%d times in a row); restarting it in %.2f s",
                self.env_id, self.argv[0], self._quick_exits, delay,
            )
            await asyncio.sleep(delay)  # a pause against a crash loop, not synchronisation
        self._started_at = time.monotonic()
        before = self.screen.updates
        argv = self.argv
        if self.fills_screen:
            argv = (*argv, "-geometry", f"{self.width}x{self.height}+0+0")
        try:
            folder = self.desktop.folder
            env = {FILES_ENV: str(folder)}
            if self.accessibility is not None:
                self.accessibility.forget()
                env.update(self.accessibility.env())
            self.program = self.display.spawn(argv, cwd=folder, env=env)
        except OSError as exc:  # vanished from PATH, not executable any more
            self._failure = f"cannot start {shlex.join(self.argv)}: {exc}"
            log.warning("%s: %s", self.env_id, self._failure)
        return before

    async def areset(self, seed: int | None = None) -> None:
        """(Re)start the program; ``seed`` is ignored (an X program takes none)."""
        await self._revive_display()
        before = await self._restart_program()
        if self.program is not None:
            await self.take_next_frame(before, FIRST_DRAW_TIMEOUT)

    def outcome(self) -> StepResult:
        """End the episode once if the program has exited (or could not start)."""
        if self._reported:
            return StepResult()
        if self._failure is not None:
            self._reported = True
            return StepResult(done=True, info={"x11.error": self._failure})
        program = self.program
        code = program.process.poll() if program is not None else None
        if program is None or code is None:
            return StepResult()
        self._reported = True
        log.warning(
            "%s: %s exited with %d%s", self.env_id, program.name, code, log_tail(program.log, 5)
        )
        return StepResult(done=True, info={"x11.exit_code": code})


class X11Command(X11Runtime):
    """``x11.Command-v0``: the command in ``$UNIVERSE_REMOTE_X11_COMMAND``."""

    env_id: ClassVar[str] = "x11.Command-v0"
    description: ClassVar[str] = f"any X program on Xvnc: the command in ${COMMAND_ENV}"

    def __init__(self, screen: str | None = None, accessibility: bool = False) -> None:
        self.argv = command_from_env()
        super().__init__(screen, accessibility)


def command_from_env() -> tuple[str, ...]:
    """The argv in :data:`COMMAND_ENV`; raises :class:`CommandMissing` saying what to set."""
    text = os.environ.get(COMMAND_ENV, "").strip()
    example = f"e.g. {COMMAND_ENV}='xlogo -fg red' universe-remote serve x11.Command-v0"
    if not text:
        raise CommandMissing(
            f"x11.Command-v0 runs the X program in ${COMMAND_ENV}, which is not set; {example}"
        )
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise CommandMissing(f"${COMMAND_ENV} is not a valid command ({exc}): {text!r}") from None
    if not argv:
        raise CommandMissing(f"${COMMAND_ENV} holds no command: {text!r}; {example}")
    if shutil.which(argv[0]) is None:
        raise CommandMissing(
            f"${COMMAND_ENV} runs {argv[0]!r}, which is not an executable on PATH "
            f"(PATH={os.environ.get('PATH', '')})"
        )
    return argv


def _runtime_class(name: str, argv: tuple[str, ...]) -> type[X11Runtime]:
    fills = argv[-len(FILL_SCREEN):] == FILL_SCREEN
    return type(
        f"X11{name}",
        (X11Runtime,),
        {
            "env_id": f"x11.{name}-v0",
            "argv": argv[: -len(FILL_SCREEN)] if fills else argv,
            "fills_screen": fills,
            "description": f"{argv[0]} on Xvnc (no reward; ends when it exits)",
            "__module__": __name__,
        },
    )


@functools.cache
def _sized(cls: type[X11Runtime], width: int, height: int) -> type[X11Runtime]:
    """``cls`` on a ``width`` x ``height`` screen (one class per size, made once)."""
    return type(f"{cls.__name__}_{width}x{height}", (cls,), {
        "width": width, "height": height, "display_size": (width, height), "_unsized": cls,
        "__module__": __name__,
    })


find_program("Xvnc", package=XVNC_PACKAGE)  # fail the import (the registry explains)
#: env id -> runtime class: the installed programs of PROGRAMS, and x11.Command-v0.
RUNTIMES: dict[str, type[X11Runtime]] = {
    cls.env_id: cls
    for cls in (
        _runtime_class(name, argv)
        for name, argv in PROGRAMS.items()
        if shutil.which(argv[0]) is not None
    )
}
RUNTIMES[X11Command.env_id] = X11Command

__all__ = [
    "COMMAND_ENV",
    "KEYS",
    "MAX_SCREEN",
    "MIN_SCREEN",
    "PROGRAMS",
    "RUNTIMES",
    "CommandMissing",
    "X11Command",
    "X11Runtime",
    "parse_screen",
]
