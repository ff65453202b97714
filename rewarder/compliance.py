"""A compliance suite for any server of Universe's v0 rewarder protocol, shipped in the wheel.

A third party's remote (or a re-implementation of ours) proves it speaks the wire our
agents, Universe's client and every v0 tool expect by subclassing
:class:`RewarderServerCompliance` in a pytest ``Test...`` class and giving it the address
of a running server, as dm_env_rpc ships its compliance tests::

    from rewarder.compliance import RewarderServerCompliance

    class TestMyServer(RewarderServerCompliance):
        @pytest.fixture
        def server(self):
            with start_my_server() as port:  # whatever runs it, on 127.0.0.1
                yield ServerUnderTest("127.0.0.1", port, password="s3cret")

The checks speak through ``websockets``' own synchronous client, not through this
project's, so a server is judged by the wire alone (docs/rewarder.md, the protocol's
seed document): every message is a ``{"method", "headers", "body"}`` object whose headers
carry ``message_id`` and ``sent_at``; a connection opens with ``v0.env.describe``;
``v0.control.ping`` and ``v0.env.reset`` are answered with their replies naming the
request's ``parent_message_id``; ``v0.agent.action`` is taken without an error; an
unknown method or a malformed message gets ``v0.reply.error`` (naming the request where it
had an id) or a close with a reason, and the server keeps serving other connections.

Needs pytest (the ``test`` extra); nothing of the remote's.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from rewarder.dial import basic_auth

#: Seconds a server may take to answer one request (a reset included) on a loaded machine.
REPLY_TIMEOUT: Final = 30.0
#: Seconds a connection may take to open and send its first describe.
OPEN_TIMEOUT: Final = 30.0
#: WebSocket close codes a server may use to refuse what it cannot parse (RFC 6455 7.4.1).
REFUSAL_CODES: Final = frozenset({1002, 1003, 1007, 1008, 1009})


@dataclass(frozen=True)
class ServerUnderTest:
    """Where the server listens, and the password its rewarder port takes (None: none)."""

    host: str
    port: int
    password: str | None = None
    path: str = "/"
    extra_headers: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}{self.path}"


class Wire:
    """One v0 connection through websockets' sync client: numbered requests, read replies."""

    def __init__(self, server: ServerUnderTest, reply_timeout: float = REPLY_TIMEOUT) -> None:
        self.reply_timeout = reply_timeout
        headers = dict(server.extra_headers)
        if server.password is not None:
            headers["Authorization"] = basic_auth(server.password)
        self._stack = contextlib.ExitStack()
        self.ws: ClientConnection = self._stack.enter_context(connect(
            server.url, additional_headers=headers, open_timeout=OPEN_TIMEOUT, max_size=None
        ))
        self.ids = itertools.count(1)
        self.seen: list[dict[str, Any]] = []

    def send(self, method: str, body: dict[str, Any] | None = None) -> int:
        message_id = next(self.ids)
        message = {"method": method, "headers": {"message_id": message_id, "sent_at": time.time()},
                   "body": body or {}}
        self.ws.send(orjson.dumps(message).decode())
        return message_id

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        raw = self.ws.recv(timeout=self.reply_timeout if timeout is None else timeout)
        message = orjson.loads(raw)
        assert isinstance(message, dict), f"a message that is not a JSON object: {raw!r:.200}"
        self.seen.append(message)
        return message

    def until(self, *methods: str, timeout: float | None = None) -> dict[str, Any]:
        """The next message whose method is one of ``methods`` (others are read past:
        rewards, describes and text may come between a request and its reply)."""
        timeout = self.reply_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {' or '.join(methods)} within {timeout} s")
            try:
                message = self.receive(left)
            except TimeoutError:
                raise AssertionError(f"no {' or '.join(methods)} within {timeout} s") from None
            if message.get("method") in methods:
                return message

    def reply_to(self, request_id: int, *methods: str) -> dict[str, Any]:
        """The reply naming ``request_id`` as its parent (one of ``methods``)."""
        while True:
            message = self.until(*methods)
            if str(message.get("headers", {}).get("parent_message_id")) == str(request_id):
                return message

    def close(self) -> None:
        self._stack.close()


def _parent(message: dict[str, Any]) -> str:
    return str(message.get("headers", {}).get("parent_message_id"))


