"""Sans-I/O RFB handshakes (RFC 6143 §7.1-7.3): ProtocolVersion to ServerInit.

Holds :class:`ClientHandshake` and :class:`ServerHandshake` (state machines with the
websockets/h11 surface: ``receive_data(bytes)``, ``data_to_send() -> bytes``,
``events_received()``), the events :class:`StartTLS` and :class:`HandshakeComplete`,
:class:`SecurityType`, :class:`VeNCryptSubtype` and :func:`vnc_auth_response` (the DES
challenge answer).

Versions: the server offers 3.8 and accepts 3.3, 3.7 or 3.8 back; the client accepts any
server version 3.x (and later majors), answering min(server, 3.8) with 3.4-3.6 read as
3.3. Security: None (1), VNC Authentication (2) and, with ``tls=True``, VeNCrypt (19)
version 0.2 with the X509None (260) and X509Vnc (261) subtypes: certificate TLS, then
None or VNC Authentication inside it. A TLS server offers VeNCrypt only, so nothing of
the session (password challenge included) crosses the network in clear.

**TLS.** The handshake does no TLS itself (it is bytes in, bytes out): at the agreed
point it emits :class:`StartTLS` and pauses. The caller writes out ``data_to_send()``,
switches the connection to TLS (``loop.start_tls``), calls :meth:`~_Handshake.tls_started`,
and from then on feeds the decrypted bytes.

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

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
from .streams import BytesFeeder, Parser, pause, read_exact, read_string, read_struct

__all__ = [
    "ClientHandshake",
    "HandshakeComplete",
    "PasswordGate",
    "SecurityType",
    "ServerHandshake",
    "StartTLS",
    "VeNCryptSubtype",
    "vnc_auth_response",
]


class SecurityType(enum.IntEnum):
    """Security types we speak (RFC 6143 §7.2)."""

    INVALID = 0
    NONE = 1
    VNC_AUTH = 2
    VENCRYPT = 19


class VeNCryptSubtype(enum.IntEnum):
    """VeNCrypt 0.2 subtypes we speak: certificate TLS, then None or VNC Authentication.
    (The anonymous TLS* subtypes need anonymous Diffie-Hellman, which Python's ssl module
    and modern OpenSSL builds leave out; the *Plain ones send a user name we have none of.)"""

    X509_NONE = 260
    X509_VNC = 261


#: The VeNCrypt version we speak (0.1 is obsolete: its subtypes were one byte).
VENCRYPT_VERSION = (0, 2)
#: Bytes the server answers a chosen VeNCrypt version with: 0 accepts, 255 refuses.
_VENCRYPT_OK, _VENCRYPT_BAD = 0, 255


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

_SUBTYPE_NAMES = {260: "X509None", 261: "X509Vnc", 256: "Plain", 257: "TLSNone",
                  258: "TLSVnc", 259: "TLSPlain", 262: "X509Plain"}

_VERSION = re.compile(rb"RFB (\d{3})\.(\d{3})\n")
_U8 = struct.Struct("!B")
_U8U8 = struct.Struct("!BB")
_U32 = struct.Struct("!I")
_SERVER_INIT = struct.Struct("!HH16sI")

#: Failure reason the server gives for a wrong password.
AUTH_FAILED_REASON = "authentication failed"


@dataclass(frozen=True, slots=True)
class StartTLS:
    """Switch the connection to TLS now: write ``data_to_send()`` out first, then start TLS
    (the server side with its certificate), then call ``tls_started()``."""

    server_side: bool


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
    #: The VeNCrypt subtype when the session runs over TLS, else None.
    tls_subtype: int | None = None
    #: Server side: the player whose password the client gave (``player_passwords``),
    #: None for the full or view-only password.
    player: int | None = None


class PasswordGate(Protocol):
    """Who decides, when a client's answer to the password challenge has arrived, whether
    it may be compared (a server's failed-password throttle), and hears the outcome.

    :meth:`admit` is asked right before the comparison: a reason to refuse the client
    (its address is blocked; the answer is then never compared, right or wrong), or
    None. After an admitted comparison :meth:`compared` says whether a password matched.
    Deciding here, not when the connection opened, is what bounds the guesses: handshakes
    opened before a block began are answered after it."""

    def admit(self) -> str | None: ...
    def compared(self, right: bool) -> None: ...


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
        self._events: list[HandshakeComplete | StartTLS] = []
        self._feeder = BytesFeeder(self._run())
        self.result: HandshakeComplete | None = None

    def _run(self) -> Parser[HandshakeComplete]:
        raise NotImplementedError

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes from the peer; then call ``data_to_send`` and ``events_received``."""
        self._feeder.feed(data)  # once complete, kept as trailing data
        self._check_done()

    def _check_done(self) -> None:
        if self._feeder.done and self.result is None:
            self.result = self._feeder.result
            self._events.append(self._feeder.result)

    def data_to_send(self) -> bytes:
        """Bytes to write to the peer now (possibly empty)."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def events_received(self) -> list[HandshakeComplete | StartTLS]:
        """Events since the last call: a StartTLS (VeNCrypt), a HandshakeComplete."""
        events, self._events = self._events, []
        return events

    @property
    def tls_pending(self) -> bool:
        """A :class:`StartTLS` was emitted and :meth:`tls_started` not called yet."""
        return self._feeder.paused

    def tls_started(self) -> None:
        """The connection runs over TLS now: go on (bytes fed meanwhile included)."""
        self._feeder.resume()
        self._check_done()

    def _start_tls(self, server_side: bool) -> Parser[None]:
        self._events.append(StartTLS(server_side))
        yield from pause()

    @property
    def complete(self) -> bool:
        return self.result is not None

    def trailing_data(self) -> bytes:
        """Bytes received after the handshake: they belong to the next protocol stage."""
        return self._feeder.trailing if self.complete else b""


class ClientHandshake(_Handshake):
    """The client's side: answers the server's version, authenticates, reads ServerInit.

    ``password`` is used when the server asks for VNC Authentication; ``shared=False``
    asks the server to disconnect other viewers. With ``tls=True`` the client insists on
    VeNCrypt (and emits :class:`StartTLS`); without it, a server that offers nothing but
    VeNCrypt is refused with a message that says how to connect.
    """

    def __init__(
        self, password: str | bytes | None = None, shared: bool = True, tls: bool = False
    ) -> None:
        self.password = password
        self.shared = shared
        self.tls = tls
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
        if self.tls and version == (3, 3):
            raise ProtocolError(
                f"server speaks RFB {major}.{minor}, which has no VeNCrypt: it cannot serve TLS"
            )
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

        inner, subtype = chosen, None
        if chosen == SecurityType.VENCRYPT:
            inner, subtype = yield from self._vencrypt()
        if inner == SecurityType.VNC_AUTH:
            challenge = yield from read_exact(16)
            assert self.password is not None
            self._out += vnc_auth_response(self.password, challenge)
        if version == (3, 8) or chosen != SecurityType.NONE:
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
            tls_subtype=subtype,
        )

    def _vencrypt(self) -> Parser[tuple[int, int]]:
        """VeNCrypt 0.2 up to the switch to TLS; the inner security type and the subtype."""
        major, minor = yield from read_struct(_U8U8)
        if (major, minor) < VENCRYPT_VERSION:
            self._out += _U8U8.pack(0, 0)
            raise ProtocolError(f"server speaks VeNCrypt {major}.{minor}; we need 0.2")
        self._out += _U8U8.pack(*VENCRYPT_VERSION)
        (status,) = yield from read_struct(_U8)
        if status != _VENCRYPT_OK:
            raise ServerRefused("the server refused VeNCrypt version 0.2")
        (count,) = yield from read_struct(_U8)
        if count == 0:
            raise ServerRefused("the server offers no VeNCrypt subtype")
        offered = struct.unpack(f"!{count}I", (yield from read_exact(4 * count)))
        ours = (VeNCryptSubtype.X509_VNC, VeNCryptSubtype.X509_NONE)
        if self.password is None:
            ours = ours[::-1]
        subtype = next((t for t in ours if t in offered), None)
        if subtype is None:
            self._out += _U32.pack(0)
            names = ", ".join(_subtype_name(t) for t in offered)
            raise ProtocolError(
                f"server offers VeNCrypt subtypes [{names}]; we speak X509None (260) and "
                "X509Vnc (261)"
            )
        if subtype == VeNCryptSubtype.X509_VNC:
            self._require_password()
        self._out += _U32.pack(subtype)
        (ack,) = yield from read_struct(_U8)
        if ack != 1:
            raise ServerRefused(f"the server refused VeNCrypt subtype {_subtype_name(subtype)}")
        yield from self._start_tls(server_side=False)
        inner = SecurityType.VNC_AUTH if subtype == VeNCryptSubtype.X509_VNC else SecurityType.NONE
        return inner, subtype

    def _require_password(self) -> None:
        if self.password is None:
            raise AuthenticationFailed("the server asks for a VNC password and none was given")

    def _choose(self, offered: list[int]) -> int:
        if self.tls:
            if SecurityType.VENCRYPT in offered:
                return SecurityType.VENCRYPT
            names = ", ".join(_security_name(t) for t in offered)
            raise ProtocolError(
                f"server offers security types [{names}] but not VeNCrypt (19): it does not "
                "serve TLS. Is it a remote served without --tls-cert? Then its address is "
                "vnc://, not vnc+tls://"
            )
        if SecurityType.VNC_AUTH in offered and self.password is not None:
            return SecurityType.VNC_AUTH
        if SecurityType.NONE in offered:
            return SecurityType.NONE
        if SecurityType.VNC_AUTH in offered:
            self._require_password()
        names = ", ".join(_security_name(t) for t in offered)
        if offered == [SecurityType.VENCRYPT]:
            raise ProtocolError(
                "the server serves TLS only (VeNCrypt): connect with a vnc+tls:// address "
                "and the CA that signed its certificate (tls_ca=, or VNCClient(tls=context))"
            )
        raise ProtocolError(
            f"server offers security types [{names}]; we speak None (1), VNC Authentication "
            "(2) and, with tls, VeNCrypt (19)"
        )


class ServerHandshake(_Handshake):
    """The server's side: offers 3.8, checks the password, sends ServerInit.

    With ``password`` or ``view_only_password`` set the server requires VNC
    Authentication; ``result.view_only`` says the view-only one matched. With ``tls`` the
    server offers VeNCrypt only (X509Vnc with a password, X509None without) and emits
    :class:`StartTLS` at the switch; RFB 3.3 clients, which cannot choose, are refused.
    With ``refuse_reason`` set the server refuses every client with that reason (for
    example "too many clients"), and ``receive_data`` raises ServerRefused once it is
    queued. ``challenge`` fixes the 16-byte challenge (tests); it is random otherwise.
    ``gate`` (a :class:`PasswordGate`) decides when the answer arrives whether it is
    compared; a refusal fails the SecurityResult with its reason (RFB 3.8) and raises
    ServerRefused.
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
        tls: bool = False,
        player_passwords: Mapping[int, str | bytes] | None = None,
        gate: PasswordGate | None = None,
    ) -> None:
        _check_screen(width, height, "ServerHandshake", local=True)
        self.gate = gate
        self.width, self.height, self.name, self.pixel_format = width, height, name, pixel_format
        self.password, self.view_only_password = password, view_only_password
        #: Multi-player remotes: player -> the password that drives that player.
        self.player_passwords = dict(player_passwords or {})
        self.refuse_reason = refuse_reason
        self.tls = tls
        self._challenge = challenge if challenge is not None else os.urandom(16)
        super().__init__()
        self._out += _version_bytes((3, 8))

    @property
    def inner_type(self) -> SecurityType:
        """What authenticates the client: VNC Authentication with a password, else None
        (inside TLS when ``tls``)."""
        needs_auth = (
            self.password is not None or self.view_only_password is not None
            or bool(self.player_passwords)
        )
        return SecurityType.VNC_AUTH if needs_auth else SecurityType.NONE

    @property
    def security_type(self) -> SecurityType:
        """The one security type offered."""
        return SecurityType.VENCRYPT if self.tls else self.inner_type

    def _run(self) -> Parser[HandshakeComplete]:
        version = _parse_version((yield from read_exact(12)), "the client")
        if version not in ((3, 3), (3, 7), (3, 8)):
            raise ProtocolError(
                f"client answered RFB {version[0]}.{version[1]}; we speak 3.3, 3.7 and 3.8"
            )
        offered = self.security_type
        refuse = self.refuse_reason
        if refuse is None and self.tls and version == (3, 3):
            refuse = (
                "this server requires TLS (VeNCrypt), which RFB 3.3 cannot choose: use a "
                "viewer with VeNCrypt (TigerVNC: vncviewer -SecurityTypes X509Vnc,X509None "
                "-X509CA ca.pem)"
            )
        if refuse is not None:
            self._out += _U32.pack(0) if version == (3, 3) else _U8.pack(0)
            self._out += _string(refuse)
            raise ServerRefused(refuse)
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

        subtype = None
        if chosen == SecurityType.VENCRYPT:
            subtype = yield from self._vencrypt()
        view_only = False
        player = None
        if self.inner_type == SecurityType.VNC_AUTH:
            self._out += self._challenge
            response = yield from read_exact(16)
            gate = self.gate
            if gate is not None and (refused := gate.admit()) is not None:
                self._fail(version, refused)
                raise ServerRefused(refused)
            try:
                player = self._player_of(response)
                if player is None:
                    view_only = self._check_response(response, version)
            except AuthenticationFailed:
                if gate is not None:
                    gate.compared(False)
                raise
            if gate is not None:
                gate.compared(True)
        if version == (3, 8) or chosen != SecurityType.NONE:
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
            player=player,
            tls_subtype=subtype,
        )

    def _vencrypt(self) -> Parser[int]:
        """VeNCrypt 0.2 up to the switch to TLS; the subtype agreed on."""
        subtype = (
            VeNCryptSubtype.X509_VNC
            if self.inner_type == SecurityType.VNC_AUTH
            else VeNCryptSubtype.X509_NONE
        )
        self._out += _U8U8.pack(*VENCRYPT_VERSION)
        major, minor = yield from read_struct(_U8U8)
        if (major, minor) != VENCRYPT_VERSION:
            self._out += _U8.pack(_VENCRYPT_BAD)
            raise ProtocolError(f"client chose VeNCrypt {major}.{minor}; we speak 0.2")
        self._out += _U8.pack(_VENCRYPT_OK) + _U8.pack(1) + _U32.pack(subtype)
        (chosen,) = yield from read_struct(_U32)
        if chosen != subtype:
            self._out += _U8.pack(0)
            raise ProtocolError(
                f"client chose VeNCrypt subtype {_subtype_name(chosen)}; we offer "
                f"{_subtype_name(subtype)}"
            )
        self._out += _U8.pack(1)
        yield from self._start_tls(server_side=True)
        return subtype

    def _player_of(self, response: bytes) -> int | None:
        """The player whose password answers the challenge, or None."""
        for player, password in sorted(self.player_passwords.items()):
            if vnc_auth_response(password, self._challenge) == response:
                return player
        return None

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


def _subtype_name(number: int) -> str:
    return f"{_SUBTYPE_NAMES.get(number, 'unknown')} ({number})"


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
