"""The rewarder client's protocol state, sans I/O: :class:`ClientState`, the one core
both client shells drive.

The asyncio client (:class:`~.client.RewarderClient`, real time) and the blocking one
(:class:`~.blocking.BlockingRewarder`, lockstep) only move bytes: each hands every text
message the server sends to :meth:`ClientState.receive`, which files rewards, texts,
observations and describes into the episode's reward buffer, counts, keeps the last
describe, and returns what the shell must act on — an :class:`Answer` to a request it
waits for (a reply, or the server's ``v0.reply.error`` refusing it), or the server's
:class:`Closing` (a refusal when it comes before any describe). Both show the same state
through these read-only properties, so code that reads a session's rewarder reads either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

import orjson

from .batch_messages import REPLY_BATCH_STEP, BatchStepReply, read_reply
from .connections import ClientConnection
from .errors import ProtocolError, RewarderError, UnknownMethod
from .protocol import (
    JSON_NUMBERS,
    REPLY_STEP,
    Close,
    Describe,
    ErrorReply,
    Observation,
    PingReply,
    PropertiesReply,
    ResetReply,
    Reward,
    StepReply,
    Text,
)
from .reward_buffer import RewardBuffer
from .snapshot_messages import SnapshotReply

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer to request ``message_id`` (the id the shell waits under): its reply,
    or the server's :class:`~.protocol.ErrorReply` refusing it."""

    message_id: Any
    event: ResetReply | StepReply | PingReply | PropertiesReply | ErrorReply | SnapshotReply | BatchStepReply


@dataclass(frozen=True, slots=True)
class Closing:
    """``v0.connection.close``: the server ends the connection, saying why; ``refusal``:
    it came before any describe (wrong password, the seat taken), so it is final."""

    reason: str
    refusal: bool


_REPLIES = (StepReply, PingReply, PropertiesReply, ResetReply, SnapshotReply, BatchStepReply)


