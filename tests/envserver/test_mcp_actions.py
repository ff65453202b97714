"""The computer-use actions as RFB input, with no remote: xdotool's and OpenAI's key names
as X keysyms (a table over the documented names), Anthropic's ``computer`` actions and
OpenAI's action objects as events, the screenshot's size and the coordinates mapped back,
and the errors a model reads."""

from __future__ import annotations

import pytest

from envserver.agent_port import Held
from envserver.computer_use import actions, keys
from envserver.computer_use.actions import Screen, screenshot_size
from envserver.computer_use.errors import ToolError
from vncdriver import keysyms

#: xdotool's key syntax as Anthropic's docs and reference implementation use it -> keysyms.
XDOTOOL: dict[str, list[list[str]]] = {
    "Return": [["Return"]], "ctrl+s": [["Control_L", "s"]], "KP_0": [["KP_0"]],
    "shift+Tab": [["Shift_L", "Tab"]], "ctrl+a": [["Control_L", "a"]], "alt+F4": [["Alt_L", "F4"]],
    "super": [["Super_L"]], "Escape": [["Escape"]], "BackSpace": [["BackSpace"]],
    "Page_Down": [["Next"]], "Page_Up": [["Prior"]], "space": [["space"]], "Delete": [["Delete"]],
    "ctrl+shift+t": [["Control_L", "Shift_L", "t"]], "Up": [["Up"]], "F5": [["F5"]],
    "KP_Enter": [["KP_Enter"]], "Home": [["Home"]], "ctrl+a Delete": [["Control_L", "a"], ["Delete"]],
    "minus": [["minus"]], "ctrl+plus": [["Control_L", "plus"]], "Tab": [["Tab"]],
    "cmd+c": [["Meta_L", "c"]], "Enter": [["Return"]], "Insert": [["Insert"]],
}
#: OpenAI computer_use_preview's key names (its sample's key table), in its capitals.
OPENAI: dict[str, str] = {
    "ENTER": "Return", "CTRL": "Control_L", "ALT": "Alt_L", "SHIFT": "Shift_L", "TAB": "Tab",
    "ESC": "Escape", "SPACE": "space", "BACKSPACE": "BackSpace", "DELETE": "Delete",
    "ARROWLEFT": "Left", "ARROWRIGHT": "Right", "ARROWUP": "Up", "ARROWDOWN": "Down",
    "HOME": "Home", "END": "End", "PAGEUP": "Prior", "PAGEDOWN": "Next", "INSERT": "Insert",
    "CAPSLOCK": "Caps_Lock", "CMD": "Meta_L", "SUPER": "Super_L", "WIN": "Super_L",
    "OPTION": "Alt_L", "/": "slash", "\\": "backslash", "F1": "F1", "A": "A", "a": "a", "1": "1",
}


@pytest.mark.parametrize(("text", "want"), XDOTOOL.items())
def test_xdotool_names_are_keysyms(text: str, want: list[list[str]]) -> None:
    got = keys.xdotool_keys(text)
    assert got == want
    for combo in got:
        for name in combo:
            assert keysyms.keysym(name) > 0  # a real X keysym: RFB carries its number


@pytest.mark.parametrize(("name", "want"), OPENAI.items())
def test_openai_names_are_keysyms(name: str, want: str) -> None:
    assert keys.openai_keys([name]) == [want]
    assert keysyms.keysym(want) > 0


def test_openai_combinations_press_the_letter_not_shift_letter() -> None:
    assert keys.openai_keys(["CTRL", "A"]) == ["Control_L", "a"]
    assert keys.combo_events(keys.openai_keys(["CTRL", "A"])) == [
        ("KeyEvent", "Control_L", True), ("KeyEvent", "a", True), ("KeyEvent", "a", False),
        ("KeyEvent", "Control_L", False)]


