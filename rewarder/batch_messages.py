"""The rewarder's batch step (our extension, docs/rewarder.md "Batch steps").

Holds the method ``v0.batch.step`` (step several lockstep games of one ``serve --games K``
process with one request, sent on the rewarder connection of any of them), its reply
``v0.reply.batch.step``, the describe key that says which games may be batched
together (:data:`DESCRIBE_KEY`), their dataclasses and the bodies both ends build. The
request's parser is :func:`rewarder.parsers.parse_batch_step` (it reads each step's
events as ``v0.env.step`` does). A Universe client never sends these and never hears them.

Why: a vector of n games over K-game processes costs n requests, n replies and n wake-ups
of the remotes per step; batched, it is one of each per process (issue 40). Each game
keeps its own ports, seats and state: the request is accepted for a game only when that
game's active rewarder client is the same agent (the same ``openai-client-id``) as the
one that sends the batch, so a batch can drive only games its sender already holds.

The frames go into one shared-memory segment (:mod:`rewarder.shm_slots`), step i's in
slot i, so the agent reads them all at once: out of a read-only mapping when the
segment is a sealed memfd (the request's ``"memfd": true``, which an agent sends once it
reached the remote's fds through ``/proc``: the reply's ``shm_fd``), else with one
``preadv`` of the file. Or, for an agent on the same machine that asks (``"into"``), into
the agent's own buffer, the array it hands its caller (:mod:`rewarder.shm_bank`): the
reply then says ``"into": name`` instead of naming a segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from .protocol import MAX_GAMES_PER_PROCESS, ActionEvent, StepReply, parse_episode_id

BATCH_STEP: Final = "v0.batch.step"
REPLY_BATCH_STEP: Final = "v0.reply.batch.step"
#: The describe key of a game that takes part in batches: ``{"process": token, "game":
#: index}``; games whose describes name the same process token may be batched together.
DESCRIBE_KEY: Final = "batch"
#: Steps one batch may hold: one per game of the process, which serves at most this many.
MAX_BATCH_STEPS: Final = MAX_GAMES_PER_PROCESS
#: The request's key asking for the frames in a sealed memfd (:mod:`rewarder.shm`).
MEMFD_KEY: Final = "memfd"
#: The reply's key saying where the remote holds the segment open: ``[pid, fd]``.
HELD_KEY: Final = "shm_fd"
#: The request's key naming the agent's buffer for the frames (:mod:`rewarder.shm_bank`):
#: ``[name, fd, inode, rows, [row of each step]]``; the reply's, the buffer's name when the
#: frames went there.
INTO_KEY: Final = "into"
#: Rows an agent's buffer may have, and characters its name (a request naming more is refused).
MAX_BANK_ROWS: Final = 1024
MAX_BANK_NAME_CHARS: Final = 200
#: The reply's key saying why they did not (they are in the segment ``shm`` names).
INTO_ERROR_KEY: Final = "into_error"
#: Characters of a reply's ``into_error`` the agent keeps (it logs it).
MAX_INTO_ERROR_CHARS: Final = 500


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One game's step in a batch: game ``game`` of the process (its describe's index)."""

    game: int
    episode_id: int | None
    events: tuple[ActionEvent, ...]
    frames: int


@dataclass(frozen=True, slots=True)
class BatchStepRequest:
    """``v0.batch.step``: each entry's game steps as its own ``v0.env.step`` would."""

    message_id: Any
    sent_at: float
    steps: tuple[BatchEntry, ...]
    #: The sender asks for the frames in a sealed memfd (it reaches this process's fds).
    memfd: bool = False
    #: The sender's buffer for the frames, if it names one (:mod:`rewarder.shm_bank`).
    into: BankInto | None = None


