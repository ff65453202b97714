"""Computer-use actions as RFB input: Anthropic's ``computer`` tool and OpenAI's action
objects, and the screenshot's size. Sans-I/O: no remote, no loop, no clock.

Holds :class:`Screen` (the remote's screen and the screenshot the model sees: scaled to
XGA 1024x768 or WXGA 1280x800, whichever is nearer its aspect, or native when it fits;
coordinates mapped back), :class:`Plan` (what one action does: input events, waits,
and what it answers with), :func:`anthropic` (``computer_20250124`` and
``computer_20251124``: ``key``, ``hold_key``, ``type``, ``cursor_position``,
``mouse_move``, ``left_mouse_down``, ``left_mouse_up``, ``left_click``,
``left_click_drag``, ``right_click``, ``middle_click``, ``double_click``,
``triple_click``, ``scroll``, ``wait``, ``screenshot``, ``zoom``), :func:`openai`
(``computer_use_preview``'s ``click``, ``double_click``, ``drag``, ``keypress``,
``move``, ``screenshot``, ``scroll``, ``type``, ``wait``, mapped onto the same plans)
and their limits. A bad argument raises :class:`~.errors.ToolError` saying what to send.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from ..agent_port import Held
from . import keys
from .errors import ToolError
from .keys import Event

#: Screenshot sizes computer-use models are trained on (Anthropic's docs: XGA, WXGA).
TARGETS: Final = ((1024, 768), (1280, 800))
#: Seconds a ``wait`` or ``hold_key`` may last.
MAX_WAIT_SECONDS: Final = 60.0
#: What OpenAI's ``wait`` (no duration) waits, seconds.
OPENAI_WAIT_SECONDS: Final = 1.0
#: Wheel clicks one ``scroll`` may turn.
MAX_SCROLL_AMOUNT: Final = 50
#: Pixels of OpenAI's ``scroll_x``/``scroll_y`` per wheel click (a browser scrolls about
#: 100 CSS pixels a click).
PIXELS_PER_WHEEL_CLICK: Final = 100
#: Points of one ``drag`` path.
MAX_PATH_POINTS: Final = 100
#: RFB button-mask bits (the pointer event's buttons).
BUTTONS: Final = {"left": 1, "middle": 2, "right": 4}
WHEEL: Final = {"up": 8, "down": 16, "left": 32, "right": 64}
#: Anthropic's actions, both versions (zoom is computer_20251124's).
ANTHROPIC_ACTIONS: Final = (
    "key", "hold_key", "type", "cursor_position", "mouse_move", "left_mouse_down",
    "left_mouse_up", "left_click", "left_click_drag", "right_click", "middle_click",
    "double_click", "triple_click", "scroll", "wait", "screenshot", "zoom",
)
#: OpenAI computer_use_preview's action types.
OPENAI_ACTIONS: Final = (
    "click", "double_click", "drag", "keypress", "move", "screenshot", "scroll", "type", "wait",
)
#: Actions that only look (a watching client may send them): nothing is sent to the remote.
LOOKING: Final = frozenset({"screenshot", "cursor_position", "zoom"})


def screenshot_size(width: int, height: int) -> tuple[int, int]:
    """The screenshot's size for a ``width`` x ``height`` screen: the target nearer its
    aspect, scaled down to fit it keeping the aspect (native when it fits already)."""
    aspect = width / height
    target_w, target_h = min(TARGETS, key=lambda t: abs(t[0] / t[1] - aspect))
    if width <= target_w and height <= target_h:
        return width, height
    scale = min(target_w / width, target_h / height)
    return max(1, round(width * scale)), max(1, round(height * scale))


@dataclasses.dataclass(frozen=True)
class Screen:
    """The remote's screen (native pixels) and the screenshot the model sees."""

    width: int
    height: int
    shot_width: int
    shot_height: int

    @classmethod
    def of(cls, width: int, height: int) -> Screen:
        return cls(width, height, *screenshot_size(width, height))

    @property
    def scaled(self) -> bool:
        return (self.shot_width, self.shot_height) != (self.width, self.height)

    def to_native(self, point: Any, name: str = "coordinate") -> tuple[int, int]:
        """A screenshot point ``[x, y]`` as a screen pixel; :class:`ToolError` if it is
        not one of the screenshot's."""
        if not (isinstance(point, list | tuple) and len(point) == 2
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in point)):
            raise ToolError(f"'{name}' is [x, y] in screenshot pixels, not {str(point)[:60]}")
        x, y = point
        if not (0 <= x < self.shot_width and 0 <= y < self.shot_height):
            raise ToolError(
                f"{name} [{_num(x)}, {_num(y)}] is outside the {self.shot_width}×{self.shot_height} "
                f"screenshot: x must be in 0..{self.shot_width - 1}, y in 0..{self.shot_height - 1}")
        return (min(self.width - 1, int(x * self.width / self.shot_width)),
                min(self.height - 1, int(y * self.height / self.shot_height)))

    def to_shot(self, x: int, y: int) -> tuple[int, int]:
        """A screen pixel as a screenshot point."""
        return (min(self.shot_width - 1, int(x * self.shot_width / self.width)),
                min(self.shot_height - 1, int(y * self.shot_height / self.height)))

    def region(self, region: Any) -> tuple[int, int, int, int]:
        """A zoom's ``[x0, y0, x1, y1]`` (screenshot pixels) as a native box (x0, y0, x1, y1)."""
        if not (isinstance(region, list | tuple) and len(region) == 4
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in region)):
            raise ToolError("'region' is [x0, y0, x1, y1] in screenshot pixels: top left, bottom right")
        x0, y0, x1, y1 = region
        if not (0 <= x0 < x1 <= self.shot_width and 0 <= y0 < y1 <= self.shot_height):
            raise ToolError(
                f"region {[_num(v) for v in region]} is not a box inside the {self.shot_width}×"
                f"{self.shot_height} screenshot (0 <= x0 < x1 <= {self.shot_width}, "
                f"0 <= y0 < y1 <= {self.shot_height})")
        sx, sy = self.width / self.shot_width, self.height / self.shot_height
        return (int(x0 * sx), int(y0 * sy), max(int(x0 * sx) + 1, math.ceil(x1 * sx)),
                max(int(y0 * sy) + 1, math.ceil(y1 * sy)))


