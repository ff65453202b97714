"""What runtimes living on an Xvnc display share (the browser, any X program).

Holds :class:`DisplayRuntime`: the display is the remote's VNC server (``external_vnc``),
agents act on it directly over VNC, and input that arrives over the rewarder is sent into
X through the runtime's own VNC connection to its display — acting through VNC, as a
person would. Subclasses start their program in :meth:`DisplayRuntime._on_display` and
stop it in :meth:`DisplayRuntime._stop_programs`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import ClassVar

from vncdriver.client import VNCClient

from .base import InputEvent, KeyEvent, Runtime
from .xdisplay import XProgram, XvncDisplay

log = logging.getLogger(__name__)


class DisplayRuntime(Runtime):
    """A runtime whose screen is an Xvnc display bound to the remote's VNC port."""

    external_vnc: ClassVar[bool] = True
    lockstep: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self.display: XvncDisplay | None = None
        #: The VNC port Xvnc bound (the remote reads it after :meth:`astart`).
        self.vnc_port: int | None = None
        self._injector: VNCClient | None = None
        self._warned_input = False

    # Lifecycle -----------------------------------------------------------------------------

    async def astart(
        self, host: str, vnc_port: int, password: str | None, view_only_password: str | None
    ) -> None:
        """Start Xvnc on ``host:vnc_port`` (0: a free port), then what the subclass runs."""
        self.display = XvncDisplay(
            self.width,
            self.height,
            host=host,
            port=vnc_port,
            password=password,
            view_only_password=view_only_password,
        )
        try:
            await self.display.start()
            self.vnc_port = self.display.port
            await self._on_display()
            self._injector = VNCClient(
                self.display.address, password=password, encoding="raw", name=f"{self.env_id} input"
            )
            await self._injector.start()
        except BaseException:
            await self.aclose()
            raise

    async def _on_display(self) -> None:
        """Start what runs on the display (the display is up); nothing by default."""

    async def _stop_programs(self) -> None:
        """Stop what :meth:`_on_display` and the resets started; nothing by default."""

    async def _stop_program(self, program: XProgram) -> None:
        """Stop one program of the display (and forget it)."""
        if self.display is not None and program in self.display.programs:
            self.display.programs.remove(program)
        await asyncio.to_thread(program.stop)

    async def aclose(self) -> None:
        """Stop the programs, the input connection and Xvnc. Idempotent."""
        await self._stop_programs()
        if self._injector is not None:
            await self._injector.close()
            self._injector = None
        if self.display is not None:
            await self.display.aclose()
            self.display = None

    def close(self) -> None:
        """Synchronous last resort (no event loop): kill Xvnc and what runs on it."""
        if self.display is not None:
            self.display.stop()
            self.display = None

    def pids(self) -> list[int]:
        """Process ids of Xvnc and of everything running on it."""
        return self.display.pids() if self.display is not None else []

    # Episodes ------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> None:
        raise RuntimeError(f"{self.env_id} resets asynchronously; the remote awaits areset()")

    def _inject(self, events: Sequence[InputEvent]) -> None:
        """Rewarder input into X, through our VNC connection to the display."""
        injector = self._injector
        if injector is None or not injector.connected:
            if not self._warned_input:
                log.warning("%s: no VNC connection to Xvnc; rewarder input dropped", self.env_id)
                self._warned_input = True
            return
        injector.send_events(
            ("KeyEvent", e.key, e.down) if isinstance(e, KeyEvent) else ("PointerEvent", *e)
            for e in events
        )
