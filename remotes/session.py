"""One remote's two channels, paired: what the stepping core drives.

Holds :class:`RemoteSession`, :class:`RemoteSnapshot` (a frozen snapshot of a session for
the agent's thread) and :class:`VNCOptions`; :class:`~remotes.unavailable.RemoteUnavailable`
is re-exported. A session owns a :class:`~vncdriver.client.VNCClient` and a rewarder
channel — a real-time :class:`~rewarder.client.RewarderClient` or a lockstep
:class:`~rewarder.blocking.BlockingRewarder` (either may be absent for VNC-only or
rewarder-only addresses) — connects them, resets through the rewarder's episode
handshake and reads frame + reward per step (its address: :mod:`remotes.address`).

**Whose thread.** A real-time session's fields change on the env's event loop (a
reconnect sets ``vnc``/``rewarder`` to None and back): read them only from coroutines
run there (``LoopThread.run``). A lockstep session connects, resets and closes from the
thread that steps it (:meth:`RemoteSession.connect_here`, :meth:`RemoteSession.close_here`),
its VNC client alone living on the loop. The agent's thread gets :class:`RemoteSnapshot`
snapshots (``RemoteEnv.remote``, ``RemoteVectorEnv.remotes``); see :mod:`remotes.loop`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import numpy as np

from rewarder.blocking import BlockingRewarder
from rewarder.client import RewarderClient
from rewarder.errors import (
    Refused,
    RewarderError,
    Untrusted,
)
from rewarder.protocol import LOCKSTEP
from rewarder.reward_buffer import EMPTY, EpisodeResult
from rewarder.tls import client_context, untrusted, verification_error
from vncdriver.addresses import is_loopback
from vncdriver.client import VNCClient
from vncdriver.client_protocol import FramebufferUpdated
from vncdriver.errors import (
    VNCError,
)
from vncdriver.messages import FrameTag

from .address import RemoteAddress
from .holders import process_client_id, take_slot
from .listening import NothingListens, nothing_listens
from .loop import LoopThread
from .shared_frames import SharedFrames
from .unavailable import FINAL_ERRORS, RemoteUnavailable

log = logging.getLogger(__name__)

#: Seconds a reset may take, from the request to the first frame of the new episode.
RESET_TIMEOUT: Final = 60.0
#: Seconds between "still waiting" lines while a remote does not answer.
WAIT_REPORT_INTERVAL: Final = 5.0
#: A real-time agent's next VNC update request waits up to this long (cut to end before
#: the remote's next frame) for the step's input, to travel in one packet with it: one
#: send and one wake-up of the remote fewer per step (VNCClient request_hold;
#: `python -m benchmarks remotes_realtime` and `density` run with it).
REQUEST_HOLD: Final = 0.012


@dataclass(frozen=True, slots=True)
class RemoteSnapshot:
    """A session as the agent's thread may see it: taken on the loop thread, never changed.

    ``describe`` is the body of the remote's last ``v0.env.describe`` (read-only).
    """

    name: str
    connected: bool
    error: str | None
    width: int
    height: int
    describe: Mapping[str, Any]
    frame_tags: bool
    #: VNC framebuffer updates received by the current connection.
    vnc_updates: int
    #: The rewarder's current episode (None before a reset, or without a rewarder).
    episode_id: int | None

    @property
    def screen_size(self) -> tuple[int, int]:
        return self.width, self.height

    def describe_body(self) -> dict[str, Any]:
        """A copy of :attr:`describe` (as :meth:`RemoteSession.describe_body` gives)."""
        return dict(self.describe)


@dataclass(frozen=True, slots=True)
class VNCOptions:
    """How the VNC client asks for pixels.

    ``encoding=None`` picks per remote: Raw on loopback, where bandwidth is free and
    encoding is not (`python -m benchmarks atari_lockstep` times a lockstep step with
    each encoding), and Tight elsewhere (Universe's default). Lossless unless a
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
        tls: ssl.SSLContext | None = None,
        lockstep: bool = False,
        player: int | None = None,
    ) -> None:
        """``tls``: the verifying context for a ``vnc+tls://`` address (None: the
        default of :func:`rewarder.tls.client_context`). ``lockstep``: the rewarder
        channel is a :class:`~rewarder.blocking.BlockingRewarder`, which the stepping
        thread drives itself (steps never cross to the loop thread). ``player``: the
        player this session holds on a multi-player remote."""
        self.address = address
        self.tls = (tls or client_context()) if address.tls else None
        self.name = str(address)
        self.password = password
        self.vnc_options = vnc
        self.start_timeout = start_timeout
        self.lockstep = lockstep
        self.player = player
        self.vnc: VNCClient | None = None
        self.rewarder: RewarderClient | BlockingRewarder | None = None
        #: Called after each VNC update of the current client is applied (on the loop
        #: thread): the stepping core's frame clock, by the update's frame tag, and what
        #: the update wrote. Survives reconnects.
        self.on_frame: Callable[[FramebufferUpdated], None] | None = None
        #: True once a newer session of this process took this remote's active slot.
        self.replaced = False
        #: Real time: VNC updates only when a step reads one (:meth:`want_frame`), so
        #: frames nobody reads are neither encoded nor decoded (issue 44).
        self.on_demand = False
        #: Where the remote is now, for remotes that come back at another address (a
        #: restarted Ray actor): asked before each probe of a dropped remote.
        self.locate: Callable[[], Awaitable[RemoteAddress]] | None = None
        #: The rewarder client id to connect with (a pool lease's; None: this process's).
        self.client_id: str | None = None
        #: Rewrites a loss's reason for ``info["remote.error"]`` (a pool lease says why
        #: its remote went), or None.
        self.on_lost: Callable[[str], str] | None = None
        self._blank: np.ndarray | None = None
        #: The newest episode id any connection of this session saw: a reset after a
        #: reconnect asks past it, so episode ids keep growing across a restarted remote.
        self._newest_episode: int | None = None
        self._sends: set[asyncio.Task[None]] = set()
        #: Whether a connect ever succeeded: only a first one may give up at once.
        self.reached = False
        #: Lockstep frames through shared memory, for a remote on this machine.
        self.shared = SharedFrames(self.name, is_loopback(address.host))

    def move(self, address: RemoteAddress) -> None:
        """Point this (closed) session at the remote's new address."""
        self.address, self.name = address, str(address)
        self.tls = (self.tls or client_context()) if address.tls else None

    # Connection -------------------------------------------------------------------------

    async def connect(self, start_timeout: float | None = None) -> None:
        """Real time: connect both channels (concurrently) on the loop thread, dialling for
        up to ``start_timeout`` (default: the session's); raise :class:`RemoteUnavailable`.
        A first connect gives up at once where nothing listens on loopback and nothing
        here is starting a remote (:mod:`remotes.listening` says when, and why only then).
        A lockstep session connects from the caller's thread: :meth:`connect_here`."""
        if self.lockstep:
            raise RuntimeError("a lockstep session connects from the stepping thread (connect_here)")
        await self.close()
        timeout = self.start_timeout if start_timeout is None else start_timeout
        await self._check_listening()
        self.vnc = self._new_vnc(timeout)
        if self.address.rewarder is not None:
            self.rewarder = RewarderClient(
                self.address.rewarder, password=self.password, start_timeout=timeout,
                reconnect=False, name=self.name, client_id=self._client_id(), tls=self.tls,
                player=self.player,
            )
            self._continue_episodes(self.rewarder)
        starts = {"VNC": self.vnc.start() if self.vnc is not None else None,
                  "rewarder": self.realtime_channel.start() if self.realtime_channel is not None else None}
        channels = {kind: asyncio.ensure_future(start) for kind, start in starts.items() if start is not None}
        reporter = asyncio.ensure_future(
            self._report_waiting({kind: task.done for kind, task in channels.items()}, timeout)
        )
        try:
            pending = set(channels.values())
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                if any(isinstance(t.exception(), FINAL_ERRORS) for t in done):
                    break  # the remote said why: the other channel cannot help
        except BaseException:  # cancelled (an interrupted constructor): leave nothing behind,
            for task in channels.values():
                task.cancel()
            await self.close()  # or a late handshake would take the remote's active slot
            raise
        finally:
            reporter.cancel()
        for task in pending:
            task.cancel()
        errors = [
            t.exception() for t in channels.values()
            if t.done() and not t.cancelled() and t.exception() is not None
        ]
        if errors:
            await self.close()
            raise self._unavailable(errors)  # type: ignore[arg-type]
        self._connected()

    def connect_here(self, loop: LoopThread, start_timeout: float | None = None) -> None:
        """Lockstep: :meth:`connect` from the caller's thread — the blocking rewarder
        channel is dialled here while VNC connects on ``loop`` (where it lives); no worker
        thread. Raise :class:`RemoteUnavailable`."""
        self.close_here(loop)
        timeout = self.start_timeout if start_timeout is None else start_timeout
        loop.run(self._check_listening())
        rewarder_done = [self.address.rewarder is None]
        vnc = loop.submit(self._start_vnc(timeout, rewarder_done))
        errors: list[BaseException] = []
        try:
            if self.address.rewarder is not None:
                rewarder = self.rewarder = BlockingRewarder(
                    self.address.rewarder, password=self.password, start_timeout=timeout,
                    name=self.name, client_id=self._client_id(), tls=self.tls, player=self.player,
                )
                self._continue_episodes(rewarder)
                try:
                    rewarder.connect()
                except (RewarderError, OSError) as exc:
                    errors.append(exc)
                    if isinstance(exc, FINAL_ERRORS):
                        vnc.cancel()  # the remote said why: the other channel cannot help
                finally:
                    rewarder_done[0] = True
            if not vnc.cancelled():
                error = vnc.result()
                if error is not None:
                    errors.append(error)
        except BaseException:  # interrupted: leave nothing behind (a late handshake would
            vnc.cancel()       # take the remote's active slot)
            self.close_here(loop)
            raise
        if errors:
            self.close_here(loop)
            raise self._unavailable(errors)
        self._connected()

    async def _check_listening(self) -> None:
        if not self.reached and (why := await nothing_listens(self.address)) is not None:
            raise RemoteUnavailable(self.name, "cannot connect", NothingListens(why))

    async def _start_vnc(self, timeout: float, rewarder_done: list[bool]) -> BaseException | None:
        """Lockstep's VNC half of :meth:`connect_here`, on the loop: the error, or None."""
        self.vnc = self._new_vnc(timeout)
        if self.vnc is None:
            return None
        vnc = self.vnc
        reporter = asyncio.ensure_future(self._report_waiting(
            {"VNC": lambda: vnc.connected or vnc.closed, "rewarder": lambda: rewarder_done[0]}, timeout
        ))
        try:
            await vnc.start()
        except (VNCError, OSError) as exc:
            return exc
        finally:
            reporter.cancel()
        return None

    def _new_vnc(self, timeout: float) -> VNCClient | None:
        addr = self.address
        if addr.vnc is None:
            return None
        client = VNCClient(
            addr.vnc, password=self.password, start_timeout=timeout, name=self.name,
            frame_tags=True,  # servers that are not ours ignore the request
            on_update=self._vnc_update, **self.vnc_options.kwargs(addr.host), tls=self.tls,
            request_hold=REQUEST_HOLD,
        )
        client.on_demand = self.on_demand
        return client

    def want_frame(self) -> None:
        """On demand: ask VNC for the newest frame now (unless a request is out)."""
        if self.vnc is not None:
            self.vnc.want_update()

    def _client_id(self) -> str:
        return (self.client_id or process_client_id()) + ("" if not self.player else f":p{self.player}")

    def _continue_episodes(self, rewarder: RewarderClient | BlockingRewarder) -> None:
        """Drop the new connection's news of older episodes and make the next reset's
        episode_id header ask past them (the clients have no option for it)."""
        if self._newest_episode is not None:
            rewarder.buffer.reset(self._newest_episode)

    def _unavailable(self, errors: Sequence[BaseException]) -> RemoteUnavailable:
        # The rewarder's refusal says most (VNC auth says only "failed").
        first = next((e for e in errors if isinstance(e, Refused)), errors[0])
        addr = self.address
        if not isinstance(first, Refused) and (bad := verification_error(first)) is not None:
            first = Untrusted(untrusted(f"{addr.host}:{addr.vnc_port}", bad))
        return RemoteUnavailable(self.name, "cannot connect", first)

    def _connected(self) -> None:
        self.replaced = False
        self.reached = True
        take_slot(self)

    async def _report_waiting(self, channels: Mapping[str, Callable[[], bool]], timeout: float) -> None:
        """Every :data:`WAIT_REPORT_INTERVAL` s of a slow connect, say which channel is
        still missing (``channels``: kind -> is it done?): silence for ``start_timeout``
        seconds looks like a hang."""
        started = time.monotonic()
        while True:
            await asyncio.sleep(WAIT_REPORT_INTERVAL)
            missing = [kind for kind, done in channels.items() if not done()]
            if missing:
                log.warning(
                    "waiting for remote %s: %s not answering yet (%.0f of %g s); is it "
                    "running, and are these its ports?", self.name, " and ".join(missing),
                    time.monotonic() - started, timeout,
                )

    async def close(self) -> None:
        """Close both channels (idempotent); the session may :meth:`connect` again. A
        lockstep session's blocking channel is closed here too (closing never waits on
        its peer), but only while nobody steps it: lockstep envs call :meth:`close_here`."""
        vnc, rewarder = self._forget_channels()
        if isinstance(rewarder, BlockingRewarder):
            rewarder.close()
            rewarder = None
        sends, self._sends = self._sends, set()
        for task in sends:
            task.cancel()
        clients = [c for c in (vnc, rewarder) if c is not None]
        await asyncio.gather(*(c.close() for c in clients), *sends, return_exceptions=True)

    def close_here(self, loop: LoopThread, wait: bool = True) -> Future[None] | None:
        """Lockstep: :meth:`close` from the caller's thread — the blocking channel here,
        VNC on ``loop`` (waited for unless ``wait`` is False: then its future, if any)."""
        vnc, rewarder = self._forget_channels()
        if isinstance(rewarder, BlockingRewarder):
            rewarder.close()
        if vnc is None or loop.forked:
            return None
        if wait:
            loop.run(vnc.close())
            return None
        return loop.submit(vnc.close())

    def _forget_channels(self) -> tuple[VNCClient | None, RewarderClient | BlockingRewarder | None]:
        vnc, rewarder = self.vnc, self.rewarder
        if rewarder is not None:
            newest = rewarder.buffer.newest_episode_id
            if newest is not None:
                self._newest_episode = max(newest, self._newest_episode or 0)
        self.vnc = self.rewarder = None
        self.shared.forget()
        return vnc, rewarder

    def _vnc_update(self, client: VNCClient, update: FramebufferUpdated) -> None:
        if self.on_frame is not None and client is self.vnc:
            self.on_frame(update)

    def state(self) -> RemoteSnapshot:
        """A snapshot for the agent's thread (call on the loop thread)."""
        vnc, rewarder = self.vnc, self.rewarder
        try:
            width, height = self.screen_size
        except RemoteUnavailable:
            width = height = 0
        return RemoteSnapshot(
            name=self.name,
            connected=self.connected,
            error=self.error,
            width=width,
            height=height,
            describe=MappingProxyType(self.describe_body()),
            frame_tags=self.frame_tags,
            vnc_updates=vnc.updates if vnc is not None else 0,
            episode_id=rewarder.episode_id if rewarder is not None else None,
        )

    @property
    def connected(self) -> bool:
        vnc, rewarder = self._wanted()  # (no generator: every lockstep step asks, twice)
        return bool(vnc is not None and vnc.connected and rewarder is not None and rewarder.connected)

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

    # Channels ------------------------------------------------------------------------------

    @property
    def lockstep_channel(self) -> BlockingRewarder | None:
        """The rewarder channel a lockstep session's stepping thread drives (None in real
        time, or while not connected). Read :attr:`rewarder` for what both channels tell."""
        rewarder = self.rewarder
        return rewarder if isinstance(rewarder, BlockingRewarder) else None

    @property
    def realtime_channel(self) -> RewarderClient | None:
        """The asyncio rewarder channel of a real-time session, on the loop thread (None
        in lockstep, or while not connected)."""
        rewarder = self.rewarder
        return rewarder if isinstance(rewarder, RewarderClient) else None

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
        """A copy of the last ``v0.env.describe`` body ({} without one). Reads each field
        once, so a reconnect on the loop thread cannot break it halfway."""
        rewarder = self.rewarder
        describe = rewarder.describe if rewarder is not None else None
        return dict(describe.body) if describe is not None else {}

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
    def heartbeats(self) -> bool:
        """True when the remote is ours, so its rewarder sends a describe every few
        seconds even when nothing happens (a silent one is stalled)."""
        return "remote_state" in self.describe_body()

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
        """Real time: start a new episode and wait until the remote runs it and a frame of
        it arrived (a lockstep session resets from the stepping thread: remotes.lockstep).

        Returns the new episode id (None without a rewarder). With frame tags, "a frame of
        it" is exact: an update tagged with the new episode. Without (Xvnc), it is the
        first update after the reset reply: the remote draws the new episode's first
        frame before it replies.
        """
        if self.lockstep_channel is not None:
            raise RuntimeError("a lockstep session resets from the stepping thread (remotes.lockstep)")
        rewarder = self.realtime_channel
        self.shared.new_episode()
        try:
            async with asyncio.timeout(timeout):
                episode = None
                if rewarder is not None:
                    episode = await rewarder.reset(env_id=env_id, seed=seed, fps=fps, mode=mode)
                    await rewarder.wait_for_state("running", episode_id=episode)
                await self.show_episode(episode)
                return episode
        except (RewarderError, VNCError, OSError) as exc:
            raise RemoteUnavailable(self.name, "reset failed", exc) from exc
        except TimeoutError as exc:
            raise RemoteUnavailable(self.name, f"reset took over {timeout:g} s", exc) from exc

    async def show_episode(self, episode: int | None) -> None:
        """Wait until VNC shows a frame of ``episode`` (by its tag; without tags, the next
        update), asking for updates again if a lockstep step paused them."""
        vnc = self.vnc
        if vnc is None:
            return
        vnc.resume_updates()
        if self.frame_tags and episode is not None:
            while (tag := vnc.tag) is None or tag.episode_id < episode:
                await vnc.wait_update(vnc.updates)
        else:
            await vnc.wait_update(vnc.updates)

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
        elif (rewarder := self.realtime_channel) is not None:
            task = asyncio.get_running_loop().create_task(rewarder.send_action(events))
            self._sends.add(task)
            task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        """Forget a finished ``v0.agent.action`` send; a failure shows as a lost connection."""
        self._sends.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("%s: sending an action failed: %s", self.name, task.exception())

    def pop(self) -> EpisodeResult:
        """Reward, done, info and text gathered since the last pop, for the current episode."""
        return self.rewarder.pop() if self.rewarder is not None else EMPTY

    def info(self, vnc: bool = True) -> dict[str, Any]:
        """Diagnostics for ``info``: round trip, clock skew, VNC update stats (unless
        ``vnc`` is False: a lockstep frame that came through shared memory)."""
        info: dict[str, Any] = {}
        if self.rewarder is not None:
            info["rewarder.rtt"] = self.rewarder.rtt
            info["rewarder.clock_skew"] = self.rewarder.clock_skew
        if vnc and self.vnc is not None:
            (info["vnc.updates"], info["vnc.bytes"], info["vnc.pixels"],
             info["vnc.updates_per_second"]) = self.vnc.counts
        return info


class _Always:
    connected = True
    error = None


_ALWAYS: Final = _Always()