@dataclasses.dataclass
class Plan:
    """What one action does: ``steps`` in order (a list of events to send, or seconds to
    wait), then an answer: the screenshot (``shot``), the pointer (``cursor``), a
    zoomed box (``zoom``: native x0, y0, x1, y1). ``navigates`` names a browser history
    move (OpenAI's ``back``/``forward`` buttons), which a browser remote refuses."""

    action: str
    steps: list[list[Event] | float] = dataclasses.field(default_factory=list)
    cursor: bool = False
    zoom: tuple[int, int, int, int] | None = None
    navigates: str | None = None

    @property
    def acts(self) -> bool:
        """Whether it sends anything (a watching client may only look)."""
        return self.action not in LOOKING

    def send(self, events: list[Event]) -> None:
        if events:
            if self.steps and isinstance(self.steps[-1], list):
                self.steps[-1].extend(events)
            else:
                self.steps.append(events)

    def wait(self, seconds: float) -> None:
        self.steps.append(seconds)

    @property
    def events(self) -> list[Event]:
        """All its events (for tests and lockstep steps, which send them in one go)."""
        return [e for step in self.steps if isinstance(step, list) for e in step]


def _num(v: float) -> int | float:
    return int(v) if float(v).is_integer() else v


def _seconds(value: Any, name: str = "duration") -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= MAX_WAIT_SECONDS:
        raise ToolError(f"'{name}' is seconds from 0 to {MAX_WAIT_SECONDS:g}, not {str(value)[:40]}")
    return float(value)