class ClientState:
    """The state both rewarder clients keep, and its read-only view."""

    def __init__(self, buffer: RewardBuffer) -> None:
        #: Where rewards go (``pop``/``peek`` read it).
        self.buffer = buffer
        self._describe: Describe | None = None
        self._failure: RewarderError | None = None
        self._closed = False
        self._rtt: float | None = None
        self._skew: tuple[float, float] | None = None
        #: Called with every ``v0.env.observation`` as it is filed (where the client reads:
        #: the loop thread for the asyncio client, whoever reads the blocking one); one
        #: listener, e.g. a browser env's page tap (remotes.web).
        self.on_observation: Callable[[Observation], None] | None = None
        #: Name for the log, set by the shell.
        self.name = ""
        self._messages = self._rewards = self._remote_errors = self._unknown = self._bad = 0
        self._unknown_seen: set[str] = set()

    def receive(
        self, proto: ClientConnection, data: str | bytes, waiting: Callable[[Any], bool],
    ) -> Answer | Closing | None:
        """Handle one server message read on the connection ``proto`` parses: file and
        count what it carries, and return what the shell acts on (None: nothing).
        ``waiting(message_id)``: whether the shell waits for that request's answer (an
        answer nobody waits for is dropped; a refusal of it is logged).

        Args:
            proto: the connection that parsed ``data``.
            data: one message's text.
            waiting: whether a request's answer is awaited.

        Returns:
            An :class:`Answer`, a :class:`Closing`, or None.
        """
        self._messages += 1
        try:
            event = proto.receive(data)
        except ProtocolError as exc:
            self._bad_message(exc)
            return None
        kind = type(event)
        if kind is Reward:
            self._rewards += 1
            self.buffer.file(event)  # type: ignore[arg-type]
        elif kind is Describe:
            self._describe = event  # type: ignore[assignment]
            self.buffer.file(event)  # type: ignore[arg-type]
        elif kind is Text:
            self.buffer.file(event)  # type: ignore[arg-type]
        elif kind is Observation:
            self.buffer.file(event)  # type: ignore[arg-type]
            self._observed(event)  # type: ignore[arg-type]
        elif kind in _REPLIES:
            if kind is ResetReply:  # the server started a new episode, waited for or not
                self.buffer.reset(event.episode_id)  # type: ignore[union-attr]
            return self._answer(event, waiting)  # type: ignore[arg-type]
        elif kind is ErrorReply:
            self._remote_errors += 1
            answer = self._answer(event, waiting)  # type: ignore[arg-type]
            if answer is None:
                log.warning("%s: the server refused message %s: %s", self.name,
                            event.parent_message_id, event.message)  # type: ignore[union-attr]
            return answer
        elif kind is Close:
            return Closing(event.message, self._describe is None)  # type: ignore[union-attr]
        return None

    def receive_step(self, data: bytes, waiting: Container[Any]) -> StepReply | BatchStepReply | None:
        """A lockstep step's usual message, read fast: a well-formed ``v0.reply.env.step``
        or ``v0.reply.batch.step`` to a request in ``waiting``, with one ``orjson.loads``
        and direct reads (counted as :meth:`receive` counts it). None for anything else or
        unusual (a refusal, a Universe server's string id, a field of the wrong type): the
        caller hands it to :meth:`receive`, whose full parser files it or says what is wrong.

        Args:
            data: one message's bytes.
            waiting: the ids of step requests awaited.

        Returns:
            The reply (a batch's for a batch step), or None for the full parser.
        """
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if type(obj) is not dict:
            return None
        method = obj.get("method")
        headers: Any = obj.get("headers")
        body: Any = obj.get("body")
        if type(headers) is not dict or type(body) is not dict:
            return None
        if method != REPLY_STEP:
            parent = headers.get("parent_message_id")
            sent_at: Any = headers.get("sent_at")
            runtime: Any = headers.get("parent_runtime")
            if (method != REPLY_BATCH_STEP or type(parent) is not int or parent not in waiting
                    or type(sent_at) not in JSON_NUMBERS):
                return None
            try:  # (one batch's reply: read here, not parsed a second time)
                batch = read_reply(parent, body, float(sent_at),
                                   float(runtime) if type(runtime) in JSON_NUMBERS else 0.0)
            except ValueError:
                return None
            self._messages += 1
            return batch
        step = step_reply(headers, body, waiting)
        if step is not None:
            self._messages += 1
        return step

    @staticmethod
    def _answer(
        event: (ResetReply | StepReply | PingReply | PropertiesReply | ErrorReply | SnapshotReply
                | BatchStepReply),
        waiting: Callable[[Any], bool],
    ) -> Answer | None:
        parent = event.parent_message_id
        if waiting(parent):
            return Answer(parent, event)
        if isinstance(parent, str) and parent.isdigit() and waiting(int(parent)):
            return Answer(int(parent), event)  # Universe servers echo ids as strings
        return None

    def _bad_message(self, exc: ProtocolError) -> None:
        if isinstance(exc, UnknownMethod):
            self._unknown += 1
            if exc.method not in self._unknown_seen:
                self._unknown_seen.add(exc.method)
                log.info("%s: ignoring unknown server method %r", self.name, exc.method)
            return
        self._bad += 1
        log.warning("%s: ignoring a server message: %s", self.name, exc)

    def _observed(self, event: Observation) -> None:
        """An observation came: hand it to :attr:`on_observation` (a shell may hear more)."""
        listener = self.on_observation
        if listener is not None:
            listener(event)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def error(self) -> RewarderError | None:
        """Why the client stopped (refused, dropped, timed out), or None."""
        return self._failure

    @property
    def episode_id(self) -> int | None:
        """The episode ``pop`` reports on (None before the first reset)."""
        return self.buffer.episode_id

    @property
    def describe(self) -> Describe | None:
        """The last ``v0.env.describe`` of the current connection."""
        return self._describe

    @property
    def rtt(self) -> float | None:
        """Round trip of the latest ping, in seconds (None before the first)."""
        return self._rtt

    @property
    def clock_skew(self) -> tuple[float, float] | None:
        """Bounds ``(lo, hi)`` on server clock minus local clock, in seconds.

        Each ping bounds it by ``[reply.sent_at - received_at, reply.sent_at -
        request_sent_at]``; calibration intersects several of them.
        ``server_time - hi <= local_time <= server_time - lo``.
        """
        return self._skew


def step_reply(headers: dict[str, Any], body: dict[str, Any], waiting: Container[Any]) -> StepReply | None:
    """A ``v0.reply.env.step``'s headers and body as its :class:`StepReply`, when it is
    well-formed and answers a request in ``waiting`` (:meth:`ClientState.receive_step`'s
    reading, shared with a lone remote's steady step, remotes.lockstep_one); None for
    anything unusual (the full parser then files it or says what is wrong)."""
    parent, episode = headers.get("parent_message_id"), headers.get("episode_id")
    sent_at: Any = headers.get("sent_at")
    runtime: Any = headers.get("parent_runtime")
    reward: Any = body.get("reward")
    done, info = body.get("done"), body.get("info", {})
    frame, shm = body.get("frame"), body.get("shm")
    if (type(parent) is not int or parent not in waiting or type(sent_at) not in JSON_NUMBERS
            or type(reward) not in JSON_NUMBERS or type(done) is not bool
            or type(info) is not dict or type(frame) is not int):
        return None
    if type(episode) is not int:
        if type(episode) is not str or not episode.isdecimal() or not episode.isascii():
            return None
        episode = int(episode)
    if shm is not None:
        if (type(shm) is not list or len(shm) != 3 or type(shm[0]) is not str
                or type(shm[1]) is not int or type(shm[2]) is not int):
            return None
        shm = (shm[0], shm[1], shm[2])
    return StepReply(parent, episode, float(reward), done, info, frame, float(sent_at),
                     float(runtime) if type(runtime) in JSON_NUMBERS else 0.0, shm)