@pytest.mark.parametrize("bad", ["ctrl+", "", "ctrl+nosuchkey", "a+b+c+d+e+f"])
def test_bad_key_names_say_what_to_send(bad: str) -> None:
    with pytest.raises(ToolError, match="key|combination|keys"):
        keys.xdotool_keys(bad)


@pytest.mark.parametrize(("size", "shot"), [
    ((160, 210), (160, 210)),  # MiniWoB: smaller than XGA, native
    ((1024, 768), (1024, 768)),
    ((1920, 1080), (1280, 720)),  # 16:9 -> WXGA's width
    ((2560, 1600), (1280, 800)),
    ((1600, 1200), (1024, 768)),
    ((640, 480), (640, 480)),
])
def test_screenshots_are_xga_or_wxga_by_aspect(size: tuple[int, int], shot: tuple[int, int]) -> None:
    assert screenshot_size(*size) == shot


def test_coordinates_map_back_to_the_screen() -> None:
    screen = Screen.of(1920, 1080)
    assert screen.to_native([640, 360]) == (960, 540)
    assert screen.to_native([1279, 719]) == (1918, 1078)
    assert screen.to_shot(960, 540) == (640, 360)
    with pytest.raises(ToolError, match=r"coordinate \[1400, 20\] is outside the 1280×720 screenshot"):
        screen.to_native([1400, 20])
    with pytest.raises(ToolError, match=r"'coordinate' is \[x, y\]"):
        screen.to_native("10,20")


def _plan(args: dict[str, object], screen: Screen | None = None, held: Held | None = None) -> actions.Plan:
    return actions.parse(args, screen or Screen.of(1024, 768), held or Held())


def test_anthropic_clicks_move_then_press_and_release() -> None:
    held = Held()
    assert _plan({"action": "left_click", "coordinate": [10, 20]}, held=held).events == [
        ("PointerEvent", 10, 20, 0), ("PointerEvent", 10, 20, 1), ("PointerEvent", 10, 20, 0)]
    assert held.pointer == (10, 20)
    # At the pointer when no coordinate; a triple click is three; shift held for a click.
    assert _plan({"action": "triple_click"}, held=held).events == [
        ("PointerEvent", 10, 20, 1), ("PointerEvent", 10, 20, 0)] * 3
    assert _plan({"action": "right_click", "coordinate": [5, 5], "text": "shift"}).events == [
        ("PointerEvent", 5, 5, 0), ("KeyEvent", "Shift_L", True), ("PointerEvent", 5, 5, 4),
        ("PointerEvent", 5, 5, 0), ("KeyEvent", "Shift_L", False)]
    assert _plan({"action": "middle_click", "coordinate": [1, 1]}).events[1] == ("PointerEvent", 1, 1, 2)


def test_anthropic_drag_mouse_down_up_and_scroll() -> None:
    drag = _plan({"action": "left_click_drag", "start_coordinate": [1, 2], "coordinate": [30, 40]})
    assert drag.events == [
        ("PointerEvent", 1, 2, 0), ("PointerEvent", 1, 2, 1), ("PointerEvent", 30, 40, 1),
        ("PointerEvent", 30, 40, 0)]
    held = Held()
    _plan({"action": "left_mouse_down", "coordinate": [3, 3]}, held=held)
    assert held.buttons == 1
    moved = _plan({"action": "mouse_move", "coordinate": [9, 9]}, held=held)
    assert moved.events == [("PointerEvent", 9, 9, 1)]
    assert _plan({"action": "left_mouse_up"}, held=held).events == [("PointerEvent", 9, 9, 0)]
    scroll = _plan({"action": "scroll", "coordinate": [5, 6], "scroll_direction": "down", "scroll_amount": 2})
    turn = [("PointerEvent", 5, 6, 16), ("PointerEvent", 5, 6, 0)]
    assert scroll.events == [("PointerEvent", 5, 6, 0), *turn, *turn]


