"""What a web agent does: BrowserGym-style action strings, parsed, and planned as X input.

Holds :func:`parse` (``"click('a12')"`` -> :class:`Action`, with Python's ``ast`` — never
``eval`` — and an :class:`ActionError` saying what is wrong with anything else),
:data:`ACTIONS` (the functions and their parameters), :func:`plan` (an action and the
page's elements -> a :class:`Plan`: our :class:`~runtimes.base.KeyEvent` and
:class:`~runtimes.base.PointerEvent` in the served frame's pixels, or an error for
``last_action_error``) and the limits; keys and typing are :mod:`runtimes.web_keys`'s.

**Grammar.** One call per line (at most :data:`MAX_ACTIONS`) of a function in
:data:`ACTIONS` by its bare name, with arguments that are literals: strings, numbers
(a leading minus allowed), lists of strings; keywords by parameter name. Nothing else:
no names, attributes, subscripts, operators, comprehensions, f-strings, lambdas or
nested calls. Strings past :data:`MAX_ACTION_CHARS` are refused before parsing.

**Real X input.** Every plan is key and pointer events that the runtime sends into X
(``DisplayRuntime.inject``), so a viewer sees the pointer move and a recording holds
them: a click is a move to the element's ``point`` (where the page hit-tests it; its
box's centre otherwise), a press and a release of the button; ``fill`` clicks the
field, selects all (Control+a), and types the text key by key (an uppercase letter is
its keysym inside Shift, as a person types it; ``shift_letters=False`` leaves Shift
out); ``scroll`` is wheel notches (buttons 4-7, mask
bits 3-6) at the pointer, :data:`~runtimes.cdp_input.WHEEL_PIXELS` each. Two things are
not X input, and their plans say so in :attr:`Plan.script`: ``select_option`` on a
``<select>`` (Chromium's native popup list is its own X window, awkward to drive by
pointer in kiosk mode; the page's options are set and ``input``/``change`` dispatched)
and ``focus`` on an element that is not a text field (a click would activate it).
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from rewarder.protocol import MAX_ACTION_STRING_CHARS

from .base import InputEvent, KeyEvent, PointerEvent
from .cdp_input import WHEEL_PIXELS
from .page_structure import BID_ATTRIBUTE, STATE_GLOBAL, Element
from .web_keys import (
    KEY_NAMES,
    ActionError,
    InsertText,
    combination_events,
    key_combination,
    tap,
    text_events,
)

#: Characters of an action string; longer ones are refused before parsing (the wire's
#: limit, defined once in rewarder.protocol).
MAX_ACTION_CHARS: Final = MAX_ACTION_STRING_CHARS
#: Calls in one action string (one per line).
MAX_ACTIONS: Final = 10
#: Characters one ``fill`` or ``keyboard_type`` types (each is 2-4 X events).
MAX_TYPED_CHARS: Final = 2000
#: Wheel notches one ``scroll`` sends per axis (120 px each: 6,000 px).
MAX_SCROLL_NOTCHES: Final = 50
#: Milliseconds one ``noop`` may wait.
MAX_WAIT_MS: Final = 10_000
#: Options one ``select_option`` may name.
MAX_OPTIONS: Final = 100
#: Pointer moves between the ends of a drag (jQuery UI and HTML5 drags need some).
DRAG_STEPS: Final = 5

#: VNC button mask bits of the buttons actions name.
BUTTONS: Final = {"left": 1, "middle": 2, "right": 4}
#: Wheel buttons as mask bits: up, down (X buttons 4, 5), left, right (6, 7).
WHEEL_UP, WHEEL_DOWN, WHEEL_LEFT, WHEEL_RIGHT = 8, 16, 32, 64
#: Modifiers ``click`` and ``dblclick`` take.
MODIFIERS: Final = ("Alt", "Control", "ControlOrMeta", "Meta", "Shift")




# Parameters and functions --------------------------------------------------------------

STR, NUM, INT, OPTIONS, BUTTON, KEYS, MODS = "str", "num", "int", "options", "button", "keys", "mods"


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: str
    default: Any = ...

    def __str__(self) -> str:
        return self.name if self.default is ... else f"{self.name}={self.default!r}"


def _p(spec: str) -> tuple[Param, ...]:
    """``"bid:str button:button=left"`` -> params (defaults are Python literals)."""
    out = []
    for item in spec.split():
        head, _, default = item.partition("=")
        name, _, kind = head.partition(":")
        out.append(Param(name, kind, ast.literal_eval(default) if default else ...))
    return tuple(out)


#: Function name -> its parameters, BrowserGym's names and order.
ACTIONS: Final[dict[str, tuple[Param, ...]]] = {
    "click": _p("bid:str button:button='left' modifiers:mods=[]"),
    "dblclick": _p("bid:str button:button='left' modifiers:mods=[]"),
    "hover": _p("bid:str"),
    "fill": _p("bid:str value:str"),
    "clear": _p("bid:str"),
    "select_option": _p("bid:str options:options"),
    "press": _p("bid:str key_comb:keys"),
    "focus": _p("bid:str"),
    "drag_and_drop": _p("from_bid:str to_bid:str"),
    "scroll": _p("delta_x:num delta_y:num"),
    "mouse_move": _p("x:num y:num"),
    "mouse_click": _p("x:num y:num button:button='left'"),
    "mouse_dblclick": _p("x:num y:num button:button='left'"),
    "mouse_drag_and_drop": _p("from_x:num from_y:num to_x:num to_y:num"),
    "keyboard_type": _p("text:str"),
    "keyboard_press": _p("key_comb:keys"),
    "send_msg_to_user": _p("text:str"),
    "noop": _p("wait_ms:num=1000"),
}


@dataclass(frozen=True, slots=True)
class Action:
    """One parsed call: the function's name and every argument by parameter name."""

    name: str
    args: dict[str, Any]

    def __str__(self) -> str:
        return f"{self.name}({', '.join(repr(v) for v in self.args.values())})"


