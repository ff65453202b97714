"""A GTK 3 program for tests/envserver/test_mcp_desktop_tree.py (run by Debian's python3
with python3-gi and gir1.2-gtk-3.0): a window at the top left with a button, a check
button and an entry. It reports to the JSON file named by argv[1] (written whole, then
renamed) when the button is clicked: how many times, and what the entry holds."""

from __future__ import annotations

import json
import os
import sys

import gi

gi.require_version("Gtk", "3.0")
from gi.repository import Gtk  # noqa: E402


def main() -> None:
    out = sys.argv[1]
    window = Gtk.Window(title="Probe")
    window.move(0, 0)
    box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=8)
    button = Gtk.Button(label="Press me")
    check = Gtk.CheckButton(label="Agree")
    entry = Gtk.Entry()
    entry.set_text("some text")
    clicks = []

    def pressed(widget: Gtk.Button) -> None:
        clicks.append(1)
        with open(out + ".tmp", "w") as file:
            json.dump({"clicks": len(clicks), "entry": entry.get_text(), "agree": check.get_active()}, file)
        os.replace(out + ".tmp", out)

    button.connect("clicked", pressed)
    for widget in (button, check, entry):
        box.pack_start(widget, False, False, 0)
    window.add(box)
    window.set_default_size(300, 160)
    window.connect("destroy", Gtk.main_quit)
    window.show_all()
    Gtk.main()


if __name__ == "__main__":
    main()
