"""An X program for tests/envserver/test_mcp_keys.py: a Tk window that reports the keysym
of every KeyPress it gets (X's name, as xev prints it), one per line, to the TCP port on
127.0.0.1 named by argv[1]."""

from __future__ import annotations

import socket
import sys
import tkinter as tk


def main() -> None:
    out = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    root = tk.Tk()
    root.geometry("400x200+0+0")

    def report(event: tk.Event) -> None:  # type: ignore[type-arg]
        out.sendall(f"{event.keysym}\n".encode())

    root.bind("<KeyPress>", report)  # the window's own tag: "all" keeps Tab for focus
    root.focus_force()
    root.mainloop()


if __name__ == "__main__":
    main()
