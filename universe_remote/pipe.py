"""``python -m universe_remote.pipe SOCKET``: stdin and stdout carried to a Unix socket.

What ``universe-remote eval`` gives an MCP host command as its MCP server (``{mcp}``):
the host's JSON lines go to the harness, which relays and records them
(:mod:`universe_remote.evaluate`). It imports nothing else, so it starts at once.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from typing import Final

#: Bytes moved per read.
CHUNK: Final = 1 << 16


def _to_socket(sock: socket.socket) -> None:
    while data := os.read(0, CHUNK):
        sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m universe_remote.pipe SOCKET (universe-remote eval starts it)",
              file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(argv[0])
    except OSError as exc:
        print(f"universe_remote.pipe: cannot reach the eval harness at {argv[0]}: {exc}", file=sys.stderr)
        return 1
    threading.Thread(target=_to_socket, args=(sock,), daemon=True).start()
    while data := sock.recv(CHUNK):
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (BrokenPipeError, ConnectionError):
        sys.exit(0)
