"""A scripted web agent for MiniWoB++ tasks that reads only the page's structure.

Holds :data:`SOLVERS` (task -> a function of the instruction and the
``v0.env.observation`` body that returns the next action string, BrowserGym style, or
None when it has nothing to do), :func:`act`, and :func:`run_episode` (observe, act,
until the environment says the episode ended), for the ``browser_oracle`` benchmark and
the tests.

The oracle reads what an agent receives — the instruction (``core.getUtterance()``,
``v0.env.text``) and the structured observation (its ``elements``: bid, role, name,
text, value, checked, visibility) — and acts only through element actions
(``click('a12')``, ``fill``, ``focus``, ``select_option``): no coordinates, nothing from
the task's source.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

Observation = dict[str, Any]
Solver = Callable[[str, Observation], "str | None"]

#: Steps one episode may take before the oracle gives up.
MAX_STEPS: Final = 8
#: Calls in one action string (runtimes.web_actions.MAX_ACTIONS).
MAX_ACTIONS: Final = 10


def quoted(instruction: str) -> list[str]:
    """The ``"..."`` parts of an instruction."""
    return re.findall(r'"([^"]*)"', instruction)


def elements(obs: Observation, **criteria: Any) -> list[dict[str, Any]]:
    """The visible elements whose fields equal every criterion, in document order."""
    return [
        e for e in obs.get("elements", [])
        if e.get("visibility", 0) > 0 and all(e.get(k) == v for k, v in criteria.items())
    ]


def first(obs: Observation, **criteria: Any) -> dict[str, Any] | None:
    found = elements(obs, **criteria)
    return found[0] if found else None


def click(element: dict[str, Any] | None) -> str | None:
    return None if element is None else f"click({element['bid']!r})"


def submit(obs: Observation, name: str = "Submit") -> dict[str, Any] | None:
    for element in elements(obs, role="button"):
        if element["name"].lower() == name.lower():
            return element
    return None


def _click_test(instruction: str, obs: Observation) -> str | None:
    return click(first(obs, role="button"))


def _click_named_button(instruction: str, obs: Observation) -> str | None:
    """click-button ('Click on the "no" button.'), click-test-2 ('Click button ONE.')."""
    names = quoted(instruction) or re.findall(r"button (\w+)\.", instruction)
    return click(first(obs, role="button", name=names[0])) if names else None


def _click_button_sequence(instruction: str, obs: Observation) -> str | None:
    one, two = first(obs, role="button", name="ONE"), first(obs, role="button", name="TWO")
    if one is None or two is None:
        return None
    return f"click({one['bid']!r})\nclick({two['bid']!r})"


def _click_link(instruction: str, obs: Observation) -> str | None:
    words = quoted(instruction)
    if not words:
        return None
    word = words[0]
    for element in elements(obs, clickable=True):
        if element["tag"] == "span" and word in (element["name"], element["text"]):
            return click(element)
    return None


def _fill_and_submit(text: str, obs: Observation, fields: int = 1) -> str | None:
    boxes = elements(obs, role="textbox")[:fields]
    button = submit(obs)
    if len(boxes) < fields or button is None:
        return None
    return "\n".join([*(f"fill({box['bid']!r}, {text!r})" for box in boxes), click(button) or ""])


def _enter_text(instruction: str, obs: Observation) -> str | None:
    return _fill_and_submit(quoted(instruction)[0], obs)


def _enter_text_2(instruction: str, obs: Observation) -> str | None:
    word = quoted(instruction)[0]
    return _fill_and_submit(word.upper() if "upper case" in instruction else word.lower(), obs)


def _enter_password(instruction: str, obs: Observation) -> str | None:
    return _fill_and_submit(quoted(instruction)[0], obs, fields=2)


def _login_user(instruction: str, obs: Observation) -> str | None:
    user, password = quoted(instruction)[:2]
    boxes, button = elements(obs, role="textbox"), submit(obs, "Login")
    if len(boxes) < 2 or button is None:
        return None
    return (f"fill({boxes[0]['bid']!r}, {user!r})\nfill({boxes[1]['bid']!r}, {password!r})\n"
            f"click({button['bid']!r})")


def _focus_text(instruction: str, obs: Observation) -> str | None:
    boxes = elements(obs, role="textbox")
    ordinal = re.search(r"(\d)(?:st|nd|rd|th)", instruction)
    index = int(ordinal.group(1)) - 1 if ordinal else 0
    boxes.sort(key=lambda e: (e["bbox"][1], e["bbox"][0]))  # "1st" is the topmost
    return f"focus({boxes[index]['bid']!r})" if index < len(boxes) else None


def _select_and_submit(names: list[str], obs: Observation, role: str) -> str | None:
    """Click the boxes (checkboxes or radios) whose state differs from what is asked."""
    button = submit(obs)
    if button is None:
        return None
    calls = [
        f"click({box['bid']!r})" for box in elements(obs, role=role)
        if bool(box.get("checked")) != (box["name"] in names)
    ]
    if calls:  # the boxes first (as many as one action takes), then Submit
        return "\n".join(calls[:MAX_ACTIONS])
    return f"click({button['bid']!r})"


def _click_checkboxes(instruction: str, obs: Observation) -> str | None:
    wanted = re.match(r"Select (.*) and click Submit\.", instruction)
    if wanted is None:
        return None
    listed = wanted.group(1)
    names = [] if listed == "nothing" else [n.strip() for n in listed.split(",")]
    return _select_and_submit(names, obs, "checkbox")


def _click_option(instruction: str, obs: Observation) -> str | None:
    wanted = re.match(r"Select (.*) and click Submit\.", instruction)
    return None if wanted is None else _select_and_submit([wanted.group(1)], obs, "radio")


def _choose_list(instruction: str, obs: Observation) -> str | None:
    wanted = re.match(r"Select (.*) from the list and click Submit\.", instruction)
    listbox, button = first(obs, tag="select"), submit(obs)
    if wanted is None or listbox is None or button is None:
        return None
    return f"select_option({listbox['bid']!r}, {wanted.group(1)!r})\nclick({button['bid']!r})"


def _click_dialog(instruction: str, obs: Observation) -> str | None:
    return click(first(obs, role="button", name="Close") or first(obs, role="button", name="close"))


def _click_tab(instruction: str, obs: Observation) -> str | None:
    number = re.search(r"Tab #(\d)", instruction)
    name = f"Tab #{number.group(1)}" if number else None
    return click(first(obs, role="tab", name=name) or first(obs, role="link", name=name))


def _click_collapsible(instruction: str, obs: Observation) -> str | None:
    closed = first(obs, role="tab", expanded=False)
    return click(closed) if closed is not None else click(submit(obs))


def _click_scroll_list(instruction: str, obs: Observation) -> str | None:
    wanted = re.match(r"Select (.*) from the scroll list and click Submit\.", instruction)
    listbox, button = first(obs, tag="select"), submit(obs)
    if wanted is None or listbox is None or button is None:
        return None
    options = {e["name"] for e in obs.get("elements", []) if e.get("parent") == listbox["bid"]}
    names: list[str] = []
    for item in wanted.group(1).split(", "):  # a name may hold " and ": try it whole first
        names += [item] if item in options or " and " not in item else item.split(" and ")
    return f"select_option({listbox['bid']!r}, {names!r})\nclick({button['bid']!r})"


_WIDGETS: Final = {"button": ("button", None), "checkbox": ("checkbox", None), "radio": ("radio", None),
                   "text": ("textbox", "input"), "textarea": ("textbox", "textarea")}


def _click_widget(instruction: str, obs: Observation) -> str | None:
    kind = quoted(instruction)[0]
    role, tag = _WIDGETS.get(kind, (None, None))
    for element in elements(obs, role=role):
        if tag is None or element["tag"] == tag:
            return click(element)
    return None


#: MiniWoB task -> its solver.
SOLVERS: Final[dict[str, Solver]] = {
    "click-test": _click_test,
    "click-test-2": _click_named_button,
    "click-button": _click_named_button,
    "click-button-sequence": _click_button_sequence,
    "click-link": _click_link,
    "click-checkboxes": _click_checkboxes,
    "click-checkboxes-large": _click_checkboxes,
    "click-checkboxes-transfer": _click_checkboxes,
    "click-test-transfer": _click_named_button,
    "unicode-test": _click_named_button,
    "enter-text-dynamic": _enter_text,
    "click-collapsible": _click_collapsible,
    "click-scroll-list": _click_scroll_list,
    "click-option": _click_option,
    "click-dialog": _click_dialog,
    "click-tab": _click_tab,
    "click-widget": _click_widget,
    "choose-list": _choose_list,
    "enter-text": _enter_text,
    "enter-text-2": _enter_text_2,
    "enter-password": _enter_password,
    "login-user": _login_user,
    "focus-text": _focus_text,
    "focus-text-2": _focus_text,
}


def act(task: str, instruction: str, observation: Observation) -> str | None:
    """The next action string for ``task``, or None when the oracle sees nothing to do."""
    return SOLVERS[task](instruction, observation)


@dataclass
class Episode:
    """One episode the oracle played."""

    reward: float = 0.0
    done: bool = False
    steps: int = 0
    actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def run_episode(
    task: str,
    instruction: str,
    observe: Callable[[], Awaitable[Observation]],
    run: Callable[[str], Awaitable[str | None]],
    outcome: Callable[[], Awaitable[tuple[bool, float]]],
    max_steps: int = MAX_STEPS,
) -> Episode:
    """Play one episode: ``observe()`` gives the observation body, ``run(action)`` runs
    an action string and returns its error (``last_action_error``), ``outcome()`` says
    whether the episode ended and its reward (the environment's side, not the oracle's)."""
    episode = Episode()
    for _ in range(max_steps):
        action = act(task, instruction, await observe())
        if action is None:
            break
        episode.steps += 1
        episode.actions.append(action)
        error = await run(action)
        if error is not None:
            episode.errors.append(error)
        episode.done, episode.reward = await outcome()
        if episode.done:
            break
    return episode
