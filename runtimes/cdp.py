"""A tiny Chrome DevTools Protocol client over ``websockets``: run JavaScript in a page.

Holds :class:`CDPClient` (connect to a page, :meth:`~CDPClient.call` any method,
:meth:`~CDPClient.evaluate` an expression, :meth:`~CDPClient.navigate`,
:meth:`~CDPClient.reload`, :meth:`~CDPClient.wait_for` a condition, hear events with
:meth:`~CDPClient.on` and :meth:`~CDPClient.next_event`, run a script in every new
document with :meth:`~CDPClient.add_script`, take a PNG of part of the page with
:meth:`~CDPClient.screenshot_png`), :func:`targets` (the browser's ``/json/list``), the
errors :class:`CDPError` and :class:`JavaScriptError`, and the timeouts.

Chromium serves the protocol when started with ``--remote-debugging-port``: an HTTP
endpoint lists the targets (tabs), and each page has a WebSocket that takes JSON
commands ``{"id", "method", "params"}`` and answers ``{"id", "result"}`` or
``{"id", "error"}``, with events ``{"method", "params"}`` in between. That is all we
need to read a page's globals without Selenium or a driver binary.

Use::

    cdp = await CDPClient.connect(port)          # the first page target
    await cdp.navigate("file:///.../task.html")  # returns after the load event
    value = await cdp.evaluate("1 + 1")          # 2
    await cdp.close()
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import itertools
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, Final

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from .errors import RuntimeFailure

log = logging.getLogger(__name__)

#: Seconds to wait for the browser's debugging port and its first page (Chromium starts
#: in 0.5-1 s here; a cold start on a slow disk takes a few).
CONNECT_TIMEOUT: Final = 20.0
#: Seconds one command may take (an evaluate of a page global takes a small part of a frame).
CALL_TIMEOUT: Final = 10.0
#: Seconds a navigation may take until the page's load event.
NAVIGATE_TIMEOUT: Final = 20.0
#: Interval of the polls in :meth:`CDPClient.wait_for` and while connecting.
POLL_INTERVAL: Final = 0.02
#: Largest message we accept; evaluate results we ask for are small, screenshots are not.
MAX_MESSAGE: Final = 64 * 1024 * 1024
#: Seconds the closing handshake may take before the socket is just dropped.
CLOSE_TIMEOUT: Final = 2.0
#: Largest ``/json/list`` reply; a browser with a few tabs sends a few kB.
MAX_TARGETS_REPLY: Final = 1024 * 1024


class CDPError(RuntimeFailure):
    """A DevTools command failed, or the browser could not be reached."""


class JavaScriptError(CDPError):
    """An evaluated expression threw; the message carries the page's exception text."""