class RewarderServerCompliance:
    """The v0 checks; a subclass gives the ``server`` fixture (a :class:`ServerUnderTest`)."""

    #: Seconds each reply may take (raise it for a server whose resets are slow).
    reply_timeout: float = REPLY_TIMEOUT

    @pytest.fixture
    def server(self) -> ServerUnderTest:  # pragma: no cover - the subclass gives it
        raise NotImplementedError("give a `server` fixture returning a ServerUnderTest")

    @pytest.fixture
    def wire(self, server: ServerUnderTest) -> Iterator[Wire]:
        wire = Wire(server, self.reply_timeout)
        try:
            yield wire
        finally:
            wire.close()

    # The envelope ----------------------------------------------------------------------

    def test_a_connection_opens_with_a_describe(self, wire: Wire) -> None:
        first = wire.receive(OPEN_TIMEOUT)
        assert first.get("method") == "v0.env.describe", first
        body = first.get("body")
        assert isinstance(body, dict) and isinstance(body.get("env_id"), str), first
        assert isinstance(body.get("env_state"), str), first

    def test_every_message_has_the_envelope_and_its_headers(self, wire: Wire) -> None:
        wire.reply_to(wire.send("v0.control.ping"), "v0.reply.control.ping")
        assert wire.seen
        ids = []
        for message in wire.seen:
            assert set(message) >= {"method", "headers", "body"}, message
            headers = message["headers"]
            assert isinstance(headers.get("message_id"), int | str), message
            assert isinstance(headers.get("sent_at"), int | float), message
            assert abs(headers["sent_at"] - time.time()) < 3600, f"sent_at is not UNIX time: {message}"
            ids.append(str(headers["message_id"]))
        assert len(set(ids)) == len(ids), f"message ids repeat on one connection: {ids}"

    # Requests and their replies ----------------------------------------------------------

    def test_a_ping_is_answered_naming_it(self, wire: Wire) -> None:
        first = wire.send("v0.control.ping")
        second = wire.send("v0.control.ping")
        assert _parent(wire.reply_to(first, "v0.reply.control.ping")) == str(first)
        assert _parent(wire.reply_to(second, "v0.reply.control.ping")) == str(second)

    def test_a_reset_is_answered_with_its_episode(self, wire: Wire) -> None:
        describe = wire.until("v0.env.describe", timeout=OPEN_TIMEOUT)
        request = wire.send("v0.env.reset", {"env_id": describe["body"]["env_id"]})
        reply = wire.reply_to(request, "v0.reply.env.reset", "v0.reply.error")
        assert reply["method"] == "v0.reply.env.reset", f"the server refused its own env id: {reply}"
        assert "episode_id" in reply["headers"], reply

    def test_an_action_is_taken_without_an_error(self, wire: Wire) -> None:
        action = wire.send("v0.agent.action", {"action": []})
        ping = wire.send("v0.control.ping")
        while True:  # requests are answered in order: the ping's reply closes the window
            message = wire.until("v0.reply.error", "v0.reply.control.ping")
            if message["method"] == "v0.reply.error":
                assert _parent(message) != str(action), f"an empty action was refused: {message}"
            elif _parent(message) == str(ping):
                return

    # Bad input ---------------------------------------------------------------------------

    def test_an_unknown_method_gets_an_error_naming_the_request(self, wire: Wire) -> None:
        request = wire.send("v0.no.such.method")
        reply = wire.reply_to(request, "v0.reply.error")
        assert isinstance(reply["body"].get("message"), str) and reply["body"]["message"], reply

    def test_a_malformed_message_is_refused_and_others_are_still_served(
        self, wire: Wire, server: ServerUnderTest
    ) -> None:
        wire.ws.send("{not json")
        try:
            refusal = wire.until("v0.reply.error")
            assert refusal["body"].get("message"), refusal
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            assert code in REFUSAL_CODES and closed.rcvd and closed.rcvd.reason, (
                f"closed without a refusal code and reason: {closed}"
            )
        wire.close()  # a server may hold one agent at a time: let go of the seat first
        other = Wire(server, self.reply_timeout)
        try:
            request = other.send("v0.control.ping")
            assert _parent(other.reply_to(request, "v0.reply.control.ping")) == str(request)
        finally:
            other.close()
