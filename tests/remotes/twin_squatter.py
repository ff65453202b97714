"""A process that squats a rewarder port's Unix twin (tests/remotes/test_twin_squat.py):
it binds ``\\0universe-remote-rewarder-PORT`` and relays each connection to the remote's
TCP port, as an attacker would (agents then step as usual, through it). Prints ``ready``,
then per connection ``accepted N``, ``data N HEX`` for each chunk the agent sent, ``eof N``.

``python tests/remotes/twin_squatter.py PORT``; ends when stdin closes.
"""

from __future__ import annotations

import socket
import sys
import threading

NAME = "\0universe-remote-rewarder-{port}"
lock = threading.Lock()


def say(line: str) -> None:
    with lock:
        print(line, flush=True)


def pipe(source: socket.socket, sink: socket.socket | None, label: int | None) -> None:
    """Copy ``source`` to ``sink`` until EOF; record what the agent sent (``label``)."""
    try:
        while chunk := source.recv(65536):
            if label is not None:
                say(f"data {label} {chunk.hex()}")
            if sink is not None:
                sink.sendall(chunk)
    except OSError:
        pass
    if label is not None:
        say(f"eof {label}")
    for each in (source, sink):
        if each is not None:
            try:
                each.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(server: socket.socket, port: int) -> None:
    count = 0
    while True:
        agent, _ = server.accept()
        count += 1
        say(f"accepted {count}")
        try:
            remote: socket.socket | None = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            remote = None
        if remote is not None:
            remote.settimeout(None)
            threading.Thread(target=pipe, args=(remote, agent, None), daemon=True).start()
        threading.Thread(target=pipe, args=(agent, remote, count), daemon=True).start()


def main() -> None:
    port = int(sys.argv[1])
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(NAME.format(port=port))
    server.listen(16)
    threading.Thread(target=serve, args=(server, port), daemon=True).start()
    say("ready")
    sys.stdin.read()


if __name__ == "__main__":
    main()
