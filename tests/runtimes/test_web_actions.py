"""BrowserGym-style action strings: parsed (never eval'd), refused with clear messages,
planned as X input, and run on real Chromium through real X input (runtimes.web_actions,
runtimes.web_actor)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtimes.base import KeyEvent, PointerEvent
from runtimes.browser_keys import KeyGuard, browser_command
from runtimes.page_structure import Element, observe
from runtimes.web_actions import (
    ACTIONS,
    MAX_ACTION_CHARS,
    MAX_ACTIONS,
    Action,
    ActionError,
    Planner,
    combination_events,
    key_combination,
    parse,
)
from runtimes.web_actor import WebActor
from runtimes.web_keys import InsertText, text_events, type_events
from tests.runtimes.webpage import TIMEOUT, kiosk

try:
    import runtimes.browser  # noqa: F401  (miniwob, Xvnc and Chromium)
except ModuleNotFoundError as exc:
    MISSING: str | None = str(exc)
else:
    MISSING = None

pytestmark = pytest.mark.timeout(120)


def needs_browser() -> None:
    if MISSING is not None:
        pytest.skip(MISSING)


# Parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("click('a42')", [Action("click", {"bid": "a42", "button": "left", "modifiers": []})]),
        ('click("a42", button="right", modifiers=["Shift"])',
         [Action("click", {"bid": "a42", "button": "right", "modifiers": ["Shift"]})]),
        ("fill('a3', 'it\\'s \"quoted\"')", [Action("fill", {"bid": "a3", "value": "it's \"quoted\""})]),
        ("select_option('a5', 'Blue')", [Action("select_option", {"bid": "a5", "options": ["Blue"]})]),
        ("select_option('a5', ['Blue', 'Red'])",
         [Action("select_option", {"bid": "a5", "options": ["Blue", "Red"]})]),
        ("press('a1', 'Control+a')", [Action("press", {"bid": "a1", "key_comb": "Control+a"})]),
        ("scroll(0, -250.5)", [Action("scroll", {"delta_x": 0.0, "delta_y": -250.5})]),
        ("mouse_click(10, 20, button='middle')",
         [Action("mouse_click", {"x": 10.0, "y": 20.0, "button": "middle"})]),
        ("noop()", [Action("noop", {"wait_ms": 1000})]),
        ("noop(wait_ms=50)", [Action("noop", {"wait_ms": 50.0})]),
        ("send_msg_to_user('done')", [Action("send_msg_to_user", {"text": "done"})]),
        ("  keyboard_type('Hi')  \n\n  keyboard_press('Enter')\n",
         [Action("keyboard_type", {"text": "Hi"}), Action("keyboard_press", {"key_comb": "Enter"})]),
        ("click('a1'); hover('a2')", [Action("click", {"bid": "a1", "button": "left", "modifiers": []}),
                                     Action("hover", {"bid": "a2"})]),
    ],
)
def test_valid_strings_parse_to_their_calls(text: str, expected: list[Action]) -> None:
    assert parse(text) == expected


def test_every_action_prints_as_a_string_that_parses_back() -> None:
    for name, params in ACTIONS.items():
        args = {p.name: p.default if p.default is not ... else
                {"str": "a1", "num": 1.0, "options": ["x"], "keys": "Enter"}[p.kind] for p in params}
        action = Action(name, args)
        assert parse(str(action)) == [action]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("__import__('os').system('id')", "bare name (attribute access is not allowed)"),
        ("__import__('os')", "unknown function '__import__'"),
        ("click(a42)", "'bid' must be a literal (a bare name is not allowed); quote it: 'a42'"),
        ("click('a42').x", "attribute access on a call's result is not allowed"),
        ("click('a42')[0]", "a subscript on a call's result is not allowed"),
        ("lambda: click('a1')", "is a lambda, not a call"),
        ("(lambda: click('a1'))()", "call a function by its bare name (a lambda is not allowed)"),
        ("click(f'a{1}')", "an f-string is not allowed); write a plain string literal"),
        ("click('a1' + 'a2')", "an operator is not allowed"),
        ("click(str(1))", "a nested call is not allowed"),
        ("click(*['a1'])", "unpacking (*) is not allowed"),
        ("click(**{'bid': 'a1'})", "unpacking (**) is not allowed"),
        ("click('a1', bogus=1)", "click has no parameter 'bogus'"),
        ("click('a1', bid='a2')", "got 'bid' twice"),
        ("click()", "click needs 'bid': click(bid, button='left', modifiers=[])"),
        ("hover('a1', 'a2')", "hover takes at most 1 arguments"),
        ("click(42)", "'bid' must be a string, not 42"),
        ("noop(True)", "must be a literal (Constant is not allowed)"),
        ("scroll(1e999, 0)", "'delta_x' must be a finite number"),
        ("scroll(0, " + "9" * 400 + ")", "'delta_y' must be a finite number; an integer of 1329 bits"),
        ("mouse_move(-" + "9" * 400 + ", 0)", "'x' must be a finite number"),
        ("keyboard_press('Shift+')", "'Shift+' is not a key combination such as 'Control+a'"),
        ("keyboard_press('++')", "the '+' key itself comes last: 'Shift++'"),
        ("keyboard_press('a+b+c+d+e+f')", "at most 5 (MAX_COMBINATION_KEYS)"),
        ("keyboard_press('Control++')",
         "'Control++' is a command to the browser, not a key for the page (Control++ zooms)"),
        ("press('a1', 'ControlOrMeta+KeyW')", "is a command to the browser"),
        ("keyboard_press('Alt+F4')", "is a command to the browser"),
        ("keyboard_press('F11')", "is a command to the browser"),
        ("click('a1', button='thumb')", "button must be one of left, middle, right"),
        ("click('a1', modifiers=['Hyper'])", "modifiers must be a list of Alt, Control"),
        ("press('a1', 'Control+Nope')", "unknown key 'Nope'"),
        ("keyboard_press('')", "the key combination is empty"),
        ("select_option('a1', [])", "options must be a string or a list"),
        ("select_option('a1', ['x', 1])", "may be a list of strings only"),
        ("goto('http://example.com')", "unknown function 'goto'; the functions are click, dblclick"),
        ("import os", "line 1 is a statement (import), not a call"),
        ("x = click('a1')", "line 1 is a statement (assign), not a call"),
        ("'a1'", "line 1 is Constant, not a call"),
        ("click('a1'", "not a valid call: '(' was never closed"),
        ("click('a\x00')", "not a valid call"),
        ("", "the action is empty"),
        ("\n".join(["noop(0)"] * (MAX_ACTIONS + 1)), f"at most {MAX_ACTIONS} (MAX_ACTIONS)"),
        ("fill('a1', '" + "x" * MAX_ACTION_CHARS + "')", f"at most {MAX_ACTION_CHARS} (MAX_ACTION_CHARS)"),
        ("fill('a1', '" + "x" * 2001 + "')", "at most 2000 (MAX_TYPED_CHARS)"),
        ("click(" * 300 + ")" * 300, "not a valid call"),
    ],
)
def test_malformed_and_hostile_strings_are_refused_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(ActionError) as refused:
        parse(text)
    assert message in str(refused.value)


def test_parse_refuses_what_is_not_a_string() -> None:
    with pytest.raises(ActionError, match="not bytes"):
        parse(b"click('a1')")  # type: ignore[arg-type]


# Keys and plans, no browser ------------------------------------------------------------


def test_key_combinations_use_x_names_and_case_follows_shift() -> None:
    assert key_combination("Control+a") == ["Control_L", "a"]
    assert key_combination("Enter") == ["Return"]
    assert key_combination("Shift+ArrowLeft") == ["Shift_L", "Left"]
    assert key_combination("ControlOrMeta+KeyV") == ["Control_L", "v"]
    assert key_combination("+") == ["plus"] and key_combination("Shift++") == ["Shift_L", "plus"]
    assert key_combination("Control+c") == ["Control_L", "c"]  # editing shortcuts are the page's
    assert combination_events(["Control_L", "A"]) == [
        KeyEvent("Control_L", True), KeyEvent("a", True), KeyEvent("a", False), KeyEvent("Control_L", False)]
    assert combination_events(["Shift_L", "a"])[1:3] == [KeyEvent("A", True), KeyEvent("A", False)]
    assert type_events("aB!\n") == [
        KeyEvent("a", True), KeyEvent("a", False),
        KeyEvent("Shift_L", True), KeyEvent("B", True), KeyEvent("B", False), KeyEvent("Shift_L", False),
        KeyEvent("exclam", True), KeyEvent("exclam", False),
        KeyEvent("Return", True), KeyEvent("Return", False),
    ]
    assert type_events("B", shift_letters=False) == [KeyEvent("B", True), KeyEvent("B", False)]
    # Any script: X's keysym name where it has one, else the Unicode keysym by number.
    assert [e.key for e in type_events("é日😀ש")[::2]] == [  # type: ignore[union-attr]
        "eacute", "U+65E5", "U+1F600", "U+05E9"]
    with pytest.raises(ActionError, match="a control character"):
        type_events("\x07")
    # A page is typed keys for the keyboard's characters, DevTools text for the rest; fill
    # keeps tabs as text, keyboard_type presses Tab.
    assert text_events("a\tb", tabs_as_text=True) == [*type_events("a"), InsertText("\t"), *type_events("b")]
    assert text_events("a\tb") == type_events("a\tb")
    assert text_events("café 日本!") == [*type_events("caf"), InsertText("é"), *type_events(" "),
                                         InsertText("日本"), *type_events("!")]


@pytest.mark.parametrize(
    ("held", "key", "what"),
    [
        (["Control_L"], "t", "opens a tab"), (["Control_R"], "n", "opens a tab"),
        (["Control_L"], "w", "closes"), (["Control_L"], "plus", "zooms"),
        (["Control_L", "Shift_L"], "plus", "zooms"), (["Control_L"], "equal", "zooms"),
        (["Control_L"], "minus", "zooms"), (["Control_L"], "r", "reloads"), ([], "F5", "function key"),
        (["Alt_L"], "Left", "Alt"), (["Control_L"], "l", "address bar"), ([], "F12", "function key"),
        (["Control_L", "Shift_L"], "I", "DevTools"), (["Control_L", "Shift_L"], "j", "DevTools"),
        (["Control_L"], "Tab", "shortcut"), (["Super_L"], "a", "Alt"), ([], "Menu", "browser's own"),
    ],
)
def test_the_browsers_commands_are_named_and_refused(held: list[str], key: str, what: str) -> None:
    assert what in (browser_command(held, key) or "")
    with pytest.raises(ActionError, match="is a command to the browser"):
        key_combination("+".join([*held, key]))


@pytest.mark.parametrize(
    ("held", "key"),
    [([], "t"), (["Shift_L"], "T"), (["Control_L"], "a"), (["Control_L"], "c"), (["Control_L"], "v"),
     (["Control_L"], "x"), (["Control_L"], "z"), (["Control_L", "Shift_L"], "z"),
     (["Control_L", "Shift_L"], "Left"), (["Control_L"], "BackSpace"), ([], "Escape"), ([], "Control_L")],
)
def test_editing_keys_are_the_pages(held: list[str], key: str) -> None:
    assert browser_command(held, key) is None


def test_the_guard_drops_commands_and_their_releases_whoever_holds_control() -> None:
    guard = KeyGuard()
    ctrl, t = KeyEvent("Control_L", True), KeyEvent("t", True)
    # Control from one batch (a viewer), t from another: still a new tab, dropped.
    assert guard.filter([ctrl]) == [ctrl]
    assert guard.filter([t, KeyEvent("t", False), KeyEvent("a", True), KeyEvent("a", False)]) == [
        KeyEvent("a", True), KeyEvent("a", False)]
    # The wheel with Control held zooms: the wheel bits go, the left button stays.
    assert guard.filter([PointerEvent(5, 5, 8 | 1)]) == [PointerEvent(5, 5, 1)]
    assert guard.filter([KeyEvent("Control_L", False), t, PointerEvent(5, 5, 8)]) == [
        KeyEvent("Control_L", False), t, PointerEvent(5, 5, 8)]
    assert guard.refused == 2 and guard.last_refused == "Control+wheel zooms"


def element(bid: str, **kwargs: object) -> Element:
    fields: dict[str, object] = dict(
        bid=bid, tag="button", role="button", name="OK", text="OK", value=None,
        bbox=(10.0, 20.0, 40.0, 20.0), visibility=1.0, point=(30.0, 30.0), clickable=True,
        focused=False, checked=None, selected=None, expanded=None, disabled=False, required=False,
        shown=True, type=None, id=None, parent=None, depth=1,
    )
    fields.update(kwargs)
    return Element(**fields)  # type: ignore[arg-type]


def test_plans_are_x_events_at_the_elements_point_in_frame_pixels() -> None:
    page = {"a1": element("a1"), "a2": element("a2", tag="input", role="textbox", type="text",
                                                 point=(100.0, 50.0))}
    planner = Planner(frame_origin=(5, 10))
    click = planner.plan(parse("click('a1')")[0], page)
    assert click.error is None and click.events == [
        PointerEvent(25, 20, 0), PointerEvent(25, 20, 1), PointerEvent(25, 20, 0)]
    assert planner.pointer == (30, 30)
    fill = planner.plan(parse("fill('a2', 'Hi')")[0], page)
    assert fill.events[:3] == [PointerEvent(95, 40, 0), PointerEvent(95, 40, 1), PointerEvent(95, 40, 0)]
    assert fill.events[3:7] == combination_events(["Control_L", "a"])
    assert fill.events[7:] == type_events("Hi")
    scroll = planner.plan(parse("scroll(0, 250)")[0], page)  # at the pointer: 2 notches down
    assert scroll.events == [PointerEvent(95, 40, 0), PointerEvent(95, 40, 16), PointerEvent(95, 40, 0),
                             PointerEvent(95, 40, 16), PointerEvent(95, 40, 0)]
    left = planner.plan(parse("scroll(-10, 0)")[0], page)
    assert left.events[1:] == [PointerEvent(95, 40, 32), PointerEvent(95, 40, 0)]
    dbl = planner.plan(parse("dblclick('a1')")[0], page)
    assert [e.buttonmask for e in dbl.events] == [0, 1, 0, 1, 0]  # type: ignore[union-attr]


def test_coordinates_outside_the_served_area_are_errors_not_events() -> None:
    planner = Planner(frame_origin=(5, 10), viewport=(5, 10, 160, 210))
    for text in ["mouse_click(-1e308, 1e308)", "mouse_move(4, 50)", "mouse_dblclick(50, 220)",
                 "mouse_drag_and_drop(10, 20, 1e9, 20)", "mouse_click(164.6, 20)"]:
        plan = planner.plan(parse(text)[0], {})
        assert plan.events == [] and plan.error is not None, text
        assert "is outside the screen; x must be 5..164 and y 10..219 (screen pixels)" in plan.error
    assert planner.pointer is None  # nothing moved it
    corner = planner.plan(parse("mouse_click(164.4, 219)")[0], {})
    assert corner.error is None and corner.events[0] == PointerEvent(159, 209, 0)


def test_plans_of_elements_that_cannot_take_input_are_errors_not_exceptions() -> None:
    page = {
        "hidden": element("hidden", shown=False, visibility=0.0, point=None),
        "covered": element("covered", visibility=0.0, point=None),
        "away": element("away", bbox=(10.0, 900.0, 40.0, 20.0), visibility=0.0, point=None),
        "off": element("off", disabled=True),
        "div": element("div", tag="div", role="generic"),
        "list": element("list", tag="select", role="combobox"),
    }
    planner = Planner()
    errors = {text: planner.plan(parse(text)[0], page).error for text in [
        "click('nope')", "click('hidden')", "click('covered')", "click('off')", "fill('div', 'x')",
        "select_option('div', 'x')", "noop(wait_ms=20000)",
    ]}
    assert errors == {
        "click('nope')": "no element with bid 'nope' on the page (it may have gone; read bids "
                         "from the latest observation)",
        "click('hidden')": "element hidden (button 'OK') is hidden (display: none, visibility: "
                           "hidden or opacity 0)",
        "click('covered')": "element covered (button 'OK') is covered by another element (nothing "
                            "of it can be clicked)",
        "click('off')": "element off (button 'OK') is disabled",
        "fill('div', 'x')": "element div (div 'OK') is not a text field; fill and clear take an "
                            "input or a textarea",
        "select_option('div', 'x')": "element div (div 'OK') is not a <select>; click the option "
                                     "you want instead",
        "noop(wait_ms=20000)": "noop: wait_ms must be 0..10000 (MAX_WAIT_MS), not 20000",
    }
    select = planner.plan(parse("select_option('list', 'Red')")[0], page)
    assert select.error is None and select.events == [] and "el.options" in (select.script or "")


# On the page, through X input -------------------------------------------------------------

PAGE = """<!DOCTYPE html><html><head><title>Actions</title><style>body{margin:0;height:3000px;width:3000px}
#log{position:fixed;right:0;top:0}</style></head><body>
<input id='text' style='position:absolute;left:10px;top:10px;width:120px'>
<button id='dbl' style='position:absolute;left:10px;top:50px'>Twice</button>
<div id='hover' style='position:absolute;left:100px;top:50px;width:50px;height:20px'>Hover</div>
<select id='colour' style='position:absolute;left:10px;top:90px'><option>Red</option>
<option value='b'>Blue</option></select>
<button id='gone' style='display:none'>Gone</button>
<button id='far' style='position:absolute;left:10px;top:1500px'>Far</button>
<script>
window.seen = [];
const note = (what) => seen.push(what);
document.getElementById('text').addEventListener('keydown', (e) => { if (e.key === 'Enter') note('enter'); });
document.getElementById('dbl').addEventListener('dblclick', () => note('dblclick'));
document.getElementById('hover').addEventListener('mouseenter', () => note('hover'));
document.getElementById('colour').addEventListener('change', (e) => note('change:' + e.target.value));
document.getElementById('far').addEventListener('click', () => note('far'));
</script></body></html>"""


async def test_actions_run_as_x_input_and_the_page_reacts(tmp_path: Path) -> None:
    needs_browser()
    html = tmp_path / "actions.html"
    html.write_text(PAGE)
    async with kiosk() as page:
        await page.load_html(html)
        structure = await observe(page.cdp)
        bid = {e.id: e.bid for e in structure if e.id}
        actor = WebActor(page.cdp, page.inject, viewport=(0, 0, 640, 480))

        result = await actor.run(f"fill('{bid['text']}', 'Hello, World')")
        assert result.error is None and result.devtools == [] and result.events > 20
        assert await page.value("document.getElementById('text').value") == "Hello, World"
        result = await actor.run(f"press('{bid['text']}', 'Enter')")
        assert result.error is None and await page.value("seen") == ["enter"]
        assert await page.value("document.activeElement.id") == "text"
        result = await actor.run(f"clear('{bid['text']}')")
        assert result.error is None and await page.value("document.getElementById('text').value") == ""

        assert (await actor.run(f"dblclick('{bid['dbl']}')")).error is None
        assert (await actor.run(f"hover('{bid['hover']}')")).error is None
        assert (await page.value("seen"))[1:] == ["dblclick", "hover"], await page.value("seen")

        result = await actor.run(f"select_option('{bid['colour']}', 'Blue')")
        assert result.error is None and result.devtools == [f"select_option {bid['colour']}"]
        assert (await page.value("seen"))[-1] == "change:b"
        result = await actor.run(f"select_option('{bid['colour']}', 'Green')")
        assert "no option [\"Green\"] in the list; its options are [\"Red\",\"Blue\"]" in (result.error or "")

        result = await actor.run("scroll(0, 240)")
        assert result.error is None
        await page.cdp.wait_for("scrollY === 240", TIMEOUT)  # two notches of 120 px, animated
        result = await actor.run("scroll(0, -120)")
        await page.cdp.wait_for("scrollY === 120", TIMEOUT)
        result = await actor.run("scroll(130, 0)")  # wheel buttons 6/7: sideways
        assert result.error is None
        await page.cdp.wait_for("scrollX === 120", TIMEOUT)
        assert await page.value("scrollY") == 120

        # An element below the fold is scrolled into view (DevTools, said so), then clicked by X.
        result = await actor.run(f"click('{bid['far']}')")
        assert result.error is None and result.devtools == [f"scrollIntoView {bid['far']}"]
        assert (await page.value("seen"))[-1] == "far"

        result = await actor.run(f"click('{bid['gone']}')")
        assert result.error == f"element {bid['gone']} (button 'Gone') is hidden (display: none, " \
                               "visibility: hidden or opacity 0)"
        result = await actor.run("click('a99999')")
        assert result.error is not None and result.error.startswith("no element with bid 'a99999'")
        result = await actor.run("__import__('os').system('id')")
        assert result.error is not None and result.events == 0
        result = await actor.run("send_msg_to_user('all done')\nnoop(wait_ms=10)")
        assert result.error is None and result.messages == ["all done"]


async def test_click_fill_and_press_solve_miniwob_tasks_through_x_input() -> None:
    needs_browser()
    async with kiosk() as page:
        await page.load_task("click-test", seed=7)
        actor = WebActor(page.cdp, page.inject)
        button = (await observe(page.cdp)).find(role="button")[0]
        assert (await actor.run(f"click('{button.bid}')")).error is None
        await page.cdp.wait_for("WOB_DONE_GLOBAL === true", TIMEOUT)
        assert await page.value("WOB_REWARD_GLOBAL") > 0

        instruction = await page.load_task("enter-text", seed=7)
        word = instruction.split('"')[1]
        structure = await observe(page.cdp)
        field, submit = structure.find(role="textbox")[0], structure.find(role="button", name="Submit")[0]
        result = await actor.run(f"fill('{field.bid}', {word!r})\nclick('{submit.bid}')")
        assert result.error is None
        await page.cdp.wait_for("WOB_DONE_GLOBAL === true", TIMEOUT)
        assert await page.value("WOB_RAW_REWARD_GLOBAL") == 1


# The scripted oracle, through the MiniWoB runtime's own X input path ----------------------

ORACLE_TASKS = ("click-test", "click-button", "click-link", "enter-text", "focus-text", "click-checkboxes")
ORACLE_SEEDS = (11, 12)


async def test_the_oracle_solves_tasks_reading_only_the_structure_and_acting_on_elements() -> None:
    """benchmarks.web_oracle reads the observation body and the instruction and sends
    element actions, which go into X through ``MiniWoBRuntime.inject``."""
    needs_browser()
    from benchmarks.web_oracle import run_episode
    from runtimes.browser import RUNTIMES, env_id_for

    async def play(task: str) -> None:
        runtime = RUNTIMES[env_id_for(f"{task}.html")]()
        await runtime.astart()
        try:
            cdp = runtime.cdp
            assert cdp is not None
            actor = WebActor(cdp, runtime.inject)

            async def body() -> dict[str, object]:
                return (await observe(cdp)).observation()

            async def run(action: str) -> str | None:
                return (await actor.run(action)).error

            async def outcome() -> tuple[bool, float]:
                done, raw = await cdp.evaluate("[WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL]")
                return bool(done), float(raw)

            for seed in ORACLE_SEEDS:
                await runtime.areset(seed)
                instruction = runtime.instruction()
                assert instruction
                episode = await run_episode(task, instruction, body, run, outcome)
                assert episode.done and episode.reward == 1, (task, seed, instruction, episode)
                assert episode.errors == [] and all("(" in a for a in episode.actions)
        finally:
            await runtime.aclose()

    for task in ORACLE_TASKS:
        await play(task)