def signature(name: str) -> str:
    return f"{name}({', '.join(str(p) for p in ACTIONS[name])})"


_WHAT: Final = {
    ast.Name: "a bare name", ast.Attribute: "attribute access", ast.Subscript: "a subscript",
    ast.Lambda: "a lambda", ast.JoinedStr: "an f-string", ast.Call: "a nested call",
    ast.BinOp: "an operator", ast.BoolOp: "an operator", ast.Compare: "a comparison",
    ast.ListComp: "a comprehension", ast.GeneratorExp: "a comprehension",
    ast.Dict: "a dict", ast.Set: "a set", ast.Starred: "unpacking (*)", ast.IfExp: "an if",
    ast.NamedExpr: "an assignment (:=)", ast.Await: "await",
}


def _describe(node: ast.AST) -> str:
    return _WHAT.get(type(node), type(node).__name__)


def parse(text: str) -> list[Action]:
    """The actions in ``text``, or :class:`ActionError` saying what is wrong."""
    if not isinstance(text, str):
        raise ActionError(f"an action is a string such as \"click('a12')\", not {type(text).__name__}")
    if len(text) > MAX_ACTION_CHARS:
        raise ActionError(
            f"the action is {len(text)} characters; at most {MAX_ACTION_CHARS} (MAX_ACTION_CHARS)"
        )
    if not text.strip():
        raise ActionError("the action is empty; write a call such as click('a12')")
    try:
        try:
            tree = ast.parse(text.strip(), mode="exec")
        except IndentationError:  # calls indented alike or not: each line on its own
            tree = ast.parse("\n".join(line.strip() for line in text.strip().splitlines()))
    except SyntaxError as exc:
        raise ActionError(
            f"not a valid call: {exc.msg} (line {exc.lineno}, column {exc.offset}); "
            "write one call per line, such as fill('a12', 'hello')"
        ) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ActionError(f"not a valid call: {type(exc).__name__}: {exc}") from None
    if len(tree.body) > MAX_ACTIONS:
        raise ActionError(f"{len(tree.body)} calls; at most {MAX_ACTIONS} (MAX_ACTIONS) in one action")
    return [_action(statement) for statement in tree.body]