@dataclass(frozen=True, slots=True)
class BankInto:
    """A request's ``into``: the agent's buffer (its name, its fd and inode in the agent,
    its rows) and the row of each step's frame."""

    name: str
    fd: int
    inode: int
    rows: int
    slots: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BatchStepReply:
    """``v0.reply.batch.step``: per step, its game's :class:`StepReply` (its
    ``parent_message_id`` is the batch's, its ``shm`` None) or the reason it was refused;
    ``shm``: ``(name, height, width, stride)`` of the segment whose slot i holds step i's
    frame (None when no step drew one); ``shm_fd``: ``(pid, fd)`` where the remote holds
    that segment open (None: not said, or not a pid and an fd)."""

    parent_message_id: Any
    sent_at: float
    runtime: float
    shm: tuple[str, int, int, int] | None
    steps: tuple[StepReply | str, ...]
    shm_fd: tuple[int, int] | None = None
    #: The agent's buffer the frames went into (the request's ``into``), or why not.
    into: str | None = None
    into_error: str | None = None


#: One game's step as a caller gives it: ``(game, episode id, events, frames)``.
StepTuple = tuple[int, int | None, Sequence[Sequence[Any]], int]


def request_body(steps: list[StepTuple], memfd: bool = False) -> dict[str, Any]:
    """The request's body from ``(game, episode id, events, frames)`` per step (``memfd``:
    asking for a sealed memfd)."""
    body: dict[str, Any] = {"obs": "shm"}
    if memfd:
        body[MEMFD_KEY] = True
    body["steps"] = step_entries(steps)
    return body


def step_entries(steps: Sequence[StepTuple]) -> list[dict[str, Any]]:
    """A request's steps (:func:`step_entry` each, its action set)."""
    return [{**step_entry(game, episode, frames), "action": action}
            for game, episode, action, frames in steps]


def step_entry(game: int, episode: int | None, frames: int) -> dict[str, Any]:
    """One step of a request's body (:func:`request_body`), its ``action`` None: a caller
    that sends the same games every step keeps these and sets only the action."""
    return {"game": game, "episode_id": str(episode or 0), "action": None, "frames": frames}


