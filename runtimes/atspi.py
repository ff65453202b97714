"""A desktop agents can read: the accessible elements of the X programs on a display
(AT-SPI, which GTK 3 and Qt programs speak over D-Bus), for ``x11.*`` remotes served with
``--option accessibility=true`` (docs/computer-use.md, "A desktop's elements").

Holds :class:`Accessibility` (the display's D-Bus session bus and AT-SPI's bus launcher,
started on the display as its programs are, and our connection to the accessibility
bus: jeepney, pure Python, MIT), :class:`Element` (role, name, value, states, box in
screen pixels, depth, id), :func:`states_of` and :func:`render` (the tree as indented
text, sans-I/O) and the limits of a walk.

Why this shape: AT-SPI is a bus of its own (``at-spi-bus-launcher`` starts it, and
``at-spi2-registryd`` on it lists the programs); a program finds it through the session
bus whose address it is given (``$DBUS_SESSION_BUS_ADDRESS``). One session bus per
display keeps each remote's programs, and only those, on its tree. Element ids (``e1``,
``e2``, ...) name one object of one program for the runtime's life: a click by id asks
that object for its box again, so a moved widget is still clicked where it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from typing import Any, Final

from .errors import RuntimeFailure
from .xdisplay import POLL_INTERVAL, XvncDisplay, find_program

#: Debian packages that bring the programs this module runs.
ATSPI_PACKAGE: Final = "at-spi2-core"
DBUS_PACKAGE: Final = "dbus-daemon"
#: Where Debian keeps AT-SPI's bus launcher.
BUS_LAUNCHER: Final = "/usr/libexec/at-spi-bus-launcher"
#: Seconds the buses may take to come up (they need ~0.3 s here).
START_TIMEOUT: Final = 10.0
#: Seconds one D-Bus call may take: a program busy for longer is left out of the walk.
CALL_TIMEOUT: Final = 2.0
#: Elements one walk returns: a tree a model can read (GTK's widget factory has ~600).
MAX_ELEMENTS: Final = 500
#: Depth a walk descends to (a cycle or a runaway program cannot make it endless).
MAX_DEPTH: Final = 40
#: Characters of an element's name or value kept.
MAX_TEXT_CHARS: Final = 200
#: AT-SPI's states, by bit (atspi-constants.h, AtspiStateType).
STATES: Final = (
    "invalid", "active", "armed", "busy", "checked", "collapsed", "defunct", "editable",
    "enabled", "expandable", "expanded", "focusable", "focused", "has_tooltip", "horizontal",
    "iconified", "modal", "multi_line", "multiselectable", "opaque", "pressed", "resizable",
    "selectable", "selected", "sensitive", "showing", "single_line", "stale", "transient",
    "vertical", "visible", "manages_descendants", "indeterminate", "required", "truncated",
    "animated", "invalid_entry", "supports_autocompletion", "selectable_text", "is_default",
    "visited", "checkable", "has_popup", "read_only",
)
#: States left out of an element's list: nearly every element has them.
COMMON_STATES: Final = frozenset({"enabled", "sensitive", "showing", "visible", "opaque"})

_ACCESSIBLE: Final = "org.a11y.atspi.Accessible"
_REGISTRY: Final = ("org.a11y.atspi.Registry", "/org/a11y/atspi/accessible/root")
_SCREEN_COORDS: Final = 0  # ATSPI_COORD_TYPE_SCREEN


class AccessibilityUnavailable(RuntimeFailure):
    """The display's accessibility bus is not there (not asked for, not installed, gone)."""


@dataclasses.dataclass
class Element:
    """One accessible object: its id, role, name, value, states, box (x, y, w, h) in
    screen pixels (None: it has none), and depth in the tree."""

    id: str
    role: str
    name: str
    value: str | None
    states: list[str]
    box: tuple[int, int, int, int] | None
    depth: int


def states_of(words: list[int]) -> list[str]:
    """AT-SPI's state set (32-bit words, lowest bit first) as names."""
    out = []
    for index, word in enumerate(words):
        for bit in range(32):
            if word >> bit & 1:
                number = index * 32 + bit
                out.append(STATES[number] if number < len(STATES) else f"state_{number}")
    return out


def render(elements: list[Element]) -> str:
    """The tree as text, one element a line: ``[e3] push button 'Press me' (focusable)``."""
    lines = []
    for e in elements:
        text = f"{'  ' * e.depth}[{e.id}] {e.role}"
        if e.name:
            text += f" {e.name!r}"
        if e.value is not None:
            text += f" value={e.value!r}"
        shown = [s for s in e.states if s not in COMMON_STATES]
        if shown:
            text += f" ({', '.join(shown)})"
        lines.append(text)
    return "\n".join(lines)


