"""Sans-I/O RFB handshakes (RFC 6143 §7.1-7.3): ProtocolVersion to ServerInit.

Holds :class:`ClientHandshake` and :class:`ServerHandshake` (state machines with the
websockets/h11 surface: ``receive_data(bytes)``, ``data_to_send() -> bytes``,
``events_received()``), the event :class:`HandshakeComplete`, :class:`SecurityType`
and :func:`vnc_auth_response` (the DES challenge answer).

Versions: the server offers 3.8 and accepts 3.3, 3.7 or 3.8 back; the client accepts any
server version 3.x (and later majors), answering min(server, 3.8) with 3.4-3.6 read as
3.3. Security: None (1) and VNC Authentication (2).

Use: create the object, send ``data_to_send()``, then loop: feed received bytes to
``receive_data``, send ``data_to_send()``, until ``complete``. Then build the post-handshake
protocol object from ``result`` and feed it ``trailing_data()`` first. On error, the
object raises (ProtocolError, AuthenticationFailed, ServerRefused); a server may have queued
a failure message first, so send ``data_to_send()`` before closing.
"""

from __future__ import annotations

import enum
import os
import re
import struct
from dataclasses import dataclass

from Cryptodome.Cipher import DES

from .errors import (
    AuthenticationFailed,
    LimitExceeded,
    LocalProtocolError,
    ProtocolError,
    ServerRefused,
)
from .limits import MAX_NAME_BYTES, MAX_REASON_BYTES, MAX_SCREEN_HEIGHT, MAX_SCREEN_WIDTH
from .pixelformat import NATIVE, PixelFormat
from .streams import BytesFeeder, Parser, read_exact, read_string, read_struct

__all__ = [
    "ClientHandshake",
    "HandshakeComplete",
    "SecurityType",
    "ServerHandshake",
    "vnc_auth_response",
]


class SecurityType(enum.IntEnum):
    """Security types we speak (RFC 6143 §7.2)."""

    INVALID = 0
    NONE = 1
    VNC_AUTH = 2


_SECURITY_NAMES = {
    0: "Invalid",
    1: "None",
    2: "VNC Authentication",
    5: "RA2",
    6: "RA2ne",
    16: "Tight",
    17: "Ultra",
    18: "TLS",
    19: "VeNCrypt",
    20: "SASL",
    21: "MD5",
    22: "xvp",
    30: "Apple DH",
}

_VERSION = re.compile(rb"RFB (\d{3})\.(\d{3})\n")
_U8 = struct.Struct("!B")
_U32 = struct.Struct("!I")
_SERVER_INIT = struct.Struct("!HH16sI")

#: Failure reason the server gives for a wrong password.
AUTH_FAILED_REASON = "authentication failed"


@dataclass(frozen=True, slots=True)
class HandshakeComplete:
    """The handshake is over: the screen, the server's pixel format, who we are."""

    width: int
    height: int
    pixel_format: PixelFormat
    name: str
    shared: bool
    version: tuple[int, int]
    security_type: int = SecurityType.NONE
    view_only: bool = False  # server side: the client gave the view-only password


def _version_bytes(version: tuple[int, int]) -> bytes:
    return b"RFB %03d.%03d\n" % version


def _parse_version(data: bytes, who: str) -> tuple[int, int]:
    match = _VERSION.fullmatch(data)
    if not match:
        raise ProtocolError(
            f"{who} sent {data!r} where a ProtocolVersion like b'RFB 003.008\\n' belongs; "
            "is this a VNC port?"
        )
    return int(match[1]), int(match[2])


_REVERSED_BITS = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))


def vnc_auth_response(password: str | bytes, challenge: bytes) -> bytes:
    """DES-encrypt the 16-byte challenge the way VNC Authentication wants.

    VNC's key is the password cut or zero-padded to 8 bytes with each byte's bits reversed
    (a quirk of the original implementation every server keeps).
    """
    if len(challenge) != 16:
        raise LocalProtocolError(f"a VNC challenge is 16 bytes, not {len(challenge)}")
    raw = password.encode("utf-8") if isinstance(password, str) else bytes(password)
    key = raw[:8].ljust(8, b"\0").translate(_REVERSED_BITS)
    return DES.new(key, DES.MODE_ECB).encrypt(challenge)


