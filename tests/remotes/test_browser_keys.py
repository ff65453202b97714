"""A browser remote keeps its one page whatever is pressed, and types any text (issue 42).

Through gymnasium on real remotes (``universe-remote serve`` with MiniWoB in Chromium on
Xvnc), in real time (settling steps) and in lockstep: each of the browser's shortcuts
(new tab or window, zoom, reload, back, address bar, DevTools, close) sent as VNC key
events and as action strings leaves the remote serving, and the next episode of the
same seed has the same first frame and is won by a click; the page text leaves out
MiniWoB's reward display, so ten same-seed episodes read the same whatever the earlier
ones earned; 'café', '日本語', an emoji, Hebrew and a tab are typed and read back; seven
2,000-character ``keyboard_type`` calls in lockstep are not taken for a stall. One env
per way of stepping for the module, switched from task to task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

import numpy as np
import pytest

import remotes  # noqa: F401 (registers the ids)
from tests.remotes.web_ways import Env, envs_by_way, start

pytestmark = pytest.mark.timeout(600)

#: Ways of stepping: real time, each step settling; lockstep, with a short stall timeout
#: (a step of 8,000 typed characters takes longer than it on any machine).
WAYS: Final[dict[str, dict[str, Any]]] = {
    "settle": {"mode": "realtime", "step_mode": "settle"},
    "lockstep": {"mode": "lockstep", "stall_timeout": 3.0},
}
#: The seed whose episode each key's aftermath is compared on.
SEED: Final = 3
#: Browser shortcuts as action strings' key combinations (all refused).
STRING_KEYS: Final = (
    "Control+t", "Control+n", "Control++", "Control+=", "Control+-", "Control+r", "F5",
    "Alt+ArrowLeft", "Control+l", "F12", "Control+Shift+I", "Control+Shift+J", "Control+w",
)
#: The same as VNC key events (X keysym names): the keys a MiniWoB remote takes over VNC.
VNC_KEYS: Final = (
    ("Control_L", "t"), ("Control_L", "n"), ("Control_L", "Shift_L", "plus"), ("Control_L", "equal"),
    ("Control_L", "minus"), ("Control_L", "r"), ("Control_L", "l"), ("Control_L", "Shift_L", "I"),
    ("Control_L", "Shift_L", "J"), ("Control_L", "w"),
)

@pytest.fixture(scope="module")
def web_env() -> Iterator[Callable[[str], Env]]:
    """``web_env(way)``: the module's env of that way (made at first use)."""
    with envs_by_way("miniwob.ClickTest-v0", WAYS) as get:
        yield get



def element(info: dict[str, Any], **criteria: Any) -> dict[str, Any]:
    found = [e for e in info["page"]["elements"] if all(e.get(k) == v for k, v in criteria.items())]
    assert found, (criteria, info["page"]["elements"])
    return found[0]


