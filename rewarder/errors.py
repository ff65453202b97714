"""Errors of the rewarder channel.

    RewarderError
    ├── BadRequest          a client message the server refuses (answered with v0.reply.error)
    │   └── MessageTooBig   ... because it is over MAX_MESSAGE_BYTES
    ├── ProtocolError       the server sent something the protocol does not allow
    │   └── UnknownMethod   ... a method this client does not know (a newer server)
    ├── RemoteError         the server answered our request with v0.reply.error
    ├── ConnectionClosed    the server sent v0.connection.close or the socket dropped
    │   ├── Refused         ... it refused us and said why (final)
    │   │   └── Untrusted   ... our TLS client refused its certificate (final)
    │   └── SendTimeout     ... it took not all of a message in time (also a TimeoutError)
    └── ConnectTimeout      no server answered within the start timeout

``BadRequest`` is what the *peer* (the client) did wrong, seen from the server;
``ProtocolError`` is what the peer (the server) did wrong, seen from the client.
"""

from __future__ import annotations


class RewarderError(Exception):
    """Base class of everything the rewarder channel raises."""


class BadRequest(RewarderError):
    """A client message the server cannot act on.

    ``parent_message_id`` is the offending message's id when it could be read, so the
    ``v0.reply.error`` can point at it.
    """

    def __init__(self, message: str, parent_message_id: int | str | None = None) -> None:
        """A refusal to send back.

        Args:
            message: what was wrong, sent back in the ``v0.reply.error``.
            parent_message_id: the offending message's id, if it could be read.
        """
        self.message = message
        self.parent_message_id = parent_message_id
        super().__init__(message)


class MessageTooBig(BadRequest):
    """A message over its method's size limit; it was not parsed (its id may have been
    read from its start: ``parent_message_id``). ``hint`` says what to send instead."""

    def __init__(
        self, size: int, limit: int, hint: str = "send fewer events per v0.agent.action",
        parent_message_id: int | str | None = None, method: str | None = None,
    ) -> None:
        self.size, self.limit = size, limit
        what = f"{method} message" if method else "message"
        super().__init__(
            f"{what} of {size} bytes is over the limit of {limit} bytes; {hint}",
            parent_message_id,
        )


class ProtocolError(RewarderError):
    """The server sent a message this client cannot understand."""


class UnknownMethod(ProtocolError):
    """The server sent a method this client does not know (a newer server): ignore it."""

    def __init__(self, method: str) -> None:
        self.method = method
        super().__init__(f"unknown server method {method!r}")


class RemoteError(RewarderError):
    """The server answered a request with ``v0.reply.error``; ``message`` is its words."""

    def __init__(self, message: str, method: str = "") -> None:
        """The server's refusal, as the agent's side raises it.

        Args:
            message: the server's words.
            method: the request it refused (``v0.env.reset``...), to name in the message.
        """
        self.message, self.method = message, method
        super().__init__(f"{method} failed on the remote: {message}" if method else message)


class ConnectionClosed(RewarderError):
    """The connection ended: the server's ``v0.connection.close`` reason, or a drop.
    ``code``: the WebSocket close code, when a close frame said one (the server's, or
    the one this client closed with because the server broke the protocol)."""

    def __init__(self, reason: str, code: int | None = None) -> None:
        """The end of a connection, and why.

        Args:
            reason: why the connection ended.
            code: the WebSocket close code, if a close frame gave one.
        """
        self.reason, self.code = reason, None if code is None else int(code)
        super().__init__(reason)


class Refused(ConnectionClosed):
    """The server refused the connection and said why (password, busy, throttled, a bad
    URL): the message is the whole story, retrying the same way will not help."""


class Untrusted(Refused):
    """TLS: the remote's certificate did not verify (unknown CA, wrong name, expired), or
    the remote does not speak TLS at all; retrying will not change that."""


class SendTimeout(ConnectionClosed, TimeoutError):
    """The remote took not all of a message within the call's timeout (it is stopped, or
    it does not read): the connection was given up, since part of it may have gone."""


class ConnectTimeout(RewarderError, TimeoutError):
    """Nothing answered at the address before the start timeout ran out."""