class _Handshake:
    """Shared sans-I/O surface of both sides."""

    def __init__(self) -> None:
        self._out = bytearray()
        self._events: list[HandshakeComplete] = []
        self._feeder = BytesFeeder(self._run())
        self.result: HandshakeComplete | None = None

    def _run(self) -> Parser[HandshakeComplete]:
        raise NotImplementedError

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes from the peer; then call ``data_to_send`` and ``events_received``."""
        if self.result is not None:
            self._feeder.feed(data)  # kept as trailing data
            return
        self._feeder.feed(data)
        if self._feeder.done:
            self.result = self._feeder.result
            self._events.append(self._feeder.result)

    def data_to_send(self) -> bytes:
        """Bytes to write to the peer now (possibly empty)."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def events_received(self) -> list[HandshakeComplete]:
        """Events since the last call: at most one HandshakeComplete."""
        events, self._events = self._events, []
        return events

    @property
    def complete(self) -> bool:
        return self.result is not None

    def trailing_data(self) -> bytes:
        """Bytes received after the handshake: they belong to the next protocol stage."""
        return self._feeder.trailing if self.complete else b""


class ClientHandshake(_Handshake):
    """The client's side: answers the server's version, authenticates, reads ServerInit.

    ``password`` is used when the server asks for VNC Authentication; ``shared=False``
    asks the server to disconnect other viewers.
    """

    def __init__(self, password: str | bytes | None = None, shared: bool = True) -> None:
        self.password = password
        self.shared = shared
        super().__init__()

    def _run(self) -> Parser[HandshakeComplete]:
        major, minor = _parse_version((yield from read_exact(12)), "the server")
        if major < 3:
            raise ProtocolError(f"server speaks RFB {major}.{minor}; we need 3.3 or later")
        if major > 3 or minor >= 8:
            version = (3, 8)
        elif minor == 7:
            version = (3, 7)
        else:
            version = (3, 3)
        self._out += _version_bytes(version)

        if version == (3, 3):
            (chosen,) = yield from read_struct(_U32)
            if chosen == SecurityType.INVALID:
                raise ServerRefused(_text((yield from read_string("reason", MAX_REASON_BYTES))))
            if chosen not in (SecurityType.NONE, SecurityType.VNC_AUTH):
                raise ProtocolError(
                    f"server chose security type {_security_name(chosen)}; "
                    "we speak None (1) and VNC Authentication (2)"
                )
            if chosen == SecurityType.VNC_AUTH:
                self._require_password()
        else:
            (count,) = yield from read_struct(_U8)
            if count == 0:
                raise ServerRefused(_text((yield from read_string("reason", MAX_REASON_BYTES))))
            offered = list((yield from read_exact(count)))
            chosen = self._choose(offered)
            self._out += _U8.pack(chosen)

        if chosen == SecurityType.VNC_AUTH:
            challenge = yield from read_exact(16)
            assert self.password is not None
            self._out += vnc_auth_response(self.password, challenge)
        if version == (3, 8) or chosen == SecurityType.VNC_AUTH:
            (status,) = yield from read_struct(_U32)
            if status != 0:
                reason = AUTH_FAILED_REASON
                if version == (3, 8):
                    reason = _text((yield from read_string("reason", MAX_REASON_BYTES)))
                raise AuthenticationFailed(reason)

        self._out += _U8.pack(self.shared)
        width, height, pf, name_length = yield from read_struct(_SERVER_INIT)
        if name_length > MAX_NAME_BYTES:
            raise LimitExceeded("ServerInit desktop name length", name_length, MAX_NAME_BYTES)
        name = _text((yield from read_exact(name_length)))
        _check_screen(width, height, "ServerInit")
        return HandshakeComplete(
            width,
            height,
            PixelFormat.parse(pf),
            name,
            self.shared,
            version,
            SecurityType(chosen),
        )

    def _require_password(self) -> None:
        if self.password is None:
            raise AuthenticationFailed("the server asks for a VNC password and none was given")

    def _choose(self, offered: list[int]) -> int:
        if SecurityType.VNC_AUTH in offered and self.password is not None:
            return SecurityType.VNC_AUTH
        if SecurityType.NONE in offered:
            return SecurityType.NONE
        if SecurityType.VNC_AUTH in offered:
            self._require_password()
        names = ", ".join(_security_name(t) for t in offered)
        raise ProtocolError(
            f"server offers security types [{names}]; we speak None (1) and VNC Authentication (2)"
        )