def _action(statement: ast.stmt) -> Action:
    line = f"line {statement.lineno}"
    if not isinstance(statement, ast.Expr):
        kind = type(statement).__name__.lower()
        raise ActionError(f"{line} is a statement ({kind}), not a call; write a call such as click('a12')")
    call = statement.value
    if not isinstance(call, ast.Call):
        if isinstance(call, ast.Attribute | ast.Subscript) and isinstance(call.value, ast.Call):
            raise ActionError(f"{line}: {_describe(call)} on a call's result is not allowed; "
                              "write the call alone, such as click('a12')")
        raise ActionError(f"{line} is {_describe(call)}, not a call; write a call such as click('a12')")
    if not isinstance(call.func, ast.Name):
        raise ActionError(f"{line}: call a function by its bare name ({_describe(call.func)} is "
                          f"not allowed); the functions are {', '.join(ACTIONS)}")
    name = call.func.id
    params = ACTIONS.get(name)
    if params is None:
        raise ActionError(f"{line}: unknown function {name!r}; the functions are {', '.join(ACTIONS)}")
    where = f"{line}: {name}"
    if len(call.args) > len(params):
        raise ActionError(f"{where} takes at most {len(params)} arguments, {len(call.args)} given: "
                          f"{signature(name)}")
    args: dict[str, Any] = {}
    for param, node in zip(params, call.args, strict=False):
        args[param.name] = _argument(node, param, where)
    by_name = {p.name: p for p in params}
    for keyword in call.keywords:
        if keyword.arg is None:
            raise ActionError(f"{where}: unpacking (**) is not allowed; {signature(name)}")
        named = by_name.get(keyword.arg)
        if named is None:
            raise ActionError(f"{where} has no parameter {keyword.arg!r}: {signature(name)}")
        param = named
        if param.name in args:
            raise ActionError(f"{where} got {keyword.arg!r} twice: {signature(name)}")
        args[param.name] = _argument(keyword.value, param, where)
    for param in params:
        if param.name not in args:
            if param.default is ...:
                raise ActionError(f"{where} needs {param.name!r}: {signature(name)}")
            args[param.name] = param.default
    return Action(name, {p.name: args[p.name] for p in params})


def _literal(node: ast.expr, where: str, param: Param) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (str, int, float):
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd)
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float)):
        number = node.operand.value
        assert isinstance(number, int | float)
        return -number if isinstance(node.op, ast.USub) else number
    if isinstance(node, ast.List | ast.Tuple):
        items = [_literal(item, where, param) for item in node.elts]
        if not all(isinstance(item, str) for item in items):
            raise ActionError(f"{where}: {param.name!r} may be a list of strings only")
        return items
    hint = ""
    if isinstance(node, ast.Name):
        hint = f"; quote it: {node.id!r}"
    elif isinstance(node, ast.JoinedStr):
        hint = "; write a plain string literal"
    raise ActionError(f"{where}: {param.name!r} must be a literal ({_describe(node)} is not "
                      f"allowed){hint}")


def _argument(node: ast.expr, param: Param, where: str) -> Any:
    value = _literal(node, where, param)
    kind = param.kind
    if kind in (STR, KEYS, BUTTON) and not isinstance(value, str):
        raise ActionError(f"{where}: {param.name!r} must be a string, not {value!r}")
    if kind == NUM or kind == INT:
        if not isinstance(value, int | float):
            raise ActionError(f"{where}: {param.name!r} must be a finite number, not {value!r}")
        try:
            number = float(value)
        except OverflowError:  # an int past a float's range (its digits are not quoted)
            bits = value.bit_length() if isinstance(value, int) else 0
            raise ActionError(f"{where}: {param.name!r} must be a finite number; an integer of "
                              f"{bits} bits is past a float's range") from None
        if not math.isfinite(number):
            raise ActionError(f"{where}: {param.name!r} must be a finite number, not {value!r}")
        return number
    if kind == STR and len(value) > MAX_TYPED_CHARS:
        raise ActionError(f"{where}: {param.name!r} is {len(value)} characters; at most "
                          f"{MAX_TYPED_CHARS} (MAX_TYPED_CHARS)")
    if kind == BUTTON and value not in BUTTONS:
        raise ActionError(f"{where}: button must be one of {', '.join(BUTTONS)}, not {value!r}")
    if kind == KEYS:
        key_combination(value, where)  # refuse unknown keys now, not when running
    if kind == OPTIONS:
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not value or len(value) > MAX_OPTIONS:
            raise ActionError(f"{where}: options must be a string or a list of 1..{MAX_OPTIONS} strings")
    if kind == MODS:
        if not isinstance(value, list) or any(m not in MODIFIERS for m in value):
            raise ActionError(f"{where}: modifiers must be a list of {', '.join(MODIFIERS)}")
    return value


# Plans --------------------------------------------------------------------------------


class Elements(Protocol):
    """Where plans look elements up: a PageStructure, or a dict of bid -> Element."""

    def get(self, bid: str, /) -> Element | None: ...


#: Seconds between the batches of a plan: X time stamps are milliseconds, and Chromium
#: takes a second press with the first's time stamp for the same event (no double
#: click). Between a double click's two clicks and a drag's press, moves and release.
BATCH_GAP: Final = 0.02
_GAP: Final[Any] = object()  # where a plan's events split into batches


