"""AT-SPI's state sets and the tree's text (runtimes.atspi, sans-I/O). The walk itself,
over a real accessibility bus with a GTK program, is tests/envserver/test_mcp_desktop_tree.py."""

from __future__ import annotations

from runtimes.atspi import Element, render, states_of


def test_state_words_become_names() -> None:
    # GTK 3's push button: enabled, focusable, sensitive, showing, visible.
    assert states_of([1124075776, 0]) == ["enabled", "focusable", "sensitive", "showing", "visible"]
    assert states_of([1 << 4 | 1 << 7, 1 << (41 - 32)]) == ["checked", "editable", "checkable"]
    assert states_of([0, 1 << 31]) == ["state_63"]  # a state newer than the table


def test_the_tree_as_text_indents_and_leaves_common_states_out() -> None:
    elements = [
        Element("e1", "frame", "Probe", None, ["active", "showing", "visible"], (0, 0, 300, 160), 0),
        Element("e2", "text", "", "some text", ["editable", "enabled"], (0, 72, 300, 34), 1),
    ]
    assert render(elements) == "[e1] frame 'Probe' (active)\n  [e2] text value='some text' (editable)"
