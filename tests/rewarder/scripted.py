"""A rewarder server played by a script, for the blocking client's tests: a real socket
on 127.0.0.1, websockets' own handshake and a describe, then whatever the script writes
(or does not read)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

from websockets.server import ServerProtocol

from rewarder.connections import ServerConnection

BODY = {"env_id": "test.Scripted-v0", "env_state": "running", "fps": 60}


class ScriptedServer:
    """Accepts one client, opens the WebSocket, sends a describe, then runs
    ``script(server)`` in its thread. ``rcvbuf``: the accepted socket's receive buffer
    (small: a server that does not read fills up at once)."""

    def __init__(self, script: Callable[[ScriptedServer], None], rcvbuf: int | None = None) -> None:
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        if rcvbuf is not None:  # (inherited by the accepted socket, before its handshake)
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.port = self.listener.getsockname()[1]
        self.address = f"ws://127.0.0.1:{self.port}"
        self.ws = ServerProtocol(max_size=None)
        self.conn = ServerConnection()
        self.sock: socket.socket | None = None
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """End the script and close both sockets (a client blocked on us fails then)."""
        self.stop.set()
        for sock in (self.sock, self.listener):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
        self.thread.join(10)

    def frames(self) -> list[Any]:
        """The client's next frames (blocking until some come)."""
        assert self.sock is not None
        self.ws.receive_data(self.sock.recv(65536))
        return self.ws.events_received()

    def send(self, data: bytes) -> None:
        assert self.sock is not None
        self.sock.sendall(data)

    def _run(self) -> None:
        try:
            sock, _ = self.listener.accept()
            self.sock = sock
            while not (events := self.ws.events_received()):
                self.ws.receive_data(sock.recv(65536))
            self.ws.send_response(self.ws.accept(events[0]))
            self.ws.send_text(self.conn.describe(0, BODY))
            sock.sendall(b"".join(self.ws.data_to_send()))
            self.script(self)
        except OSError:
            pass  # closed under the script
        except BaseException as exc:  # noqa: BLE001 (the test reads it)
            self.error = exc