Batch = list[InputEvent] | InsertText


def _split(items: list[Any]) -> list[Batch]:
    """Events in batches at each gap; each :class:`InsertText` (a run of them joined) a
    batch of its own, between the events before and after it."""
    batches: list[Batch] = [[]]
    for item in items:
        last = batches[-1]
        if item is _GAP:
            batches.append([])
        elif isinstance(item, InsertText):
            if isinstance(last, InsertText):
                batches[-1] = InsertText(last.text + item.text)
            else:
                batches.append(item)
        elif isinstance(last, InsertText):
            batches.append([item])
        else:
            last.append(item)
    return [batch for batch in batches if isinstance(batch, InsertText) or batch]


@dataclass(slots=True)
class Plan:
    """What running an action takes, in this order: JavaScript ``script`` through
    DevTools (not X input; None for none; it returns an error string or null), X
    ``batches`` of events (served-frame pixels), waiting ``wait_ms``; ``message`` for the user;
    ``error`` instead of all of it."""

    action: Action
    #: X events in batches, each sent in one write, :data:`BATCH_GAP` apart; an
    #: :class:`~runtimes.web_keys.InsertText` between them goes in through DevTools.
    batches: list[Batch] = field(default_factory=list)
    script: str | None = None
    wait_ms: float = 0.0
    message: str | None = None
    error: str | None = None
    #: Where the pointer is after the events, in screen pixels (None: unchanged).
    pointer: tuple[int, int] | None = None

    @property
    def events(self) -> list[InputEvent]:
        """Every event of every batch, in order (text inserted through DevTools aside)."""
        return [event for batch in self.batches if isinstance(batch, list) for event in batch]


_TEXT_INPUTS: Final = frozenset({"text", "search", "email", "url", "tel", "password", "number",
                                 "date", "time", "datetime-local", "month", "week"})


def is_text_field(element: Element) -> bool:
    """Whether ``element`` takes typed text: a textarea, a text-like input, or an ARIA
    text box that is not a form control."""
    if element.tag == "textarea" or (element.tag == "input" and (element.type or "text") in _TEXT_INPUTS):
        return True
    return element.role in ("textbox", "searchbox", "combobox") and element.tag not in ("select", "input")


def _describe_element(element: Element) -> str:
    name = f" {element.name[:40]!r}" if element.name else ""
    return f"{element.bid} ({element.tag}{name})"


def target_error(element: Element | None, bid: str, viewport: tuple[int, int] | None = None) -> str | None:
    """Why ``element`` cannot take pointer input, or None when it can."""
    if element is None:
        return (f"no element with bid {bid!r} on the page (it may have gone; read bids from "
                "the latest observation)")
    what = _describe_element(element)
    if not element.shown:
        return f"element {what} is hidden (display: none, visibility: hidden or opacity 0)"
    x, y, w, h = element.bbox
    if w <= 0 or h <= 0:
        return f"element {what} has no size on the page"
    if element.point is None:
        if viewport is not None and (x + w <= 0 or y + h <= 0 or x >= viewport[0] or y >= viewport[1]):
            return f"element {what} is outside the viewport at ({x:.0f}, {y:.0f}); scroll to it first"
        return f"element {what} is covered by another element (nothing of it can be clicked)"
    return None


