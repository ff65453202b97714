"""Key names computer-use agents send, as the X keysyms RFB key events carry.

Holds :func:`xdotool_keys` (Anthropic's ``key`` and ``hold_key``: xdotool's syntax,
``"ctrl+s"``, ``"Return"``, ``"KP_0"``, ``"shift+Tab"``, several combinations separated
by spaces), :func:`openai_keys` (OpenAI's ``keypress``: ``["CTRL", "A"]``,
``["ENTER"]``, ``["ARROWLEFT"]``), :func:`combo_events` and :func:`type_events`, and
their limits. xdotool's names are X keysym names already (``vncdriver.keysyms`` reads
the keysymdef package's table, with its aliases: ``ctrl``, ``alt``, ``super``, ``esc``);
OpenAI's are browser-style names in capitals, which those aliases fold too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from runtimes import web_keys
from runtimes.base import InputEvent, KeyEvent
from runtimes.web_keys import MAX_COMBINATION_KEYS, ActionError
from vncdriver import keysyms
from vncdriver.errors import UnknownKey

from .errors import ToolError

#: Combinations one ``key`` action may chain (``"ctrl+a Delete"`` is two).
MAX_COMBINATIONS: Final = 16
#: Characters one ``type`` action may type (longer text: several calls).
MAX_TYPE_CHARS: Final = 2000
#: OpenAI's key names (its computer-use sample's key table) that neither keysymdef's
#: names, folded, nor ``vncdriver.keysyms``' aliases spell as OpenAI means them: its
#: ``CMD`` is the Meta key its browser sample presses.
EXTRA_NAMES: Final = {"cmd": "Meta_L", "command": "Meta_L", "ins": "Insert"}
#: An event as the remote's orders take it.
Event = tuple[object, ...]


def key_name(name: str) -> str:
    """The X keysym name of one key as xdotool or OpenAI spells it: the keysym's own
    name, which runtimes list (``Page_Down`` is keysym ``Next``)."""
    extra = EXTRA_NAMES.get(name.lower())
    if extra is not None:
        return extra
    try:
        return keysyms.name(keysyms.keysym(name))
    except UnknownKey:
        raise ToolError(
            f"unknown key {name!r}: use xdotool's (X keysym) names such as Return, Tab, "
            "BackSpace, Escape, Left, Page_Down, F5, KP_0, ctrl, shift, alt, super, a, A, 1"
        ) from None


def _combo(combo: str) -> list[str]:
    if combo == "+":
        parts = ["+"]
    elif combo.endswith("++"):
        parts = [*combo[:-2].split("+"), "plus"]
    else:
        parts = combo.split("+")
    if any(not part for part in parts):
        raise ToolError(f"{combo!r} is not a key combination: keys joined by '+', as 'ctrl+s', 'shift+Tab'")
    if len(parts) > MAX_COMBINATION_KEYS:
        raise ToolError(f"{combo!r} has {len(parts)} keys; at most {MAX_COMBINATION_KEYS} in one combination")
    return [key_name(part) for part in parts]


def xdotool_keys(text: object) -> list[list[str]]:
    """``"ctrl+a Delete"`` -> ``[["Control_L", "a"], ["Delete"]]``: each combination's
    keysym names, modifiers first (xdotool's ``key`` syntax)."""
    if not isinstance(text, str) or not text.strip():
        raise ToolError("'text' is the keys to press in xdotool's syntax: 'Return', 'ctrl+s', 'shift+Tab'")
    combos = text.split()
    if len(combos) > MAX_COMBINATIONS:
        raise ToolError(f"{len(combos)} key combinations in one call; at most {MAX_COMBINATIONS}")
    return [_combo(combo) for combo in combos]


def openai_keys(keys: Sequence[str]) -> list[str]:
    """OpenAI's ``keypress`` keys (pressed together) as keysym names: ``["CTRL", "A"]`` ->
    ``["Control_L", "a"]``."""
    if not isinstance(keys, list | tuple) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise ToolError("keypress takes 'keys', key names pressed together: ['CTRL', 'A'], ['ENTER']")
    if len(keys) > MAX_COMBINATION_KEYS:
        raise ToolError(f"{len(keys)} keys pressed together; at most {MAX_COMBINATION_KEYS}")
    names = [key_name(k) for k in keys]
    if len(names) > 1 and len(names[-1]) == 1:  # "CTRL"+"A" means ctrl+a, not ctrl+shift+a
        names[-1] = names[-1].lower()
    return names


def _tuple(event: InputEvent) -> Event:
    assert isinstance(event, KeyEvent)
    return ("KeyEvent", event.key, event.down)


def combo_events(names: Sequence[str]) -> list[Event]:
    """Hold the modifiers, tap the last key, let go in reverse order."""
    return [_tuple(e) for e in web_keys.combination_events(names)]


def press_events(names: Sequence[str], down: bool) -> list[Event]:
    """Every key of ``names`` down (in order) or up (in reverse order)."""
    ordered = names if down else list(reversed(names))
    return [("KeyEvent", name, down) for name in ordered]


def type_events(text: str) -> list[Event]:
    """Key events that type ``text`` (printable characters, newlines, tabs)."""
    if not isinstance(text, str) or not text:
        raise ToolError("'text' is the text to type, a non-empty string")
    if len(text) > MAX_TYPE_CHARS:
        raise ToolError(f"{len(text)} characters to type; at most {MAX_TYPE_CHARS} in one call (split it)")
    try:
        return [_tuple(e) for e in web_keys.type_events(text)]
    except ActionError as exc:
        raise ToolError(str(exc)) from None
