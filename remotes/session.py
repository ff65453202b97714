"""One remote's two channels, paired: the async core of the gymnasium envs.

Holds :class:`RemoteSession` and :class:`RemoteUnavailable`. A session owns a
:class:`~vncdriver.client.VNCClient` and a :class:`~rewarder.client.RewarderClient`
(either may be absent for VNC-only or rewarder-only addresses), connects them together,
resets through the rewarder's episode handshake and reads frame + reward per step.
Everything here runs on the env's event loop; the envs wrap it synchronously.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from rewarder.client import RewarderClient
from rewarder.errors import ConnectionClosed, RewarderError
from rewarder.protocol import LOCKSTEP, MODES, StepReply
from rewarder.reward_buffer import EMPTY, EpisodeResult
from vncdriver.addresses import is_loopback
from vncdriver.client import VNCClient
from vncdriver.errors import VNCError
from vncdriver.messages import FrameTag

from .address import RemoteAddress, parse_remotes

log = logging.getLogger(__name__)

#: Seconds a reset may take, from the request to the first frame of the new episode.
RESET_TIMEOUT: Final = 60.0

_client_ids: dict[int, str] = {}


def process_client_id() -> str:
    """This process's rewarder client id: a new env of this process takes over a remote
    an earlier env of it still holds (``check_env`` builds such second envs), while an
    agent of another process is refused as busy. New after a fork."""
    pid = os.getpid()
    if pid not in _client_ids:
        _client_ids[pid] = f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:12]}"
    return _client_ids[pid]


def check_stepping(mode: str, frameskip: int) -> None:
    """Refuse a mode or frameskip the envs do not know, saying what they take."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if not (isinstance(frameskip, int) and frameskip >= 1):
        raise ValueError(f"frameskip must be a positive integer, not {frameskip!r}")


def resolve_addresses(
    spec: str | RemoteAddress | Sequence[str] | Sequence[RemoteAddress],
) -> tuple[list[RemoteAddress], str | None]:
    """Remotes and password from an address string, a list of them, or RemoteAddresses."""
    if isinstance(spec, RemoteAddress):
        return [spec], None
    if spec and not isinstance(spec, str) and all(isinstance(a, RemoteAddress) for a in spec):
        return list(spec), None  # type: ignore[arg-type]
    return parse_remotes(spec)  # type: ignore[arg-type]


class RemoteUnavailable(ConnectionError):
    """A remote could not be reached or dropped; the message says which and what to do."""

    def __init__(self, name: str, what: str, cause: BaseException | None = None) -> None:
        self.name, self.cause = name, cause
        detail = f": {cause}" if cause is not None else ""
        super().__init__(
            f"remote {name}: {what}{detail}. Is it running (universe-remote serve ...)? "
            "Check the address, the ports and the password."
        )


@dataclass(frozen=True, slots=True)
class VNCOptions:
    """How the VNC client asks for pixels.

    ``encoding=None`` picks per remote: Raw on loopback, where bandwidth is free and
    encoding is not (measured: a lockstep Pong step costs 0.97 ms with Raw, 1.20 with
    Tight, 1.44 with ZRLE), and Tight elsewhere (Universe's default). Lossless unless a
    JPEG ``quality`` is given.
    """

    encoding: str | Sequence[str] | None = None
    quality: int | None = None
    compress_level: int | None = None
    fine_quality: int | None = None
    subsample: int | None = None

    def kwargs(self, host: str) -> dict[str, Any]:
        encoding = self.encoding
        if encoding is None:
            encoding = "raw" if is_loopback(host) else "tight"
        return {
            "encoding": encoding,
            "quality": self.quality,
            "compress_level": self.compress_level,
            "fine_quality": self.fine_quality,
            "subsample": self.subsample,
        }