class Planner:
    """Turns actions into plans, remembering where the pointer is (``scroll`` happens
    there). ``frame_origin`` is where the served frame starts on the screen: event
    coordinates are screen pixels minus it. ``viewport`` (x, y, width, height in screen
    pixels) is the served area: where ``mouse_*`` coordinates must fall (an agent sees
    nothing else, and a point far off any screen wedged DevTools input), and where the
    pointer goes for a ``scroll`` before any other pointer action."""

    def __init__(self, *, frame_origin: tuple[int, int] = (0, 0), shift_letters: bool = True,
                 viewport: tuple[int, int, int, int] = (0, 0, 160, 210)) -> None:
        self.frame_origin, self.shift_letters, self.viewport = frame_origin, shift_letters, viewport
        self.pointer: tuple[int, int] | None = None

    def _move(self, x: float, y: float, mask: int = 0) -> PointerEvent:
        return PointerEvent(round(x) - self.frame_origin[0], round(y) - self.frame_origin[1], mask)

    def _click(self, point: tuple[float, float], button: int, count: int, mods: list[str]) -> list[Any]:
        held = [KEY_NAMES[m] for m in mods]
        events: list[Any] = [KeyEvent(k, True) for k in held]
        events.append(self._move(*point))
        for i in range(count):
            events += [_GAP] if i else []
            events += [self._move(*point, button), self._move(*point)]
        return events + [KeyEvent(k, False) for k in reversed(held)]

    def plan(self, action: Action, elements: Elements) -> Plan:
        """The plan of ``action`` on the page whose elements are ``elements``; its
        ``error`` says why it cannot run (nothing of it runs then)."""
        plan = Plan(action)
        try:
            self._fill(plan, elements)
        except ActionError as exc:
            plan.batches, plan.script, plan.error = [], None, str(exc)
        if plan.error is None and plan.pointer is not None:
            self.pointer = plan.pointer
        return plan

    def _target(self, elements: Elements, bid: str) -> tuple[Element, tuple[float, float]]:
        element = elements.get(bid)
        error = target_error(element, bid)
        if error is not None:
            raise ActionError(error)
        assert element is not None and element.point is not None
        return element, element.point

    def _fill(self, plan: Plan, elements: Elements) -> None:
        out: list[Any] = []
        try:
            self._choose(plan, elements, out)
        finally:
            plan.batches = _split(out)

    def _choose(self, plan: Plan, elements: Elements, out: list[Any]) -> None:
        name, a = plan.action.name, plan.action.args
        shift = self.shift_letters
        if name in ("click", "dblclick", "hover", "fill", "clear", "press", "focus", "select_option"):
            element = elements.get(a["bid"])
            if element is not None and element.disabled and name != "hover":
                raise ActionError(f"element {_describe_element(element)} is disabled")
        if name in ("click", "dblclick"):
            element, point = self._target(elements, a["bid"])
            count = 2 if name == "dblclick" else 1
            out[:] = self._click(point, BUTTONS[a["button"]], count, a["modifiers"])
            plan.pointer = _round(point)
        elif name == "hover":
            element, point = self._target(elements, a["bid"])
            out[:], plan.pointer = [self._move(*point)], _round(point)
        elif name in ("fill", "clear", "press", "focus"):
            element = elements.get(a["bid"])
            field = element is not None and is_text_field(element)
            if name in ("fill", "clear") and element is not None and not field:
                raise ActionError(f"element {_describe_element(element)} is not a text field; "
                                  "fill and clear take an input or a textarea")
            keys = combination_events(key_combination(a["key_comb"]), shift) if name == "press" else []
            if element is not None and element.shown and (
                (name == "press" and element.focused) or (name in ("press", "focus") and not field)
            ):
                # Keys already go to it, or a click would activate it: focus it through
                # DevTools (when not focused yet) and send the keys as X input.
                if not element.focused:
                    plan.script = element_script(a["bid"], "el.focus(); return null;")
                out[:] = keys
                return
            element, point = self._target(elements, a["bid"])
            out[:] = self._click(point, BUTTONS["left"], 1, []) + keys
            plan.pointer = _round(point)
            if name == "fill":
                out += combination_events(["Control_L", "a"], shift)
                text = a["value"]
                out += text_events(text, shift, tabs_as_text=True) if text else tap("BackSpace", shift)
            elif name == "clear":
                out += combination_events(["Control_L", "a"], shift) + tap("BackSpace", shift)
        elif name == "select_option":
            element = elements.get(a["bid"])
            error = target_error(element, a["bid"]) if element is None or not element.shown else None
            if error:
                raise ActionError(error)
            assert element is not None
            if element.tag != "select":
                raise ActionError(f"element {_describe_element(element)} is not a <select>; "
                                  "click the option you want instead")
            plan.script = element_script(a["bid"], _SELECT_JS % json.dumps(a["options"]))
        elif name == "drag_and_drop":
            _, start = self._target(elements, a["from_bid"])
            _, end = self._target(elements, a["to_bid"])
            out[:], plan.pointer = self._drag(start, end), _round(end)
        elif name in ("mouse_move", "mouse_click", "mouse_dblclick"):
            point = self._on_screen(name, a["x"], a["y"])
            if name == "mouse_move":
                out[:] = [self._move(*point)]
            else:
                count = 2 if name == "mouse_dblclick" else 1
                out[:] = self._click(point, BUTTONS[a["button"]], count, [])
            plan.pointer = _round(point)
        elif name == "mouse_drag_and_drop":
            start = self._on_screen(name, a["from_x"], a["from_y"])
            end = self._on_screen(name, a["to_x"], a["to_y"])
            out[:], plan.pointer = self._drag(start, end), _round(end)
        elif name == "scroll":
            out[:], plan.pointer = self._scroll(a["delta_x"], a["delta_y"])
        elif name == "keyboard_type":
            out[:] = text_events(a["text"], shift)
        elif name == "keyboard_press":
            out[:] = combination_events(key_combination(a["key_comb"]), shift)
        elif name == "send_msg_to_user":
            plan.message = a["text"]
        elif name == "noop":
            if not 0 <= a["wait_ms"] <= MAX_WAIT_MS:
                raise ActionError(
                    f"noop: wait_ms must be 0..{MAX_WAIT_MS} (MAX_WAIT_MS), not {a['wait_ms']:g}"
                )
            plan.wait_ms = a["wait_ms"]
        else:  # pragma: no cover - ACTIONS and this function list the same names
            raise ActionError(f"{name} has no plan")

    def _on_screen(self, name: str, x: float, y: float) -> tuple[float, float]:
        """``(x, y)`` if it rounds to a pixel of the served area; else an ActionError
        naming the ranges."""
        vx, vy, vw, vh = self.viewport
        if vx <= round(x) < vx + vw and vy <= round(y) < vy + vh:
            return x, y
        raise ActionError(
            f"{name}: ({x:g}, {y:g}) is outside the screen; x must be {vx}..{vx + vw - 1} "
            f"and y {vy}..{vy + vh - 1} (screen pixels)"
        )

    def _drag(self, start: tuple[float, float], end: tuple[float, float]) -> list[Any]:
        events: list[Any] = [self._move(*start), self._move(*start, 1), _GAP]
        for i in range(1, DRAG_STEPS + 1):
            t = i / DRAG_STEPS
            x, y = start[0] + (end[0] - start[0]) * t, start[1] + (end[1] - start[1]) * t
            events.append(self._move(x, y, 1))
        return [*events, _GAP, self._move(*end)]

    def _scroll(self, dx: float, dy: float) -> tuple[list[InputEvent], tuple[int, int]]:
        vx, vy, vw, vh = self.viewport
        x, y = self.pointer or (vx + vw // 2, vy + vh // 2)
        events: list[InputEvent] = [self._move(x, y)]
        for delta, negative, positive in ((dy, WHEEL_UP, WHEEL_DOWN), (dx, WHEEL_LEFT, WHEEL_RIGHT)):
            notches = min(MAX_SCROLL_NOTCHES, max(1, round(abs(delta) / WHEEL_PIXELS))) if delta else 0
            bit = negative if delta < 0 else positive
            for _ in range(notches):
                events += [self._move(x, y, bit), self._move(x, y)]
        return events, (x, y)


def _round(point: tuple[float, float]) -> tuple[int, int]:
    return round(point[0]), round(point[1])


def plan(action: Action, elements: Elements, **planner: Any) -> Plan:
    """One action's plan with a fresh :class:`Planner` (keyword arguments go to it)."""
    return Planner(**planner).plan(action, elements)


_SELECT_JS: Final = """
const wanted = %s.map((s) => s.trim());
const options = Array.from(el.options);
const match = (o) => wanted.includes(o.value) || wanted.includes(o.label.trim()) ||
                     wanted.includes(o.text.trim());
const chosen = options.filter(match);
if (chosen.length < wanted.length) {
  const names = (o) => [o.value, o.label.trim(), o.text.trim()];
  const missing = wanted.filter((w) => !chosen.some((o) => names(o).includes(w)));
  return 'no option ' + JSON.stringify(missing) + ' in the list; its options are ' +
         JSON.stringify(options.map((o) => o.text.trim()).slice(0, 20));
}
if (!el.multiple && chosen.length > 1) return 'the list takes one option, not ' + chosen.length;
for (const o of options) o.selected = chosen.includes(o);
el.dispatchEvent(new Event('input', {bubbles: true}));
el.dispatchEvent(new Event('change', {bubbles: true}));
return null;
"""


def element_script(bid: str, body: str) -> str:
    """JavaScript that runs ``body`` with ``el`` the element of ``bid`` (the one the page's
    bid state owns, not a copy carrying its attribute) and returns an error or null."""
    return (
        f"(() => {{ const st = window[{json.dumps(STATE_GLOBAL)}]; const bid = {json.dumps(bid)};"
        f" const el = st && Array.from(document.querySelectorAll('[{BID_ATTRIBUTE}]'))"
        f".find((e) => st.owned.get(e) === bid);"
        f" if (!el) return 'no element with bid ' + JSON.stringify(bid) + ' on the page';"
        f" {body} }})()"
    )