async def targets(
    port: int, host: str = "127.0.0.1", timeout: float = CALL_TIMEOUT
) -> list[dict[str, Any]]:
    """The browser's targets (``GET /json/list``): dicts with ``type``, ``url``,
    ``webSocketDebuggerUrl``. A tiny HTTP/1.1 GET over asyncio streams (Chromium does not
    answer HTTP/1.0)."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            request = f"GET /json/list HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
            writer.write(request.encode())
            await writer.drain()
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                raise CDPError(f"GET http://{host}:{port}/json/list: the connection closed "
                               f"after {len(exc.partial)} bytes of headers") from None
            status, *lines = head.decode("latin-1").split("\r\n")
            if " 200 " not in f"{status} ":
                raise CDPError(f"GET http://{host}:{port}/json/list answered {status!r}, not 200")
            length = next(
                (int(v) for k, _, v in (line.partition(":") for line in lines)
                 if k.strip().lower() == "content-length"),
                None,
            )
            if length is None or length > MAX_TARGETS_REPLY:
                raise CDPError(
                    f"GET http://{host}:{port}/json/list: Content-Length {length} is missing "
                    f"or over {MAX_TARGETS_REPLY} bytes"
                )
            body = await reader.readexactly(length)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    try:
        listed = json.loads(body)
    except ValueError as exc:
        raise CDPError(f"GET http://{host}:{port}/json/list sent no JSON list: {exc}") from None
    if not isinstance(listed, list):
        raise CDPError(
            f"GET http://{host}:{port}/json/list sent {type(listed).__name__}, not a list"
        )
    return listed


class CDPClient:
    """One WebSocket to one page target; commands may run concurrently.

    Build it with :meth:`connect`; :meth:`close` is idempotent. When the browser goes
    away, pending and later commands raise :class:`CDPError`.
    """

    def __init__(self, ws: ClientConnection, url: str) -> None:
        self.ws, self.url = ws, url
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, asyncio.Future[Any]]] = {}
        self._event_waiters: dict[str, list[asyncio.Future[dict[str, Any]]]] = defaultdict(list)
        self._listeners: dict[str, list[Callable[[dict[str, Any]], None]]] = defaultdict(list)
        self._closed_reason: str | None = None
        self._page_enabled = False
        self._reader = asyncio.get_running_loop().create_task(self._read(), name=f"CDP {url}")

    @classmethod
    async def connect(
        cls, port: int, host: str = "127.0.0.1", timeout: float = CONNECT_TIMEOUT
    ) -> CDPClient:
        """Connect to the first page target of the browser debugging on ``host:port``,
        retrying until ``timeout`` while the browser starts."""
        deadline = time.monotonic() + timeout
        while True:
            problem = "it lists no page target yet"
            try:
                pages = [t for t in await targets(port, host) if t.get("type") == "page"]
                if pages and pages[0].get("webSocketDebuggerUrl"):
                    url = pages[0]["webSocketDebuggerUrl"]
                    ws = await connect(
                        url,
                        max_size=MAX_MESSAGE,
                        compression=None,
                        ping_interval=None,
                        open_timeout=max(0.1, deadline - time.monotonic()),
                        close_timeout=CLOSE_TIMEOUT,
                    )
                    return cls(ws, url)
            except (OSError, EOFError, ValueError, CDPError, TimeoutError, InvalidHandshake) as exc:
                problem = str(exc) or type(exc).__name__
            if time.monotonic() > deadline:
                raise CDPError(
                    f"no DevTools page on {host}:{port} within {timeout} s ({problem}); is "
                    "the browser running with --remote-debugging-port?"
                )
            await asyncio.sleep(POLL_INTERVAL)  # (a start-up waits on it: poll often)

    @property
    def connected(self) -> bool:
        return self._closed_reason is None

    # Commands ----------------------------------------------------------------------------

    async def call(
        self, method: str, params: dict[str, Any] | None = None, timeout: float = CALL_TIMEOUT
    ) -> dict[str, Any]:
        """Send one command and return its ``result``; raise :class:`CDPError` on an error
        reply, a closed connection or no reply within ``timeout``."""
        if self._closed_reason is not None:
            raise CDPError(f"{method}: {self._closed_reason}")
        command_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[command_id] = (method, future)
        try:
            message = {"id": command_id, "method": method, "params": params or {}}
            try:
                await self.ws.send(json.dumps(message))
            except ConnectionClosed as exc:
                raise CDPError(
                    f"{method}: the browser closed the DevTools connection ({exc})"
                ) from None
            try:
                async with asyncio.timeout(timeout):
                    return await future  # type: ignore[no-any-return]
            except TimeoutError:
                raise CDPError(f"{method}: no reply from the browser within {timeout} s") from None
        finally:
            self._pending.pop(command_id, None)

    async def call_many(
        self, commands: Sequence[tuple[str, dict[str, Any]]], timeout: float = CALL_TIMEOUT
    ) -> list[dict[str, Any]]:
        """Send ``commands`` (method, params) in order without waiting for each reply, then
        wait for all their results (a round trip for the lot instead of one each); raise
        :class:`CDPError` as :meth:`call` does, for the first that failed."""
        if self._closed_reason is not None:
            raise CDPError(f"{commands[0][0] if commands else 'call_many'}: {self._closed_reason}")
        loop = asyncio.get_running_loop()
        sent: list[tuple[int, asyncio.Future[Any]]] = []
        try:
            for method, params in commands:
                command_id = next(self._ids)
                future: asyncio.Future[Any] = loop.create_future()
                self._pending[command_id] = (method, future)
                sent.append((command_id, future))
                try:
                    await self.ws.send(json.dumps({"id": command_id, "method": method, "params": params}))
                except ConnectionClosed as exc:
                    raise CDPError(
                        f"{method}: the browser closed the DevTools connection ({exc})"
                    ) from None
            try:
                async with asyncio.timeout(timeout):
                    return [await future for _, future in sent]
            except TimeoutError:
                raise CDPError(
                    f"{len(sent)} commands: no reply from the browser within {timeout} s"
                ) from None
        finally:
            for command_id, future in sent:
                self._pending.pop(command_id, None)
                if future.done() and not future.cancelled():
                    future.exception()  # (seen: the first error was raised)

    async def evaluate(self, expression: str, timeout: float = CALL_TIMEOUT) -> Any:
        """The value of JavaScript ``expression`` in the page (JSON-able values; promises
        are awaited). Raises :class:`JavaScriptError` if it throws."""
        result = await self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout,
        )
        details = result.get("exceptionDetails")
        if details is not None:
            exception = details.get("exception", {})
            text = exception.get("description") or details.get("text", "exception")
            raise JavaScriptError(f"{expression[:200]!r} threw: {text}")
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout: float = NAVIGATE_TIMEOUT) -> Any:
        """Poll ``expression`` until it is truthy; its value. A throwing expression counts
        as not yet true (the page may still be loading the script that defines it)."""
        deadline = time.monotonic() + timeout
        last = "it was false"
        while True:
            try:
                value = await self.evaluate(expression)
            except JavaScriptError as exc:
                last = str(exc)
            else:
                if value:
                    return value
            if time.monotonic() > deadline:
                raise CDPError(
                    f"{expression[:200]!r} did not become true within {timeout} s ({last})"
                )
            await asyncio.sleep(POLL_INTERVAL)

    async def navigate(self, url: str, timeout: float = NAVIGATE_TIMEOUT) -> None:
        """Load ``url`` in the page and return after its load event."""
        await self._enable_page()
        loaded = self.next_event("Page.loadEventFired")
        try:
            result = await self.call("Page.navigate", {"url": url}, timeout)
            if result.get("errorText"):
                raise CDPError(f"cannot load {url}: {result['errorText']}")
            await self._loaded(loaded, url, timeout)
        finally:
            _forget(loaded)

    async def reload(self, timeout: float = NAVIGATE_TIMEOUT) -> None:
        """Load the page again (scripts added by :meth:`add_script` run in the new
        document) and return after its load event."""
        await self._enable_page()
        loaded = self.next_event("Page.loadEventFired")
        try:
            await self.call("Page.reload", {"ignoreCache": False}, timeout)
            await self._loaded(loaded, "the page", timeout)
        finally:
            _forget(loaded)

    async def _enable_page(self) -> None:
        if not self._page_enabled:
            await self.call("Page.enable")
            self._page_enabled = True

    @staticmethod
    async def _loaded(loaded: asyncio.Future[dict[str, Any]], what: str, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                await loaded
        except TimeoutError:
            raise CDPError(f"{what} did not finish loading within {timeout} s") from None

    async def add_script(self, source: str) -> str:
        """Run JavaScript ``source`` in every document the page loads from now on, before
        the document's own scripts; the identifier :meth:`remove_script` takes."""
        await self._enable_page()
        result = await self.call("Page.addScriptToEvaluateOnNewDocument", {"source": source})
        return str(result["identifier"])

    async def remove_script(self, identifier: str) -> None:
        """Stop running a script of :meth:`add_script` in new documents."""
        await self.call("Page.removeScriptToEvaluateOnNewDocument", {"identifier": identifier})

    async def screenshot_png(
        self, clip: tuple[float, float, float, float], timeout: float = CALL_TIMEOUT
    ) -> bytes:
        """A PNG of the page's area ``clip`` = (x, y, width, height) in CSS pixels at
        scale 1 (lossless, unlike JPEG). Chromium draws a new frame for it: the pixels show
        the page as it is when the call is made (it waits for frames: a few frame
        periods; ``python -m benchmarks browser_remotes``)."""
        x, y, width, height = clip
        result = await self.call(
            "Page.captureScreenshot",
            {
                "format": "png",
                "clip": {"x": x, "y": y, "width": width, "height": height, "scale": 1},
                "captureBeyondViewport": False,
            },
            timeout,
        )
        try:
            return base64.b64decode(result["data"], validate=True)
        except (KeyError, binascii.Error) as exc:
            raise CDPError(f"Page.captureScreenshot sent no base64 PNG: {exc}") from None

    # Events ------------------------------------------------------------------------------

    def next_event(self, method: str) -> asyncio.Future[dict[str, Any]]:
        """A future for the params of the next ``method`` event. Call it before the command
        that causes the event, then await it (with a timeout); cancel it if unused. It
        raises :class:`CDPError` when the connection closes first."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        if self._closed_reason is not None:
            future.set_exception(CDPError(self._closed_reason))
        else:
            self._event_waiters[method].append(future)
        return future

    def on(self, method: str, callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call ``callback(params)`` for every ``method`` event (the domain must be enabled,
        e.g. ``Page.enable``), in the reader task: it must not block. Returns a function
        that unsubscribes. A callback that raises is logged and kept."""
        self._listeners[method].append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners[method].remove(callback)

        return unsubscribe

    # Lifecycle ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the WebSocket; pending commands raise :class:`CDPError`. Idempotent."""
        self._fail("the DevTools connection was closed")
        await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def _read(self) -> None:
        reason = "the browser closed the DevTools connection (did it exit?)"
        try:
            async for raw in self.ws:
                try:
                    message = json.loads(raw)
                except ValueError:
                    log.warning("CDP %s: dropped a message that is not JSON", self.url)
                    continue
                self._dispatch(message)
        except ConnectionClosed as exc:
            reason = f"{reason}: {exc}"
        finally:
            self._fail(reason)

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "id" in message:
            method, future = self._pending.get(message["id"], ("", None))
            if future is None or future.done():
                return
            error = message.get("error")
            if error is not None:
                future.set_exception(
                    CDPError(f"{method}: {error.get('message', error)} (code {error.get('code')})")
                )
            else:
                future.set_result(message.get("result", {}))
            return
        method, params = message.get("method", ""), message.get("params", {})
        for waiter in self._event_waiters.pop(method, []):
            if not waiter.done():
                waiter.set_result(params)
        for callback in list(self._listeners.get(method, ())):
            try:
                callback(params)
            except Exception:
                log.exception("CDP %s: a listener of %s raised", self.url, method)

    def _fail(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        for method, future in list(self._pending.values()):
            if not future.done():
                future.set_exception(CDPError(f"{method}: {reason}"))
        for waiters in self._event_waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(CDPError(reason))
        self._event_waiters.clear()


def _forget(future: asyncio.Future[Any]) -> None:
    """Cancel a future we no longer wait for (its exception, if any, counts as seen)."""
    if future.done() and not future.cancelled():
        future.exception()
    future.cancel()
