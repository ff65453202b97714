"""The key names of web agents' action strings: Playwright's (BrowserGym's) and X's, every
key a keyboard has, as the X keysyms the browser is sent. Whether a browser remote takes
a key is its policy's business (runtimes.web_keys' shortcuts, the runtime's keys); a name
is never unknown for being a function, keypad or system key."""

from __future__ import annotations

import pytest

from runtimes.web_keys import ActionError, key_name
from vncdriver import keysyms

#: Playwright's names (the KeyboardEvent key and code values it takes) -> X keysyms.
PLAYWRIGHT = {
    "F1": "F1", "F12": "F12", "Numpad0": "KP_0", "Numpad9": "KP_9", "NumpadAdd": "KP_Add",
    "NumpadSubtract": "KP_Subtract", "NumpadMultiply": "KP_Multiply", "NumpadDivide": "KP_Divide",
    "NumpadDecimal": "KP_Decimal", "NumpadEnter": "KP_Enter", "PrintScreen": "Print",
    "ContextMenu": "Menu", "CapsLock": "Caps_Lock", "NumLock": "Num_Lock", "ScrollLock": "Scroll_Lock",
    "Pause": "Pause", "Insert": "Insert", "Meta": "Meta_L", "ShiftLeft": "Shift_L",
    "ShiftRight": "Shift_R", "ControlRight": "Control_R", "AltLeft": "Alt_L", "MetaRight": "Meta_R",
    "Backquote": "grave", "Quote": "apostrophe", "Minus": "minus", "BracketLeft": "bracketleft",
    "KeyQ": "q", "Digit7": "7", "ArrowLeft": "Left",
}
#: X's own names, as xdotool spells them.
X_NAMES = ["KP_0", "KP_Enter", "Super_L", "Print", "Menu", "F5", "Page_Up", "Hyper_L"]


@pytest.mark.parametrize(("name", "want"), PLAYWRIGHT.items())
def test_playwright_names_are_keysyms(name: str, want: str) -> None:
    assert key_name(name) == want
    assert keysyms.keysym(want) > 0


@pytest.mark.parametrize("name", X_NAMES)
def test_x_names_are_taken_as_they_are(name: str) -> None:
    assert keysyms.keysym(key_name(name)) == keysyms.keysym(name)


def test_a_keysym_s_other_names_are_its_own_name() -> None:
    """As the browser's key list has it: X's Page_Down is keysym Next."""
    assert key_name("Page_Down") == key_name("PageDown") == "Next"


def test_an_unknown_name_says_which_names_exist() -> None:
    with pytest.raises(ActionError, match="unknown key 'NumpadFoo'.*Numpad0, PrintScreen"):
        key_name("NumpadFoo")