def vnc_keys(keys: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return [("KeyEvent", k, True) for k in keys] + [("KeyEvent", k, False) for k in reversed(keys)]


def same_frame_and_a_win(env: Env, first: np.ndarray, what: str) -> None:
    """The seed's episode again: its first frame as before the key, and a click wins it."""
    obs, info = env.reset(seed=SEED)
    assert np.array_equal(obs["screen"], first), f"{what}: the episode's first frame changed"
    assert "Last reward" not in obs["tree"]
    button = element(info, role="button")["bid"]
    _, reward, terminated, truncated, info = env.step(f"click('{button}')")
    assert (terminated, truncated, info["last_action_error"]) == (True, False, None), (what, info)
    assert reward > 0, what


@pytest.mark.parametrize("way", list(WAYS))
def test_the_browsers_shortcuts_leave_the_page_and_the_next_episode_alike(
    web_env: Callable[[str], Env], way: str
) -> None:
    env = web_env(way)
    first, info = start(env, "click-test", SEED)
    assert info["page"]["url"].endswith("/click-test.html")
    first_frame = first["screen"].copy()
    for keys in VNC_KEYS:
        env.reset(seed=SEED)
        _, _, _, truncated, info = env.step(vnc_keys(keys))
        assert not truncated and info["last_action_error"] is None, (keys, info)
        same_frame_and_a_win(env, first_frame, "+".join(keys))
    for comb in STRING_KEYS:  # refused: nothing of them is sent
        env.reset(seed=SEED)  # (MiniWoB's 10 s would run out over all of them in real time)
        _, _, terminated, truncated, info = env.step(f"keyboard_press('{comb}')")
        assert "is a command to the browser" in (info["last_action_error"] or ""), (comb, info)
        assert not (terminated or truncated), comb
    same_frame_and_a_win(env, first_frame, "the action strings")
    # The wheel with Control held (zoom), over the page.
    env.reset(seed=SEED)
    env.step([("KeyEvent", "Control_L", True), ("PointerEvent", 80, 120, 8), ("PointerEvent", 80, 120, 0),
              ("KeyEvent", "Control_L", False)])
    same_frame_and_a_win(env, first_frame, "Control+wheel")


@pytest.mark.parametrize("way", list(WAYS))
def test_the_page_text_leaves_out_the_reward_display(web_env: Callable[[str], Env], way: str) -> None:
    """Ten episodes of one seed, each won (MiniWoB's display then shows the last reward,
    discounted by the time taken, and counts the episodes): the same text each time, with
    no trace of the display (its values, or an element for it)."""
    env = web_env(way)
    runs = 10 if way == "lockstep" else 3
    trees = []
    for run in range(runs):
        obs, info = start(env, "click-button", 2)
        trees.append(obs["tree"])
        assert not any(e.get("id") == "reward-display" for e in info["page"]["elements"])
        name = obs["instruction"].split('"')[1]
        button = element(info, role="button", name=name)["bid"]
        _, reward, terminated, _, info = env.step(f"click('{button}')")
        assert terminated and reward > 0, (run, reward, info)
    assert "Last reward" not in trees[0] and "Episodes done" not in trees[0]
    assert all(tree == trees[0] for tree in trees), [t for t in trees if t != trees[0]][:1]


#: Texts typed and read back: any script, an emoji, right to left, a tab kept by fill, and
#: 300 distinct CJK characters (Xvnc's spare key codes would not hold them as keysyms).
TEXTS: Final = ("café", "日本語", "😀", "שלום", "a\tb", "".join(chr(0x4E00 + i) for i in range(300)))


@pytest.mark.parametrize("way", list(WAYS))
def test_any_script_and_a_tab_are_typed_and_read_back(web_env: Callable[[str], Env], way: str) -> None:
    env = web_env(way)
    obs, info = start(env, "enter-text", 2)
    field = element(info, tag="input", type="text")["bid"]
    for text in TEXTS:
        _, _, _, _, info = env.step(f"fill('{field}', {text!r})")
        assert info["last_action_error"] is None, (text[:20], info)
        assert element(info, bid=field)["value"] == text
    _, _, _, _, info = env.step(f"fill('{field}', '')\nkeyboard_type('Ünïcödé ✓ ')")
    assert info["last_action_error"] is None and element(info, bid=field)["value"] == "Ünïcödé ✓ "
    # 2,000 characters take the page a second or more: the action waits for them.
    _, _, _, truncated, info = env.step(f"fill('{field}', {'é' * 1000 + 'x' * 1000!r})")
    assert not truncated and info["last_action_error"] is None, info
    assert element(info, bid=field)["value"] == "é" * 1000 + "x" * 1000
    if way == "settle":  # no action: the step settles, and says nothing is wrong
        _, _, _, _, info = env.step("")
        assert info["last_action"] == "" and info["last_action_error"] is None, info
        assert info["settle"] is not None


def test_long_typing_in_lockstep_is_work_not_a_stall(web_env: Callable[[str], Env]) -> None:
    """Seven 2,000-character keyboard_type calls in two steps, each longer than the env's
    stall timeout: no truncation, and every character arrives."""
    env = web_env("lockstep")
    _, info = start(env, "enter-text", 4)
    field = element(info, tag="input", type="text")["bid"]
    chunks = [chr(ord("a") + i) * 2000 for i in range(7)]
    calls = [f"keyboard_type('{chunk}')" for chunk in chunks]
    _, _, _, truncated, info = env.step(f"click('{field}')\n" + "\n".join(calls[:4]))
    assert not truncated and info["last_action_error"] is None, info.get("remote.error", info)
    _, _, _, truncated, info = env.step("\n".join(calls[4:]))
    assert not truncated and info["last_action_error"] is None, info.get("remote.error", info)
    typed = element(info, bid=field)
    assert typed["value"] == "".join(chunks)[: len(typed["value"])] and typed.get("value_cut")
