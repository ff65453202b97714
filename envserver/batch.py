"""Batch steps: one ``v0.batch.step`` steps several games of this process at once.

Holds :class:`BatchGames`, made by :func:`envserver.games.serve_games` when a process
serves several games (``serve --games K``). Each game's describe then says
``"batch": {"process": token, "game": i}``; an agent that holds several of them (its
``openai-client-id`` is each one's active rewarder client) may send one request, on any
of those games' rewarder connections, for all of their steps (rewarder/batch_messages.py),
and gets one reply: K requests, K replies and K wake-ups of this process become one.

Each step is its game's own ``v0.env.step`` in every other way: the same order through
the game's core (:meth:`envserver.game_core.GameCore.step_now`: a game batched here has
one player, so the seats' barrier has nothing to gather), or the sliced
:meth:`~envserver.players.Seats.step` when it does not fit one slice, the same state
table, refusals, observers' rewards and VNC frames for viewers; only the frame goes into
slot i of one shared segment for the batch (:class:`rewarder.shm_slots.SlotSegment`, one
per connection that sends batches: a sealed memfd while its requests ask for one, else a
``/dev/shm`` file) instead of the game's own, or, when the request names one, into the
agent's own buffer (:class:`rewarder.shm_bank.BankTarget`: the rows it names, opened once
per connection; where it cannot be, the connection's segment, the reply saying why). A
step refused (a stale episode, a game not held by the sender, a game in real time) is
refused alone, with its reason in its place of the reply; the others step.
"""

from __future__ import annotations

import secrets
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from rewarder.batch_messages import BankInto, BatchStepRequest, reply_body
from rewarder.errors import BadRequest
from rewarder.shm_bank import MAX_BUFFERS, BankTarget, peer_pid
from rewarder.shm_slots import SlotSegment

from .orders import OBS_SHM, Refused, StepOrder

if TYPE_CHECKING:
    from .remote import Remote

Reply = tuple[int, dict[str, Any]]


