"""An X program for tests/envserver/test_mcp_desktop.py: a Tk window filling the screen
with an entry at its top left. It reports to the JSON file named by argv[1] (written
whole, then renamed): a click's root position and the screen's size; on Return, what
the entry holds; once mapped, ready; on ctrl+r, it reads ``in.txt`` from its working directory and writes
``out.txt`` there (the text upper-cased)."""

from __future__ import annotations

import json
import os
import sys
import tkinter as tk
from pathlib import Path


def main() -> None:
    out = sys.argv[1]
    root = tk.Tk()
    width, height = root.winfo_screenwidth(), root.winfo_screenheight()
    root.geometry(f"{width}x{height}+0+0")
    entry = tk.Entry(root, width=30, name="entry", insertofftime=0)  # no blinking: a still screen
    entry.place(x=0, y=0)

    def report(**body: object) -> None:
        with open(out + ".tmp", "w") as file:
            json.dump({"screen": [width, height], **body}, file)
        os.replace(out + ".tmp", out)

    def files(event: object = None) -> None:
        text = Path("in.txt").read_text()
        Path("out.txt").write_text(text.upper())
        report(cwd=os.getcwd(), read=text)

    root.bind_all("<Button-1>", lambda e: report(click=[e.x_root, e.y_root]), add="+")
    root.bind_all("<Return>", lambda e: report(entry=entry.get()))
    root.bind_all("<Control-Key-r>", files)
    entry.focus_force()
    root.wait_visibility(root)
    report(ready=True)
    root.mainloop()


if __name__ == "__main__":
    main()