class RemoteSession:
    """The VNC and rewarder clients of one remote."""

    def __init__(
        self,
        address: RemoteAddress,
        password: str | None = None,
        *,
        vnc: VNCOptions = VNCOptions(),
        start_timeout: float = 30.0,
    ) -> None:
        self.address = address
        self.name = str(address)
        self.password = password
        self.vnc_options = vnc
        self.start_timeout = start_timeout
        self.vnc: VNCClient | None = None
        self.rewarder: RewarderClient | None = None
        self._blank: np.ndarray | None = None

    # Connection -------------------------------------------------------------------------

    async def connect(self) -> None:
        """Connect both channels (concurrently); raise :class:`RemoteUnavailable`."""
        await self.close()
        addr = self.address
        if addr.vnc is not None:
            self.vnc = VNCClient(
                addr.vnc,
                password=self.password,
                start_timeout=self.start_timeout,
                name=self.name,
                frame_tags=True,  # servers that are not ours ignore the request
                **self.vnc_options.kwargs(addr.host),
            )
        if addr.rewarder is not None:
            self.rewarder = RewarderClient(
                addr.rewarder,
                password=self.password,
                start_timeout=self.start_timeout,
                reconnect=False,
                name=self.name,
                client_id=process_client_id(),
            )
        starts = [c.start() for c in (self.vnc, self.rewarder) if c is not None]
        results = await asyncio.gather(*starts, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.close()
            raise RemoteUnavailable(self.name, "cannot connect", errors[0])

    async def close(self) -> None:
        clients = [c for c in (self.vnc, self.rewarder) if c is not None]
        self.vnc = self.rewarder = None
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)

    @property
    def connected(self) -> bool:
        return all(c is not None and c.connected for c in self._wanted())

    @property
    def error(self) -> str | None:
        """Why the session is not usable, or None."""
        for kind, client in zip(("VNC", "rewarder"), self._wanted(), strict=True):
            if client is None:
                return f"{kind} channel not connected"
            if not client.connected:
                return f"{kind} connection lost: {client.error}"
        return None

    def _wanted(self) -> tuple[Any, Any]:
        vnc = self.vnc if self.address.vnc is not None else _ALWAYS
        rewarder = self.rewarder if self.address.rewarder is not None else _ALWAYS
        return vnc, rewarder

    # Screen --------------------------------------------------------------------------------

    @property
    def screen_size(self) -> tuple[int, int]:
        """(width, height) of the remote's screen."""
        if self.vnc is not None:
            return self.vnc.width, self.vnc.height
        if self.rewarder is not None and self.rewarder.describe is not None:
            body = self.rewarder.describe.body
            return int(body.get("width", 0)), int(body.get("height", 0))
        raise RemoteUnavailable(self.name, "not connected")

    def frame(self) -> np.ndarray:
        """A copy of the latest frame (a blank one for rewarder-only remotes)."""
        if self.vnc is not None:
            return self.vnc.frame()
        width, height = self.screen_size
        if self._blank is None or self._blank.shape != (height, width, 3):
            self._blank = np.zeros((height, width, 3), np.uint8)
        return self._blank.copy()

    def describe_body(self) -> dict[str, Any]:
        if self.rewarder is not None and self.rewarder.describe is not None:
            return dict(self.rewarder.describe.body)
        return {}

    def mode_request(self, mode: str) -> str | None:
        """The mode to ask for at reset: only our remotes know modes; ask others nothing."""
        if mode == LOCKSTEP or "mode" in self.describe_body():
            return mode
        return None

    @property
    def frame_tags(self) -> bool:
        """True when VNC updates say which frame they show (the remote's VNC server is ours)."""
        return self.vnc is not None and bool(self.describe_body().get("frame_tags"))

    @property
    def tag(self) -> FrameTag | None:
        """Which frame the VNC framebuffer shows now (with :attr:`frame_tags`)."""
        return self.vnc.tag if self.vnc is not None else None

    # Episodes --------------------------------------------------------------------------------

    async def reset(
        self,
        env_id: str | None = None,
        seed: int | None = None,
        fps: float | None = None,
        mode: str | None = None,
        timeout: float = RESET_TIMEOUT,
    ) -> int | None:
        """Start a new episode and wait until the remote runs it and a frame of it arrived.

        Returns the new episode id (None without a rewarder). With frame tags, "a frame of
        it" is exact: an update tagged with the new episode. Without (Xvnc), it is the
        first update after the reset reply: the remote draws the new episode's first
        frame before it replies.
        """
        try:
            async with asyncio.timeout(timeout):
                episode = None
                if self.rewarder is not None:
                    episode = await self.rewarder.reset(
                        env_id=env_id, seed=seed, fps=fps, mode=mode
                    )
                    await self.rewarder.wait_for_state("running", episode_id=episode)
                if self.vnc is not None:
                    if self.frame_tags and episode is not None:
                        while (tag := self.vnc.tag) is None or tag.episode_id < episode:
                            await self.vnc.wait_update(self.vnc.updates)
                    else:
                        await self.vnc.wait_update(self.vnc.updates)
                return episode
        except (RewarderError, VNCError, OSError) as exc:
            raise RemoteUnavailable(self.name, "reset failed", exc) from exc
        except TimeoutError as exc:
            raise RemoteUnavailable(self.name, f"reset took over {timeout:g} s", exc) from exc

    async def step_lockstep(
        self, events: Sequence[Sequence[Any]], frames: int, timeout: float = RESET_TIMEOUT
    ) -> tuple[np.ndarray, StepReply]:
        """Lockstep: advance exactly ``frames`` frames holding ``events``; the resulting
        frame (waited for by its tag) and the server's reply."""
        if self.rewarder is None or not self.frame_tags:
            raise RemoteUnavailable(
                self.name, "lockstep needs a universe-remote remote with both channels"
            )
        try:
            async with asyncio.timeout(timeout):
                reply = await self.rewarder.step(events, frames)
                await self.vnc.wait_frame(reply.frame)  # type: ignore[union-attr]
        except (ConnectionClosed, VNCError, OSError) as exc:  # a RemoteError says what to fix
            raise RemoteUnavailable(self.name, "lockstep step failed", exc) from exc
        return self.frame(), reply

    async def show_frame_of(self, frame: int | None, timeout: float) -> None:
        """Pair a reward with its frame: wait (briefly) until VNC shows frame ``frame``."""
        if frame is None or not self.frame_tags or self.vnc is None:
            return
        tag = self.vnc.tag
        if tag is not None and tag.frame >= frame:
            return
        try:
            await self.vnc.wait_frame(frame, timeout)
        except VNCError:  # the connection is gone: the caller sees it as not connected
            return
        except TimeoutError:
            log.debug("%s: frame %s did not arrive within %.3f s", self.name, frame, timeout)

    def clock_skew(self) -> float | None:
        """The middle of the rewarder's clock-skew bounds (server minus local), or None."""
        bounds = self.rewarder.clock_skew if self.rewarder is not None else None
        return None if bounds is None else (bounds[0] + bounds[1]) / 2

    def send(self, events: Sequence[Sequence[Any]]) -> None:
        """Send input events: over VNC when there is VNC, else as ``v0.agent.action``."""
        if not events:
            return
        if self.vnc is not None:
            self.vnc.send_events(events)
        elif self.rewarder is not None:
            asyncio.get_running_loop().create_task(self.rewarder.send_action(events))

    def pop(self) -> EpisodeResult:
        """Reward, done, info and text gathered since the last pop, for the current episode."""
        return self.rewarder.pop() if self.rewarder is not None else EMPTY

    def info(self) -> dict[str, Any]:
        """Diagnostics for ``info``: round trip, clock skew, VNC update stats."""
        info: dict[str, Any] = {}
        if self.rewarder is not None:
            info["rewarder.rtt"] = self.rewarder.rtt
            info["rewarder.clock_skew"] = self.rewarder.clock_skew
        if self.vnc is not None:
            stats = self.vnc.stats
            info["vnc.updates"] = stats.updates
            info["vnc.bytes"] = stats.bytes
            info["vnc.pixels"] = stats.pixels
            info["vnc.updates_per_second"] = stats.updates_per_second
        return info


class _Always:
    connected = True
    error = None


_ALWAYS: Final = _Always()