class _Hand:
    """Pointer moves and clicks on what the agent holds (:class:`Held`), into a plan."""

    def __init__(self, plan: Plan, held: Held) -> None:
        self.plan, self.held = plan, held

    def move(self, x: int, y: int) -> None:
        self.plan.send(self.held.pointer_to(x, y, self.held.buttons))

    def press(self, mask: int) -> None:
        x, y = self.held.pointer
        self.plan.send(self.held.pointer_to(x, y, self.held.buttons | mask))

    def release(self, mask: int) -> None:
        x, y = self.held.pointer
        self.plan.send(self.held.pointer_to(x, y, self.held.buttons & ~mask))

    def click(self, mask: int, count: int = 1, modifiers: list[str] | None = None) -> None:
        mods = modifiers or []
        self.plan.send(keys.press_events(mods, True))
        for _ in range(count):
            self.press(mask)
            self.release(mask)
        self.plan.send(keys.press_events(mods, False))

    def wheel(self, bit: int, clicks: int) -> None:
        for _ in range(clicks):
            self.press(bit)
            self.release(bit)


def _modifiers(args: Mapping[str, Any]) -> list[str]:
    """A click's or scroll's ``text``: modifier keys held meanwhile (``"shift"``, ``"ctrl+alt"``)."""
    text = args.get("text")
    if text is None:
        return []
    combos = keys.xdotool_keys(text)
    return [name for combo in combos for name in combo]


def anthropic(args: Mapping[str, Any], screen: Screen, held: Held) -> Plan:
    """Anthropic's ``computer`` action ``args`` as a plan; ``held`` follows it."""
    action = args.get("action")
    if action not in ANTHROPIC_ACTIONS:
        raise ToolError(f"unknown action {str(action)[:40]!r}: one of {', '.join(ANTHROPIC_ACTIONS)}")
    plan = Plan(action)
    hand = _Hand(plan, held)
    at = args.get("coordinate")

    def move_to_coordinate(required: bool) -> None:
        if at is None:
            if required:
                raise ToolError(f"{action} needs 'coordinate': [x, y] in screenshot pixels")
            return
        hand.move(*screen.to_native(at))

    if action == "key":
        for combo in keys.xdotool_keys(args.get("text")):
            plan.send(keys.combo_events(combo))
    elif action == "hold_key":
        names = [n for combo in keys.xdotool_keys(args.get("text")) for n in combo]
        plan.send(keys.press_events(names, True))
        plan.wait(_seconds(args.get("duration")))
        plan.send(keys.press_events(names, False))
    elif action == "type":
        plan.send(keys.type_events(args.get("text")))  # type: ignore[arg-type]
    elif action == "cursor_position":
        plan.cursor = True
    elif action == "mouse_move":
        move_to_coordinate(True)
    elif action in ("left_mouse_down", "left_mouse_up"):
        move_to_coordinate(False)
        (hand.press if action == "left_mouse_down" else hand.release)(BUTTONS["left"])
    elif action in ("left_click", "right_click", "middle_click", "double_click", "triple_click"):
        move_to_coordinate(False)
        button = {"right_click": "right", "middle_click": "middle"}.get(action, "left")
        count = {"double_click": 2, "triple_click": 3}.get(action, 1)
        hand.click(BUTTONS[button], count, _modifiers(args))
    elif action == "left_click_drag":
        start = args.get("start_coordinate")
        if start is None or at is None:
            raise ToolError("left_click_drag needs 'start_coordinate' and 'coordinate', [x, y] each")
        hand.move(*screen.to_native(start, "start_coordinate"))
        hand.press(BUTTONS["left"])
        hand.move(*screen.to_native(at))
        hand.release(BUTTONS["left"])
    elif action == "scroll":
        move_to_coordinate(False)
        direction, amount = args.get("scroll_direction"), args.get("scroll_amount", 3)
        if direction not in WHEEL:
            raise ToolError(f"'scroll_direction' is up, down, left or right, not {str(direction)[:20]!r}")
        if not isinstance(amount, int) or isinstance(amount, bool) or not 0 < amount <= MAX_SCROLL_AMOUNT:
            raise ToolError(f"'scroll_amount' is wheel clicks, 1 to {MAX_SCROLL_AMOUNT}, not {amount!s:.20}")
        mods = _modifiers(args)
        plan.send(keys.press_events(mods, True))
        hand.wheel(WHEEL[direction], amount)
        plan.send(keys.press_events(mods, False))
    elif action == "wait":
        plan.wait(_seconds(args.get("duration", 1.0)))
    elif action == "zoom":
        plan.zoom = screen.region(args.get("region"))
    return plan


