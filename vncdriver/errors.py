"""Errors of the VNC channel.

    VNCError
    ├── UnknownKey          a key name no keysym table knows (local misuse)
    ├── LocalProtocolError  we were asked to send something RFB does not allow (local misuse)
    ├── ProtocolError       the peer broke RFB: bad bytes, wrong lengths, unknown types
    │   └── LimitExceeded   the peer went past one of our named limits
    ├── AuthenticationFailed  the server refused us, or the client failed the challenge
    ├── ServerRefused       the server would not talk to us at all (e.g. too many clients)
    ├── TLSFailed           VeNCrypt: the TLS handshake failed (an untrusted certificate)
    ├── ConnectTimeout      no VNC server answered at an address before the start timeout
    └── ConnectionLost      an established connection ended (or the client was closed)

"Local" errors mean our caller did something wrong; ``ProtocolError`` means the peer did.
A sans-I/O object that raises a remote error may have queued a failure message for the
peer first: write out ``data_to_send()`` before closing the connection.
"""

from __future__ import annotations


class VNCError(Exception):
    """Base class of everything the VNC channel raises."""


class UnknownKey(VNCError, ValueError):
    """A key name that is neither an X keysym name, an alias nor a printable character."""

    def __init__(self, key: str) -> None:
        """The message lists the names that work.

        Args:
            key: the name given.
        """
        self.key = key
        super().__init__(
            f"unknown key {key!r}: use an X keysym name (Left, Return, space, a, F1, "
            "Control_L, ...) or an alias (left, ArrowLeft, enter, ctrl, shift, esc, ...)"
        )


class LocalProtocolError(VNCError):
    """Our caller asked for something RFB does not allow (wrong state, bad argument)."""


class ProtocolError(VNCError):
    """The peer sent something RFB does not allow; the connection cannot go on."""


class LimitExceeded(ProtocolError):
    """The peer went past a named limit; the message says which and by how much."""

    def __init__(self, what: str, value: int, limit: int) -> None:
        self.what, self.value, self.limit = what, value, limit
        super().__init__(f"{what} is {value}, over the limit of {limit}")


class AuthenticationFailed(VNCError):
    """The server refused the security handshake; ``reason`` is its words when it gave any."""

    def __init__(self, reason: str) -> None:
        """The message adds the usual cause when the server says only "failed".

        Args:
            reason: the server's words.
        """
        self.reason = reason
        # RFB servers (ours, TigerVNC) say only "authentication failed" to a wrong password.
        hint = " (a wrong password? VNC checks its first 8 characters)" if reason.lower().startswith(
            "authentication fail") else ""
        super().__init__(f"VNC authentication failed: {reason}{hint}")


class ServerRefused(VNCError):
    """The server refused the connection before authentication, giving ``reason``."""

    def __init__(self, reason: str) -> None:
        """The server's refusal, as the client raises it.

        Args:
            reason: the server's words.
        """
        self.reason = reason
        super().__init__(f"VNC server refused the connection: {reason}")


class TLSFailed(VNCError):
    """VeNCrypt: the TLS handshake with ``address`` failed (the certificate did not verify,
    or no common protocol); retrying will not help. The ``ssl.SSLError`` is the cause."""

    def __init__(self, address: str, reason: str) -> None:
        self.address, self.reason = address, reason
        super().__init__(f"the TLS handshake with VNC server {address} failed: {reason}")


class ConnectTimeout(VNCError, TimeoutError):
    """Nothing at ``address`` completed an RFB handshake within ``timeout`` seconds.

    ``last_error`` is what the last attempt ran into (connection refused, a reset, ...).
    """

    def __init__(self, address: str, timeout: float, last_error: BaseException | None) -> None:
        """The message says what to check.

        Args:
            address: where the client dialled.
            timeout: seconds it tried.
            last_error: what the last attempt ran into, if anything.
        """
        self.address, self.timeout, self.last_error = address, timeout, last_error
        last = f" (last attempt: {_describe(last_error)})" if last_error is not None else ""
        super().__init__(
            f"no VNC server answered at {address} within {timeout:g} s{last}; check that "
            "the server (remote, Xvnc) is running and listening there, and that the port "
            "or display number is right (host:N means port 5900+N for N < 100, host::port "
            "is a port)"
        )


class ConnectionLost(VNCError):
    """The connection to ``address`` ended: the peer closed it, it broke, or we closed it.

    Clients do not reconnect by themselves: make a new one.
    """

    def __init__(self, address: str, reason: str) -> None:
        """The end of a connection, and why.

        Args:
            address: the server's address.
            reason: why it ended.
        """
        self.address, self.reason = address, reason
        super().__init__(f"VNC connection to {address} lost: {reason}")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
