"""The shipped v0 rewarder-server suite (rewarder/compliance.py) passes on our own remote, in
both modes and behind a password: what a third-party server is held to, we are held to."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import orjson
import pytest
from websockets.sync.server import ServerConnection, serve

from remotes import start_local
from rewarder.compliance import RewarderServerCompliance, ServerUnderTest, Wire

PASSWORD = "compliance-pw"


@pytest.fixture(scope="module", params=["realtime", "lockstep"])
def served(request: pytest.FixtureRequest) -> Iterator[ServerUnderTest]:
    remotes = start_local("builtin.Catch-v0", password=PASSWORD, extra_args=["--mode", request.param])
    try:
        port = remotes.addresses[0].rewarder_port
        assert port is not None
        yield ServerUnderTest("127.0.0.1", port, password=PASSWORD)
    finally:
        remotes.close()


class TestOurRemote(RewarderServerCompliance):
    @pytest.fixture
    def server(self, served: ServerUnderTest) -> ServerUnderTest:
        return served


class NoPongs:
    """A server that opens as a v0 server should and then answers pings naming the wrong
    request: the suite must catch it."""

    def __init__(self) -> None:
        self.server = serve(self.handle, "127.0.0.1", 0)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def handle(ws: ServerConnection) -> None:
        ids = itertools.count(1)

        def send(method: str, body: dict[str, object], **headers: object) -> None:
            ws.send(orjson.dumps({"method": method, "body": body, "headers": {
                "message_id": next(ids), "sent_at": time.time(), **headers}}).decode())

        send("v0.env.describe", {"env_id": "fake.NoPongs-v0", "env_state": "running"})
        for raw in ws:
            request = orjson.loads(raw)
            send("v0.reply.control.ping", {}, parent_message_id=request["headers"]["message_id"] + 100)

    @property
    def port(self) -> int:
        return int(self.server.socket.getsockname()[1])

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(5)


def test_the_suite_fails_a_server_that_answers_pings_naming_the_wrong_request() -> None:
    fake = NoPongs()
    wire = Wire(ServerUnderTest("127.0.0.1", fake.port), reply_timeout=1.0)
    try:
        wire.until("v0.env.describe")  # it opens like a v0 server
        with pytest.raises(AssertionError, match="no v0.reply.control.ping within 1.0 s"):
            RewarderServerCompliance().test_a_ping_is_answered_naming_it(wire)
    finally:
        wire.close()
        fake.close()
