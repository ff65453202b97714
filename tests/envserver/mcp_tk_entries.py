"""An X program for tests/envserver/test_mcp_x11.py: two Tk entries, and on Return what they
hold and which has the focus, written as JSON to the file named by argv[1]."""

from __future__ import annotations

import json
import os
import sys
import tkinter as tk


def main() -> None:
    out = sys.argv[1]
    root = tk.Tk()
    root.geometry("+0+0")
    first, second = tk.Entry(root, width=30, name="a"), tk.Entry(root, width=30, name="b")
    first.pack()
    second.pack()

    def write(event: object = None) -> None:
        with open(out + ".tmp", "w") as file:
            json.dump({"a": first.get(), "b": second.get(), "focus": str(root.focus_get())}, file)
        os.replace(out + ".tmp", out)

    root.bind_all("<Return>", write)
    first.focus_force()
    root.mainloop()


if __name__ == "__main__":
    main()