def steps_json(entries: list[dict[str, Any]]) -> bytes:
    """The JSON of a request's steps (:func:`step_entry` each, its action set) as
    :func:`request_bytes` takes it; TypeError names what an action held that JSON cannot
    carry (numpy scalars and arrays go as numbers and lists, as every request's)."""
    try:
        return orjson.dumps(entries, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError as exc:
        raise TypeError(f"{BATCH_STEP}: the request holds a value JSON cannot carry ({exc}); "
                        "send numbers, strings, booleans and lists of them") from None


def request_bytes(message_id: int, sent_at: float, steps: bytes, memfd: bool = False,
                  into: bytes | None = None) -> bytes:
    """The whole request, as ``orjson.dumps`` gives its message (its headers, then its body
    ``{"obs": "shm", "steps": ...}``) but with ``steps`` (:func:`steps_json`) put in as it is:
    a vector step sends one a process, and the envelope is the same bytes each time.
    ``into``: the JSON of the body's ``into`` (:data:`INTO_KEY`)."""
    head = _MEMFD_HEAD if memfd else _BODY_HEAD
    if into is not None:
        head = head[:-len(_STEPS)] + _INTO + into + b"," + _STEPS
    return b"".join((_REQUEST_HEAD, b"%d" % message_id, _SENT_AT, orjson.dumps(sent_at),
                     head, steps, _REQUEST_TAIL))


_REQUEST_HEAD: Final = b'{"method":"' + BATCH_STEP.encode() + b'","headers":{"message_id":'
_SENT_AT: Final = b',"sent_at":'
_BODY_HEAD: Final = b'},"body":{"obs":"shm","steps":'
_MEMFD_HEAD: Final = b'},"body":{"obs":"shm","' + MEMFD_KEY.encode() + b'":true,"steps":'
_REQUEST_TAIL: Final = b"}}"
_STEPS: Final = b'"steps":'
_INTO: Final = b'"' + INTO_KEY.encode() + b'":'


def reply_body(
    steps: list[tuple[int, dict[str, Any]] | str], shm: list[str | int] | None,
    held: list[int] | None = None, into: str | None = None, into_error: str | None = None,
) -> dict[str, Any]:
    """The reply's body (the server's side) from each step's ``(episode id, step reply
    body)`` or refusal, and the segment (``held``: where this process holds it open,
    ``shm_fd``: a key older agents do not read), or the agent's buffer the frames went
    into (``into``), or why they did not (``into_error``). Each step's body is the step's
    own (made for this reply): its episode id goes into it, not into a copy."""
    out: list[dict[str, Any]] = []
    for step in steps:
        if isinstance(step, str):
            out.append({"error": step})
        else:
            episode_id, body = step
            body["episode_id"] = str(episode_id)
            out.append(body)
    if into is not None:
        return {INTO_KEY: into, "steps": out}
    reply: dict[str, Any] = {"shm": shm, HELD_KEY: held, "steps": out} if held is not None else {
        "shm": shm, "steps": out}
    if into_error is not None:
        reply[INTO_ERROR_KEY] = into_error
    return reply


def read_held(raw: object) -> tuple[int, int] | None:
    """A reply's ``shm_fd`` as ``(pid, fd)``; None when absent or not two integers (it is
    a hint: the segment's name still reaches the file)."""
    if type(raw) is list and len(raw) == 2 and type(raw[0]) is int and type(raw[1]) is int:
        return raw[0], raw[1]
    return None


def read_reply(parent: Any, body: dict[str, Any], sent_at: float, runtime: float) -> BatchStepReply:
    """The agent's reading of a reply's body; ValueError says what is wrong with it."""
    raw_shm, raw_steps = body.get("shm"), body.get("steps")
    if not isinstance(raw_steps, list):
        raise ValueError(f"batch step reply needs a list of steps, got {body!r:.200}")
    shm = None
    if raw_shm is not None:
        if not (type(raw_shm) is list and len(raw_shm) == 4 and type(raw_shm[0]) is str
                and type(raw_shm[1]) is int and type(raw_shm[2]) is int and type(raw_shm[3]) is int):
            raise ValueError(
                f"batch step reply's shm must be [name, height, width, stride], got {raw_shm!r:.200}"
            )
        shm = (raw_shm[0], raw_shm[1], raw_shm[2], raw_shm[3])
    steps: list[StepReply | str] = []
    for entry in raw_steps:  # (every game of every vector step: subscripts, few calls)
        if type(entry) is not dict:
            raise ValueError(f"a batch step reply's step must be an object, got {entry!r:.200}")
        if "error" in entry:
            steps.append(str(entry["error"]))
            continue
        try:
            reward: Any = entry["reward"]
            done, frame = entry["done"], entry["frame"]
        except KeyError:
            reward = None  # (said below)
        info: Any = entry["info"] if "info" in entry else {}
        if ((type(reward) is not float and type(reward) is not int) or type(done) is not bool
                or type(info) is not dict or type(frame) is not int):
            raise ValueError(f"a batch step reply's step needs reward, done, info and frame: {entry!r:.200}")
        episode = entry.get("episode_id")
        if type(episode) is str and episode.isdecimal() and episode.isascii():  # (as ids travel)
            episode = int(episode)
        elif type(episode) is not int:
            episode = parse_episode_id(episode)  # (says what is wrong)
        steps.append(StepReply(parent, episode, float(reward), done, info, frame, sent_at, runtime, None))
    into, into_error = body.get(INTO_KEY), body.get(INTO_ERROR_KEY)
    return BatchStepReply(parent, sent_at, runtime, shm, tuple(steps), read_held(body.get(HELD_KEY)),
                          into if type(into) is str else None,
                          None if into_error is None else f"{into_error}"[:MAX_INTO_ERROR_CHARS])

