"""A remote's snapshots and restores: its state saved, and a new branch of the episode
begun from a saved state (docs/snapshots.md).

Holds :class:`Restores` (a part of a remote, holding its game core) and :class:`Branching`
(what it uses of the core). A snapshot is
taken between frames (the game loop runs one thing at a time, so no tick or step is
half done) and kept in the remote's :class:`~envserver.snapshots.SnapshotStore` under a
token, its bytes exported when asked. A restore goes through the state table as a reset
does (``RESET`` then ``RESET_DONE``): a new episode id — the branch — whose first frame
is the restored one, told to the recorder with the state, so the recording says so and
still replays. Bad input (a dropped token, another env's bytes, garbage, a pickle) is
refused before anything changes; the runtime refuses its own bytes field by field
without changing either, and the remote serves on.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from rewarder.snapshot_messages import SNAPSHOT_KEY_ENV
from runtimes.base import Runtime
from runtimes.errors import BadSnapshot, SnapshotUnsupported

from .orders import LOCKSTEP, OBS_SHM, Refused
from .snapshots import Snapshot, SnapshotError, SnapshotStore, export, open_export, seal_key
from .state import Event, Progress, State
from .version import server_version

if TYPE_CHECKING:
    from rewarder.server import RewarderServer

    from .lockstep_frames import LockstepFrames

#: The environment variable that turns on :attr:`Restores.verify_restores` (``1``), as
#: ``serve --verify-restores`` would.
VERIFY_ENV = "UNIVERSE_REMOTE_VERIFY_RESTORES"


class Branching(Protocol):
    """What :class:`Restores` uses of the game core (:class:`envserver.game_core.GameCore`)."""

    runtime: Runtime
    episode_id: int
    frame: int
    episode_frame: int

    @property
    def state(self) -> State: ...
    @property
    def mode(self) -> str: ...
    @property
    def rewarder(self) -> RewarderServer: ...
    @property
    def lockstep_frames(self) -> LockstepFrames: ...
    def fire(self, event: Event) -> State: ...
    async def settle(self) -> None: ...
    def branch(self, episode_frame: int) -> int: ...
    def serve_frame(self) -> None: ...
    def under_way_failed(self, progress: Progress, exc: BaseException) -> BaseException: ...


class Restores:
    """``v0.env.snapshot`` and ``v0.env.restore`` of one game core."""

    def __init__(self, core: Branching, verify_restores: bool | None = None) -> None:
        """``verify_restores``: check every restore against the snapshot's digest (None:
        as the environment's :data:`VERIFY_ENV` says)."""
        self.core = core
        #: Tokens -> the snapshots this remote keeps.
        self.snapshots = SnapshotStore()
        if verify_restores is None:
            verify_restores = os.environ.get(VERIFY_ENV, "") not in ("", "0")
        #: Compare the runtime's digest after every restore with the snapshot's (always in
        #: tests; cheap, a hash of the frame and the game's state).
        self.verify_restores = verify_restores
        #: Called with (new episode id, branch) when a restore begins a branch: the recorder.
        self.restore_sinks: list[Callable[[int, dict[str, Any]], None]] = []
        #: Exported bytes are sealed with the remotes' shared key (else one of our own:
        #: our bytes then restore here only).
        self._seal = seal_key(os.environ.get(SNAPSHOT_KEY_ENV) or secrets.token_hex(32))
        self._version = server_version()

    def _check_can(self) -> None:
        runtime = self.core.runtime
        refusal = runtime.snapshot_refusal
        if refusal is not None:
            raise Refused(f"{runtime.env_id} cannot snapshot: {refusal} (describe says so)")

    async def snapshot(self, export_bytes: bool = False) -> tuple[str, int, int, bytes | None]:
        """Save the state now: ``(token, episode id, frame, exported bytes or None)``."""
        core = self.core
        self._check_can()
        await core.settle()
        if core.state is State.STEPPING:
            raise Refused("a step is under way: snapshot after its reply")
        runtime = core.runtime
        try:
            state = await runtime.asnapshot()
            digest = await runtime.astate_digest()
        except SnapshotUnsupported as exc:
            raise Refused(f"{runtime.env_id} cannot snapshot: {exc}") from None
        snap = Snapshot(runtime.env_id, state, digest, core.episode_id, core.frame,
                        core.episode_frame)
        try:
            token = self.snapshots.add(snap)
        except SnapshotError as exc:
            raise Refused(str(exc)) from None
        data = export(snap, self._version, self._seal) if export_bytes else None
        return token, core.episode_id, core.frame, data

    def _find(self, token: str | None, data: bytes | None) -> Snapshot:
        env_id = self.core.runtime.env_id
        try:
            if token is not None:
                snap = self.snapshots.get(token)
                if snap.env_id != env_id:
                    raise SnapshotError(
                        f"snapshot {token!r} is of {snap.env_id}; this remote now runs "
                        f"{env_id} (reset with env_id {snap.env_id!r} first)"
                    )
                return snap
            return open_export(data or b"", env_id, self._version, self._seal)
        except SnapshotError as exc:
            raise Refused(str(exc)) from None

    async def restore(self, token: str | None, data: bytes | None, obs: str,
                      reply: Callable[..., None]) -> None:
        """Go back to a token's or exported bytes' state: a new episode id (the branch),
        ``reply(its id, body)`` with the restored frame as a reset's reply, then running.
        :class:`Refused` (nothing changed) for what cannot be restored."""
        core = self.core
        self._check_can()
        snap = self._find(token, data)
        await core.settle()
        progress = Progress(core.fire(Event.RESET), "restore", changed=False)
        try:
            runtime = core.runtime
            try:
                await runtime.arestore(snap.state)
            except (BadSnapshot, SnapshotUnsupported) as exc:
                # The runtime checks every field before it sets one: nothing changed.
                core.fire(Event.RESET_DONE)
                raise Refused(f"{runtime.env_id} refused this state: {exc}") from None
            progress.changed = True
            if self.verify_restores and await runtime.astate_digest() != snap.digest:
                raise RuntimeError(
                    "the restored state's digest differs from the snapshot's: the runtime "
                    "did not come back to the state it saved"
                )
            episode_id = core.branch(snap.episode_frame)
            branch = {
                "from_episode": snap.episode_id, "from_frame": snap.frame,
                "episode_frame": snap.episode_frame, "token": token,
            }
            for sink in self.restore_sinks:
                sink(episode_id, {**branch, "state": export(snap, self._version, self._seal)})
            core.serve_frame()
            body: dict[str, Any] = {"frame": core.frame, "restored": branch}
            if obs == OBS_SHM and core.mode == LOCKSTEP:
                body["shm"] = core.lockstep_frames.deliver(
                    obs, runtime.framebuffer, core.frame, episode_id
                )
            reply(episode_id, body)
            core.fire(Event.RESET_DONE)
        except Refused:
            raise
        except BaseException as exc:
            raise core.under_way_failed(progress, exc)  # noqa: B904 (its cause is set)
        core.rewarder.broadcast_describe()