class ServerHandshake(_Handshake):
    """The server's side: offers 3.8, checks the password, sends ServerInit.

    With ``password`` or ``view_only_password`` set the server requires VNC
    Authentication; ``result.view_only`` says the view-only one matched. With
    ``refuse_reason`` set the server refuses every client with that reason (for example
    "too many clients"), and ``receive_data`` raises ServerRefused once it is queued.
    ``challenge`` fixes the 16-byte challenge (tests); it is random otherwise.
    """

    def __init__(
        self,
        width: int,
        height: int,
        name: str = "universe-remote",
        pixel_format: PixelFormat = NATIVE,
        *,
        password: str | bytes | None = None,
        view_only_password: str | bytes | None = None,
        refuse_reason: str | None = None,
        challenge: bytes | None = None,
    ) -> None:
        _check_screen(width, height, "ServerHandshake", local=True)
        self.width, self.height, self.name, self.pixel_format = width, height, name, pixel_format
        self.password, self.view_only_password = password, view_only_password
        self.refuse_reason = refuse_reason
        self._challenge = challenge if challenge is not None else os.urandom(16)
        super().__init__()
        self._out += _version_bytes((3, 8))

    @property
    def security_type(self) -> SecurityType:
        needs_auth = self.password is not None or self.view_only_password is not None
        return SecurityType.VNC_AUTH if needs_auth else SecurityType.NONE

    def _run(self) -> Parser[HandshakeComplete]:
        version = _parse_version((yield from read_exact(12)), "the client")
        if version not in ((3, 3), (3, 7), (3, 8)):
            raise ProtocolError(
                f"client answered RFB {version[0]}.{version[1]}; we speak 3.3, 3.7 and 3.8"
            )
        offered = self.security_type
        if self.refuse_reason is not None:
            self._out += _U32.pack(0) if version == (3, 3) else _U8.pack(0)
            self._out += _string(self.refuse_reason)
            raise ServerRefused(self.refuse_reason)
        if version == (3, 3):
            self._out += _U32.pack(offered)
            chosen = offered
        else:
            self._out += _U8.pack(1) + _U8.pack(offered)
            (chosen,) = yield from read_struct(_U8)
            if chosen != offered:
                reason = (
                    f"security type {_security_name(chosen)} was not offered; "
                    f"use {_security_name(offered)}"
                )
                self._fail(version, reason)
                raise ProtocolError(f"client chose {reason}")

        view_only = False
        if chosen == SecurityType.VNC_AUTH:
            self._out += self._challenge
            response = yield from read_exact(16)
            view_only = self._check_response(response, version)
        if version == (3, 8) or chosen == SecurityType.VNC_AUTH:
            self._out += _U32.pack(0)

        (shared,) = yield from read_struct(_U8)
        name = self.name.encode("utf-8")[:MAX_NAME_BYTES]
        self._out += (
            _SERVER_INIT.pack(self.width, self.height, self.pixel_format.serialize(), len(name))
            + name
        )
        return HandshakeComplete(
            self.width,
            self.height,
            self.pixel_format,
            self.name,
            bool(shared),
            version,
            SecurityType(chosen),
            view_only,
        )

    def _check_response(self, response: bytes, version: tuple[int, int]) -> bool:
        """True for the view-only password, False for the full one; raise for neither."""
        for password, view_only in ((self.password, False), (self.view_only_password, True)):
            if password is not None and vnc_auth_response(password, self._challenge) == response:
                return view_only
        self._fail(version, AUTH_FAILED_REASON)
        raise AuthenticationFailed(AUTH_FAILED_REASON)

    def _fail(self, version: tuple[int, int], reason: str) -> None:
        """Queue a failed SecurityResult (with the reason in 3.8)."""
        self._out += _U32.pack(1)
        if version == (3, 8):
            self._out += _string(reason)


def _string(text: str) -> bytes:
    data = text.encode("utf-8")[:MAX_REASON_BYTES]
    return _U32.pack(len(data)) + data


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _security_name(number: int) -> str:
    return f"{_SECURITY_NAMES.get(number, 'unknown')} ({number})"


def _check_screen(width: int, height: int, where: str, local: bool = False) -> None:
    error = LocalProtocolError if local else None
    for what, value, limit in (
        ("width", width, MAX_SCREEN_WIDTH),
        ("height", height, MAX_SCREEN_HEIGHT),
    ):
        if value > limit:
            if error:
                raise error(f"{where}: screen {what} {value} is over the limit of {limit}")
            raise LimitExceeded(f"{where} screen {what}", value, limit)