class BatchGames:
    """The games of one process that batch steps may drive together."""

    def __init__(self, remotes: Sequence[Remote]) -> None:
        #: Names this process in the games' describes (a new one per process start).
        self.token = secrets.token_hex(8)
        self.remotes = list(remotes)
        #: Each sending connection's segment, and the agent's buffers it named (or why
        #: one cannot be used), until that connection closes.
        self._segments: dict[Any, SlotSegment] = {}
        self._targets: dict[Any, dict[tuple[str, int, int], BankTarget | str]] = {}
        self._owners: set[Any] = set()
        for i, remote in enumerate(self.remotes):
            remote.batch_describe = {"process": self.token, "game": i}
            remote.batch_games = self

    def step(
        self, request: BatchStepRequest, client_id: str, owner: Any
    ) -> dict[str, Any] | Coroutine[Any, Any, dict[str, Any]]:
        """The reply's body, or (when a step must run sliced) the coroutine that makes it.
        ``owner``: the sending connection (a ``closed`` future ends its segment)."""
        entries = request.steps
        remotes: list[Remote | str] = [self._held(e.game, client_id) for e in entries]
        shape = next((r.core.runtime.frame_shape for r in remotes if not isinstance(r, str)),
                     None)
        segment: SlotSegment | BankTarget | None = None
        slots: Sequence[int] = range(len(entries))
        into, why = request.into, None
        if shape is not None and into is not None:
            target = self._target(owner, into, shape)
            if isinstance(target, str):
                why = target
            else:
                segment, slots = target, into.slots
        if segment is None and shape is not None:
            segment = self._segment(owner, shape, request.memfd)
        results: list[Reply | str] = []
        later: list[tuple[int, Remote, StepOrder]] = []
        for slot, entry, remote in zip(slots, entries, remotes, strict=True):
            if isinstance(remote, str):
                results.append(remote)
                continue
            assert segment is not None
            if remote.core.runtime.frame_shape != shape:
                results.append(f"game {entry.game}'s screen is not the size of the batch's first "
                               "game's: step games of other sizes in a batch of their own")
                continue
            order = StepOrder(events=entry.events, frames=entry.frames, obs=OBS_SHM,
                              episode_id=entry.episode_id, into=(segment, slot))
            try:  # (the core's own: a game held here has one player, so no joint step)
                done = remote.core.step_now(order)
            except Refused as exc:
                results.append(exc.reason)
                continue
            if done is None:
                later.append((len(results), remote, order))
                results.append("")
            else:
                results.append(done)
        ends: tuple[Any, ...] = (None, None, None, why)
        if isinstance(segment, BankTarget):
            ends = (None, None, segment.name, None)
        elif segment is not None:
            ends = (segment.reply, segment.held, None, why)
        if not later:
            return reply_body(results, *ends)
        return self._step_later(results, later, ends)

    async def _step_later(
        self, results: list[Reply | str], later: list[tuple[int, Remote, StepOrder]], ends: tuple[Any, ...],
    ) -> dict[str, Any]:
        """The steps that run sliced (long ones), one after another."""
        for at, remote, order in later:
            try:
                results[at] = await remote.seats.step(order)
            except Refused as exc:
                results[at] = exc.reason
        return reply_body(results, *ends)

    def _held(self, game: int, client_id: str) -> Remote | str:
        """Game ``game`` if the batch's sender is its active agent, else why not."""
        if not 0 <= game < len(self.remotes):
            return f"this process serves games 0..{len(self.remotes) - 1}, not {game}"
        remote = self.remotes[game]
        if remote.players > 1:
            return (f"game {game} is a multi-player game: step it with v0.env.step on the "
                    "connection of each player")
        active = remote.rewarder.active
        if not client_id or active is None or active.client_id != client_id:
            return (f"game {game} is not held by this agent: connect to its rewarder port as "
                    "its active client, with the same openai-client-id as this connection, first")
        return remote

    def _segment(self, owner: Any, shape: tuple[int, ...], sealed: bool) -> SlotSegment:
        """The sending connection's segment, made (again) for ``shape`` when needed, and
        when the request asks for a sealed memfd (``sealed``) or no longer does."""
        segment = self._segments.get(owner)
        height, width = shape[0], shape[1]
        if segment is not None and segment.fits(len(self.remotes), height, width, sealed):
            return segment
        if segment is not None:
            segment.close()
        self._watch(owner)
        try:
            segment = SlotSegment(len(self.remotes), height, width, sealed)
        except OSError as exc:
            self._segments.pop(owner, None)
            raise BadRequest(f"no shared-memory segment for the batch's frames ({exc}): step "
                             "each game with v0.env.step") from exc
        self._segments[owner] = segment
        return segment

    def _target(self, owner: Any, into: BankInto, shape: tuple[int, ...]) -> BankTarget | str:
        """The agent's buffer ``into`` names, opened once per sending connection (a few
        kept: the agent takes turns between them), or why it cannot be (kept too: the
        agent stops asking when told)."""
        targets = self._targets.get(owner)
        if targets is None:
            targets = self._targets[owner] = {}
            self._watch(owner)
        key = (into.name, into.fd, into.inode)
        height, width = shape[0], shape[1]
        target = targets.get(key)
        if isinstance(target, str) or (target is not None and target.fits(into.rows, height, width)):
            return target
        if target is not None:
            target.close()
        while len(targets) >= 2 * MAX_BUFFERS:  # (the oldest goes: the agent let go of it)
            old = targets.pop(next(iter(targets)))
            if not isinstance(old, str):
                old.close()
        sock = owner.transport.get_extra_info("socket") if getattr(owner, "transport", None) else None
        pid = peer_pid(sock)
        made: BankTarget | str
        if pid is None:
            made = ("frames in the agent's buffer need the rewarder's Unix socket (an agent on "
                    "this machine): they are in this connection's segment")
        else:
            try:
                made = BankTarget(pid, into.name, into.fd, into.inode, into.rows, height, width)
            except (OSError, ValueError) as exc:
                made = (f"the agent's buffer cannot be used ({exc}): the frames are in this "
                        "connection's segment")
        targets[key] = made
        return made

    def _watch(self, owner: Any) -> None:
        """Drop ``owner``'s segment and buffers when its connection closes (once)."""
        if owner not in self._owners:
            self._owners.add(owner)
            owner.closed.add_done_callback(lambda _: self._drop(owner))

    def _drop(self, owner: Any) -> None:
        self._owners.discard(owner)
        segment = self._segments.pop(owner, None)
        if segment is not None:
            segment.close()
        for target in self._targets.pop(owner, {}).values():
            if not isinstance(target, str):
                target.close()

    def close(self) -> None:
        """Remove every segment and let go of every agent's buffer (the process ends)."""
        for owner in list(self._owners):
            self._drop(owner)