def _xy(args: Mapping[str, Any], screen: Screen, name: str = "coordinate") -> tuple[int, int]:
    return screen.to_native([args.get("x"), args.get("y")], name)


def openai(args: Mapping[str, Any], screen: Screen, held: Held) -> Plan:
    """OpenAI's action object ``args`` (``{"type": "click", "x": 10, "y": 20, "button":
    "left"}``) as a plan."""
    kind = args.get("type")
    if kind not in OPENAI_ACTIONS:
        raise ToolError(f"unknown action type {str(kind)[:40]!r}: one of {', '.join(OPENAI_ACTIONS)}")
    plan = Plan(f"openai:{kind}" if kind != "screenshot" else "screenshot")
    hand = _Hand(plan, held)
    if kind == "click":
        button = args.get("button", "left")
        if button in ("back", "forward"):  # no such RFB buttons: the browser's keys for them
            hand.move(*_xy(args, screen))
            plan.send(keys.combo_events(["Alt_L", "Left" if button == "back" else "Right"]))
            plan.navigates = button
            return plan
        mask = {"left": 1, "wheel": 2, "middle": 2, "right": 4}.get(button)
        if mask is None:
            raise ToolError(f"'button' is left, right, wheel, back or forward, not {str(button)[:20]!r}")
        hand.move(*_xy(args, screen))
        hand.click(mask)
    elif kind == "double_click":
        hand.move(*_xy(args, screen))
        hand.click(1, 2)
    elif kind == "move":
        hand.move(*_xy(args, screen))
    elif kind == "drag":
        path = args.get("path")
        if not isinstance(path, list) or not 2 <= len(path) <= MAX_PATH_POINTS:
            raise ToolError(f"'path' is a list of 2 to {MAX_PATH_POINTS} points {{'x': .., 'y': ..}}")
        points = [_xy(p if isinstance(p, dict) else {}, screen, f"path[{i}]") for i, p in enumerate(path)]
        hand.move(*points[0])
        hand.press(1)
        for point in points[1:]:
            hand.move(*point)
        hand.release(1)
    elif kind == "keypress":
        plan.send(keys.combo_events(keys.openai_keys(args.get("keys"))))  # type: ignore[arg-type]
    elif kind == "type":
        plan.send(keys.type_events(args.get("text")))  # type: ignore[arg-type]
    elif kind == "scroll":
        hand.move(*_xy(args, screen))
        for value, (back, forth) in ((args.get("scroll_y", 0), ("up", "down")),
                                     (args.get("scroll_x", 0), ("left", "right"))):
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ToolError("'scroll_x' and 'scroll_y' are pixels (negative: up or left)")
            clicks = min(MAX_SCROLL_AMOUNT, max(1, round(abs(value) / PIXELS_PER_WHEEL_CLICK)))
            clicks = clicks if value else 0
            hand.wheel(WHEEL[forth if value > 0 else back], clicks)
    elif kind == "wait":
        plan.wait(OPENAI_WAIT_SECONDS)
    return plan


def parse(args: Mapping[str, Any], screen: Screen, held: Held) -> Plan:
    """The plan of a ``computer`` call in either provider's shape: Anthropic's have
    ``action``, OpenAI's ``type``."""
    parser: Callable[[Mapping[str, Any], Screen, Held], Plan]
    if "action" in args:
        parser = anthropic
    elif "type" in args:
        parser = openai
    else:
        raise ToolError("send Anthropic's {'action': 'left_click', 'coordinate': [x, y]} or "
                        "OpenAI's {'type': 'click', 'x': x, 'y': y}")
    return parser(args, screen, held)