def test_anthropic_keys_typing_holding_waiting_and_looking() -> None:
    assert _plan({"action": "key", "text": "ctrl+s"}).events == [
        ("KeyEvent", "Control_L", True), ("KeyEvent", "s", True), ("KeyEvent", "s", False),
        ("KeyEvent", "Control_L", False)]
    assert _plan({"action": "type", "text": "Hi"}).events == [
        ("KeyEvent", "Shift_L", True), ("KeyEvent", "H", True), ("KeyEvent", "H", False),
        ("KeyEvent", "Shift_L", False), ("KeyEvent", "i", True), ("KeyEvent", "i", False)]
    hold = _plan({"action": "hold_key", "text": "shift", "duration": 0.5})
    assert hold.steps == [[("KeyEvent", "Shift_L", True)], 0.5, [("KeyEvent", "Shift_L", False)]]
    assert _plan({"action": "wait", "duration": 1}).steps == [1.0]
    for looking in ({"action": "screenshot"}, {"action": "cursor_position"},
                    {"action": "zoom", "region": [0, 0, 100, 50]}):
        plan = _plan(looking)
        assert not plan.acts and plan.events == []
    zoom = _plan({"action": "zoom", "region": [0, 0, 640, 360]}, Screen.of(1920, 1080))
    assert zoom.zoom == (0, 0, 960, 540)


def test_openai_action_objects_map_to_the_same_input() -> None:
    screen = Screen.of(1024, 768)
    assert _plan({"type": "click", "x": 10, "y": 20, "button": "left"}).events == \
        _plan({"action": "left_click", "coordinate": [10, 20]}).events
    right = _plan({"type": "click", "x": 10, "y": 20, "button": "right"})
    assert right.events[1] == ("PointerEvent", 10, 20, 4)
    assert _plan({"type": "double_click", "x": 3, "y": 4}).events == \
        _plan({"action": "double_click", "coordinate": [3, 4]}).events
    assert _plan({"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 5, "y": 6}, {"x": 9, "y": 9}]}).events == [
        ("PointerEvent", 1, 2, 0), ("PointerEvent", 1, 2, 1), ("PointerEvent", 5, 6, 1),
        ("PointerEvent", 9, 9, 1), ("PointerEvent", 9, 9, 0)]
    assert _plan({"type": "keypress", "keys": ["CTRL", "C"]}).events == \
        _plan({"action": "key", "text": "ctrl+c"}).events
    assert _plan({"type": "type", "text": "ok"}).events == _plan({"action": "type", "text": "ok"}).events
    assert _plan({"type": "move", "x": 7, "y": 8}).events == [("PointerEvent", 7, 8, 0)]
    assert _plan({"type": "scroll", "x": 5, "y": 5, "scroll_x": 0, "scroll_y": -300}).events == [
        ("PointerEvent", 5, 5, 0)] + [("PointerEvent", 5, 5, 8), ("PointerEvent", 5, 5, 0)] * 3
    assert _plan({"type": "wait"}).steps == [actions.OPENAI_WAIT_SECONDS]
    assert not _plan({"type": "screenshot"}, screen).acts


@pytest.mark.parametrize(("args", "error"), [
    ({"action": "fly"}, "unknown action 'fly': one of key, hold_key"),
    ({"action": "mouse_move"}, "mouse_move needs 'coordinate'"),
    ({"action": "scroll", "coordinate": [1, 1], "scroll_direction": "sideways"}, "'scroll_direction' is up"),
    ({"action": "wait", "duration": 1000}, "'duration' is seconds from 0 to 60"),
    ({"action": "zoom", "region": [10, 10, 5, 5]}, "is not a box inside the 1024×768 screenshot"),
    ({"type": "click", "x": 2000, "y": 1}, r"coordinate \[2000, 1\] is outside the 1024×768 screenshot"),
    ({"type": "teleport"}, "unknown action type 'teleport'"),
    ({}, "send Anthropic's"),
])
def test_bad_actions_get_errors_a_model_can_correct(args: dict[str, object], error: str) -> None:
    with pytest.raises(ToolError, match=error):
        _plan(args)
