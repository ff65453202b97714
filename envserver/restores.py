"""A remote's snapshots and restores: its state saved, and a new branch of the episode
begun from a saved state (docs/snapshots.md).

Holds :class:`Restores` (a part of :class:`envserver.remote.Remote`). A snapshot is
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
from typing import Any

from rewarder.snapshot_messages import SNAPSHOT_KEY_ENV
from runtimes.errors import BadSnapshot, SnapshotUnsupported

from .episodes import Episodes
from .inputs import REWARDER_SOURCE
from .orders import LOCKSTEP, OBS_SHM, Refused
from .recovery import Progress
from .snapshots import Snapshot, SnapshotError, SnapshotStore, export, open_export, seal_key
from .state import Event, State
from .version import server_version

#: The environment variable that turns on :attr:`Restores.verify_restores` (``1``), as
#: ``serve --verify-restores`` would.
VERIFY_ENV = "UNIVERSE_REMOTE_VERIFY_RESTORES"


class Restores(Episodes):
    """``v0.env.snapshot`` and ``v0.env.restore`` of one remote."""

    snapshots: SnapshotStore
    #: Compare the runtime's digest after every restore with the snapshot's (always in
    #: tests; cheap, a hash of the frame and the game's state).
    verify_restores: bool
    #: Called with (new episode id, branch) when a restore begins a branch: the recorder.
    restore_sinks: list[Callable[[int, dict[str, Any]], None]]

    def _init_snapshots(self, verify_restores: bool | None) -> None:
        self.snapshots = SnapshotStore()
        if verify_restores is None:
            verify_restores = os.environ.get(VERIFY_ENV, "") not in ("", "0")
        self.verify_restores = verify_restores
        self.restore_sinks = []
        #: Exported bytes are sealed with the remotes' shared key (else one of our own:
        #: our bytes then restore here only).
        self._seal = seal_key(os.environ.get(SNAPSHOT_KEY_ENV) or secrets.token_hex(32))
        self._version = server_version()

    def _check_can(self) -> None:
        refusal = self.runtime.snapshot_refusal
        if refusal is not None:
            raise Refused(f"{self.runtime.env_id} cannot snapshot: {refusal} (describe says so)")

    async def snapshot(self, export_bytes: bool = False) -> tuple[str, int, int, bytes | None]:
        """Save the state now: ``(token, episode id, frame, exported bytes or None)``."""
        self._check_can()
        await self._settle()
        if self.state is State.STEPPING:
            raise Refused("a step is under way: snapshot after its reply")
        try:
            state = await self.runtime.asnapshot()
            digest = await self.runtime.astate_digest()
        except SnapshotUnsupported as exc:
            raise Refused(f"{self.runtime.env_id} cannot snapshot: {exc}") from None
        snap = Snapshot(self.runtime.env_id, state, digest, self.episode_id, self.frame,
                        self.episode_frame)
        try:
            token = self.snapshots.add(snap)
        except SnapshotError as exc:
            raise Refused(str(exc)) from None
        data = export(snap, self._version, self._seal) if export_bytes else None
        return token, self.episode_id, self.frame, data

    def _find(self, token: str | None, data: bytes | None) -> Snapshot:
        try:
            if token is not None:
                snap = self.snapshots.get(token)
                if snap.env_id != self.runtime.env_id:
                    raise SnapshotError(
                        f"snapshot {token!r} is of {snap.env_id}; this remote now runs "
                        f"{self.runtime.env_id} (reset with env_id {snap.env_id!r} first)"
                    )
                return snap
            return open_export(data or b"", self.runtime.env_id, self._version, self._seal)
        except SnapshotError as exc:
            raise Refused(str(exc)) from None

    async def restore(self, token: str | None, data: bytes | None, obs: str,
                      reply: Callable[..., None]) -> None:
        """Go back to a token's or exported bytes' state: a new episode id (the branch),
        ``reply(its id, body)`` with the restored frame as a reset's reply, then running.
        :class:`Refused` (nothing changed) for what cannot be restored."""
        self._check_can()
        snap = self._find(token, data)
        await self._settle()
        progress = Progress(self._fire(Event.RESET), "restore", changed=False)
        try:
            try:
                await self.runtime.arestore(snap.state)
            except (BadSnapshot, SnapshotUnsupported) as exc:
                # The runtime checks every field before it sets one: nothing changed.
                self._fire(Event.RESET_DONE)
                raise Refused(f"{self.runtime.env_id} refused this state: {exc}") from None
            progress.changed = True
            if self.verify_restores and await self.runtime.astate_digest() != snap.digest:
                raise RuntimeError(
                    "the restored state's digest differs from the snapshot's: the runtime "
                    "did not come back to the state it saved"
                )
            self.episode_id += 1
            self.inputs.clear()
            # The game holds what was held at the snapshot: the agent that restored holds
            # it now, and lets go of it if it leaves (else a key would stay down).
            keys, pointer = self.runtime.held_input()
            if keys or pointer[2]:
                self.inputs.hold(REWARDER_SOURCE, keys, pointer)
            self.episode_frame = snap.episode_frame
            branch = {
                "from_episode": snap.episode_id, "from_frame": snap.frame,
                "episode_frame": snap.episode_frame, "token": token,
            }
            for sink in self.restore_sinks:
                sink(self.episode_id, {**branch, "state": export(snap, self._version, self._seal)})
            self._frame_ready()
            body: dict[str, Any] = {"frame": self.frame, "restored": branch}
            if obs == OBS_SHM and self.mode == LOCKSTEP:
                body["shm"] = self.lockstep_frames.deliver(
                    obs, self.runtime.framebuffer, self.frame, self.episode_id
                )
            reply(self.episode_id, body)
            self._fire(Event.RESET_DONE)
        except Refused:
            raise
        except BaseException as exc:
            raise self._under_way_failed(progress, exc)  # noqa: B904 (its cause is set)
        self.rewarder.broadcast_describe()