def check_installed() -> None:
    """Raise ProgramMissing or ModuleNotFoundError naming what to install."""
    find_program("dbus-daemon", package=DBUS_PACKAGE)
    find_program(BUS_LAUNCHER, package=ATSPI_PACKAGE)
    try:
        import jeepney  # noqa: F401
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "accessibility needs jeepney: pip install 'universe-remote[desktop]'", name="jeepney"
        ) from None


class Accessibility:
    """The accessibility bus of one display, and the walks of its programs' trees."""

    def __init__(self) -> None:
        self.session_address: str | None = None
        self._router: Any = None  # jeepney's DBusRouter on the accessibility bus
        self._router_context: Any = None
        #: id -> (bus name, object path), and back; for the runtime's life.
        self._objects: dict[str, tuple[str, str]] = {}
        self._ids: dict[tuple[str, str], str] = {}
        self._numbers = itertools.count(1)

    def env(self) -> dict[str, str]:
        """What a program on the display needs to be found: the session bus."""
        if self.session_address is None:
            return {}
        # Qt joins AT-SPI only when told to (or when a screen reader turned it on).
        return {"DBUS_SESSION_BUS_ADDRESS": self.session_address, "NO_AT_BRIDGE": "0",
                "QT_LINUX_ACCESSIBILITY_ALWAYS_ON": "1"}

    async def start(self, display: XvncDisplay) -> None:
        """Start the session bus and AT-SPI's bus launcher on ``display``, and connect."""
        from jeepney.io.asyncio import open_dbus_router  # the extra's: imported when used

        dbus = find_program("dbus-daemon", package=DBUS_PACKAGE)
        launcher = find_program(BUS_LAUNCHER, package=ATSPI_PACKAGE)
        assert display.directory is not None
        directory = display.directory / "dbus"
        directory.mkdir(mode=0o700, exist_ok=True)
        socket = directory / "session"
        display.spawn([dbus, "--session", "--nofork", f"--address=unix:path={socket}"], name="dbus")
        await _until(socket.exists, "the session bus did not start", START_TIMEOUT)
        self.session_address = f"unix:path={socket}"
        # XDG_RUNTIME_DIR: the accessibility bus's socket goes there, not in ~/.cache.
        display.spawn([launcher, "--launch-immediately"], name="at-spi-bus-launcher",
                      env={**self.env(), "XDG_RUNTIME_DIR": str(directory)})
        address = await self._bus_address(open_dbus_router)
        self._router_context = open_dbus_router(address)
        self._router = await self._router_context.__aenter__()

    async def _bus_address(self, open_dbus_router: Any) -> str:
        """The accessibility bus's address, from the launcher (once it is on the session bus)."""
        from jeepney import DBusAddress, new_method_call
        from jeepney.wrappers import DBusErrorResponse

        call = new_method_call(DBusAddress("/org/a11y/bus", "org.a11y.Bus", "org.a11y.Bus"), "GetAddress")
        deadline = time.monotonic() + START_TIMEOUT
        async with open_dbus_router(self.session_address) as router:
            while True:
                try:
                    async with asyncio.timeout(CALL_TIMEOUT):
                        reply = await router.send_and_get_reply(call)
                    if reply.header.message_type.name != "error":
                        return str(reply.body[0])
                except (DBusErrorResponse, TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    raise AccessibilityUnavailable(
                        f"at-spi-bus-launcher did not answer on the session bus within {START_TIMEOUT} s")
                await asyncio.sleep(POLL_INTERVAL)  # until the launcher owns its name

    async def aclose(self) -> None:
        """Let go of the bus (the processes stop with the display)."""
        context, self._router_context, self._router = self._router_context, None, None
        self.session_address = None
        if context is not None:
            with contextlib.suppress(Exception):
                await context.__aexit__(None, None, None)

    def forget(self) -> None:
        """A new program: its objects are new (ids go on counting, never reused)."""
        self._objects.clear()
        self._ids.clear()

    async def _call(self, name: str, path: str, interface: str, method: str,
                    signature: str | None = None, body: tuple[Any, ...] = ()) -> tuple[Any, ...]:
        from jeepney import DBusAddress, new_method_call

        if self._router is None:
            raise AccessibilityUnavailable("the accessibility bus is not connected")
        message = new_method_call(DBusAddress(path, name, interface), method, signature, body)
        async with asyncio.timeout(CALL_TIMEOUT):
            reply = await self._router.send_and_get_reply(message)
        if reply.header.message_type.name == "error":
            raise LookupError(f"{interface}.{method}: {reply.body}")
        return tuple(reply.body)

    async def _property(self, name: str, path: str, interface: str, prop: str) -> Any:
        body = await self._call(name, path, "org.freedesktop.DBus.Properties", "Get", "ss",
                                (interface, prop))
        return body[0][1]

    def _id(self, key: tuple[str, str]) -> str:
        if key not in self._ids:
            number = f"e{next(self._numbers)}"
            self._ids[key], self._objects[number] = number, key
        return self._ids[key]

    async def tree(self) -> list[Element]:
        """The elements of every program on the display, depth first, at most
        :data:`MAX_ELEMENTS`; a program or element that does not answer is left out.
        Each element's calls, and its children's walks, go out together (a D-Bus round
        trip is ~2 ms on a busy machine, and an element takes six)."""
        apps = (await self._call(*_REGISTRY, _ACCESSIBLE, "GetChildren"))[0]
        budget = [MAX_ELEMENTS]
        walks = await asyncio.gather(*(self._walk(n, p, 0, budget) for n, p in apps),
                                     return_exceptions=True)
        out: list[Element] = []
        for walk in walks:
            if isinstance(walk, BaseException):
                if not isinstance(walk, LookupError | TimeoutError):
                    raise walk
                continue
            for key, element in walk:  # ids in the tree's order, on first sight
                element.id = self._id(key)
                out.append(element)
        return out

    async def _walk(self, name: str, path: str, depth: int,
                    budget: list[int]) -> list[tuple[tuple[str, str], Element]]:
        if budget[0] <= 0 or depth > MAX_DEPTH:
            return []
        budget[0] -= 1
        role, label, state, interfaces, children = await asyncio.gather(
            self._call(name, path, _ACCESSIBLE, "GetRoleName"),
            self._property(name, path, _ACCESSIBLE, "Name"),
            self._call(name, path, _ACCESSIBLE, "GetState"),
            self._call(name, path, _ACCESSIBLE, "GetInterfaces"),
            self._call(name, path, _ACCESSIBLE, "GetChildren"),
        )
        states = states_of(list(state[0]))
        if "defunct" in states:
            return []
        kinds = set(interfaces[0])
        box, value = await asyncio.gather(self._box_of(name, path, kinds), self._value(name, path, kinds))
        element = Element("", str(role[0]), str(label)[:MAX_TEXT_CHARS], value, states, box, depth)
        out = [((name, path), element)]
        subtrees = await asyncio.gather(*(self._walk(n, p, depth + 1, budget) for n, p in children[0]),
                                        return_exceptions=True)
        for subtree in subtrees:
            if isinstance(subtree, BaseException):
                if not isinstance(subtree, LookupError | TimeoutError):
                    raise subtree
                continue
            out.extend(subtree)
        return out

    async def _box_of(self, name: str, path: str, kinds: set[str]) -> tuple[int, int, int, int] | None:
        return await self._box(name, path) if "org.a11y.atspi.Component" in kinds else None

    async def _value(self, name: str, path: str, kinds: set[str]) -> str | None:
        """A text field's text, or a value's number (a slider's); None for the rest."""
        if "org.a11y.atspi.Text" in kinds:
            text = (await self._call(name, path, "org.a11y.atspi.Text", "GetText", "ii", (0, -1)))[0]
            return str(text)[:MAX_TEXT_CHARS]
        if "org.a11y.atspi.Value" in kinds:
            return str(await self._property(name, path, "org.a11y.atspi.Value", "CurrentValue"))
        return None

    async def _box(self, name: str, path: str) -> tuple[int, int, int, int] | None:
        x, y, w, h = (await self._call(name, path, "org.a11y.atspi.Component", "GetExtents", "u",
                                       (_SCREEN_COORDS,)))[0]
        return (int(x), int(y), int(w), int(h)) if w > 0 and h > 0 else None

    async def box(self, element_id: str) -> tuple[int, int, int, int]:
        """Element ``element_id``'s box now (screen pixels); LookupError saying why not."""
        key = self._objects.get(element_id)
        if key is None:
            raise LookupError(f"no element {element_id[:20]!r}: ids come from the latest tree "
                              "(desktop_tree), and a reset's program has new ones")
        try:
            box = await self._box(*key)
        except (LookupError, TimeoutError):
            raise LookupError(f"element {element_id} is gone (its program closed it); "
                              "read the tree again") from None
        if box is None:
            raise LookupError(f"element {element_id} has no box on the screen (hidden); "
                              "read the tree again")
        return box


async def _until(condition: Any, what: str, timeout: float) -> None:
    """Poll ``condition()`` until true; AccessibilityUnavailable(``what``) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AccessibilityUnavailable(f"{what} within {timeout} s")
        await asyncio.sleep(POLL_INTERVAL)
