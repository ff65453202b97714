"""Plumbing for generator parsers: they read like RFC 6143, the driver moves the bytes.

A parser is a generator that asks for input by yielding, the way websockets parses
frames:

- ``data = yield from read_exact(n)`` yields the int ``n`` and gets ``n`` bytes back;
- ``yield from read_into(view)`` yields a writable memoryview and is resumed once the
  driver has filled it (the client reads pixel data straight into numpy arrays this way);
- ``yield from pause()`` stops until the driver's ``resume()``: the transport changes
  under the parser (VeNCrypt's switch to TLS), and bytes that came before it would be
  plaintext where ciphertext belongs.

Holds :func:`read_exact`, :func:`read_into`, :func:`pause`, :data:`Parser` and :class:`BytesFeeder`,
the driver for parsers fed from ``bytes`` (handshakes, the server's message parser,
tests). The client's zero-copy driver lives in :mod:`vncdriver.client_protocol`.
"""

from __future__ import annotations

import struct
from collections.abc import Generator
from typing import Any, TypeVar

from .errors import LimitExceeded, LocalProtocolError, ProtocolError

T = TypeVar("T")

#: A parser: yields what it needs (``int`` -> wants bytes, memoryview -> fill this view).
Parser = Generator[Any, Any, T]


def read_exact(n: int) -> Generator[int, bytes, bytes]:
    """Read exactly ``n`` bytes."""
    if n == 0:
        return b""
    return (yield n)


def read_into(view: memoryview) -> Generator[memoryview, None, None]:
    """Fill ``view`` (writable, 1-D bytes) from the stream."""
    if len(view):
        yield view


class _Pause:
    """What :func:`pause` yields."""


PAUSE = _Pause()


def pause() -> Generator[_Pause, None, None]:
    """Stop until the driver's ``resume()`` (the connection switches to TLS)."""
    yield PAUSE


def read_struct(fmt: struct.Struct) -> Generator[int, bytes, tuple[Any, ...]]:
    """Read and unpack one ``struct``."""
    data = yield from read_exact(fmt.size)
    return fmt.unpack(data)


def read_string(what: str, limit: int) -> Generator[int, bytes, bytes]:
    """Read a u32 length and that many bytes (reason strings, desktop names)."""
    (length,) = yield from read_struct(_U32)
    if length > limit:
        raise LimitExceeded(f"{what} length", length, limit)
    return (yield from read_exact(length))


_U32 = struct.Struct("!I")


class BytesFeeder:
    """Drive a parser generator with bytes as they arrive.

    ``feed(data)`` runs the parser as far as the buffered bytes allow; when the parser
    returns, ``done`` is true, ``result`` holds its value and bytes past its end wait in
    ``trailing``. A parser error propagates out of ``feed`` and the feeder is dead. While
    the parser is paused (``paused``), ``feed`` only buffers; ``resume()`` goes on.
    """

    def __init__(self, parser: Parser[Any]) -> None:
        self._parser = parser
        self._buffer = bytearray()
        self._pos = 0
        self.done = False
        self.failed: BaseException | None = None
        self.result: Any = None
        self._need: Any = None
        self._advance(None)

    @property
    def buffered(self) -> int:
        """Bytes fed but not yet handed to the parser."""
        return len(self._buffer) - self._pos

    @property
    def paused(self) -> bool:
        """The parser waits for :meth:`resume` (see :func:`pause`)."""
        return self._need is PAUSE

    def resume(self) -> None:
        """Go on after a :func:`pause`, with whatever was fed meanwhile."""
        if not self.paused:
            raise LocalProtocolError("resume() without a pause")
        self._guarded(lambda: self._advance(None))

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self.failed is not None:
            raise LocalProtocolError(
                f"the parser already failed ({self.failed}); close the connection"
            )
        self._buffer += data
        if not self.done and not self.paused:
            self._guarded(lambda: None)

    def _guarded(self, step: Any) -> None:
        try:
            step()
            self._run()
        except BaseException as exc:
            self.failed = exc
            raise

    def _run(self) -> None:
        buf = self._buffer
        while not self.done:
            need = self._need
            if need is PAUSE:
                if self.buffered:
                    raise ProtocolError(
                        f"the peer sent {self.buffered} bytes in clear where the switch to "
                        "TLS was agreed"
                    )
                break
            if isinstance(need, int):
                if len(buf) - self._pos < need:
                    break
                chunk = bytes(buf[self._pos : self._pos + need])
                self._pos += need
                self._advance(chunk)
            else:  # a memoryview to fill
                n = len(need)
                if len(buf) - self._pos < n:
                    break
                need[:] = buf[self._pos : self._pos + n]
                self._pos += n
                self._advance(None)
        if self._pos > 65536 or self._pos == len(buf):
            del buf[: self._pos]
            self._pos = 0

    @property
    def trailing(self) -> bytes:
        """Bytes received after the parser finished (only meaningful once ``done``)."""
        return bytes(self._buffer[self._pos :])

    def _advance(self, value: Any) -> None:
        try:
            self._need = self._parser.send(value)
        except StopIteration as stop:
            self.done = True
            self.result = stop.value
        if not self.done and not isinstance(self._need, (int, memoryview, _Pause)):
            raise LocalProtocolError(f"parser yielded {self._need!r}, not a size or a view")
