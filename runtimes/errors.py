"""Errors of runtimes and the remote process.

    RuntimeFailure
    ├── UnknownEnvironment   no runtime has that env id
    ├── BadInput             an input event the runtime cannot take (unknown key, off screen)
    ├── SnapshotUnsupported  this runtime cannot save or restore its state (docs/snapshots.md)
    └── BadSnapshot          snapshot bytes that are not this runtime's state (the message says which field)

Holds :func:`closest_ids`, the difflib matching :class:`UnknownEnvironment` (and the agent
side's ``gymnasium.make``) answers a mistyped id with.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Final

#: Suggestions an unknown id is answered with: a few, never the ~240 ids there are.
MAX_SUGGESTIONS: Final = 5
#: Least difflib similarity (0..1) of game names for an id to be suggested: at 0.6
#: (difflib's default) "pong" also brought Pooyan and Boxing; 0.7 keeps Pong alone.
SUGGESTION_CUTOFF: Final = 0.7
#: The command that prints every id, named in the messages instead of the whole list.
LIST_COMMAND: Final = "universe-remote list"


def _name(env_id: str) -> str:
    """``"atari.Pong-v0"`` -> ``"pong"``: what a person remembers of an id."""
    return env_id.lower().split(".", 1)[-1].rsplit("-v", 1)[0]


def closest_ids(env_id: str, candidates: Iterable[str], n: int = MAX_SUGGESTIONS) -> list[str]:
    """The ``n`` candidates most like ``env_id``, best first, ignoring case.

    Ids are compared by game name (``"pong"``, ``"atari.Pongg-v0"`` and ``"atari.pong-v0"``
    all find ``atari.Pong-v0``): the family and version every id shares would otherwise
    make unrelated games look alike. On equal names the same family comes first.
    """
    wanted_name, family = _name(env_id), env_id.lower().split(".", 1)[0]
    scored = []
    for candidate in candidates:
        score = difflib.SequenceMatcher(None, wanted_name, _name(candidate)).ratio()
        if score >= SUGGESTION_CUTOFF:
            same_family = candidate.lower().split(".", 1)[0] == family
            scored.append((-score, not same_family, candidate))
    return [candidate for *_, candidate in sorted(scored)[:n]]


def unknown_id_message(env_id: str, available: Sequence[str], hint: str | None = None) -> str:
    """What to tell someone who asked for ``env_id``: for an id that exists but whose
    family this machine lacks, what to install first (``hint``); for an unknown one, the
    closest ids, where the rest are, and what their family lacks here."""
    count = f"(`{LIST_COMMAND}` prints all {len(available)})"
    if hint and env_id in available:  # a real id: other ids would fail the same way
        return f"{env_id} cannot be served on this machine: {hint} {count}"
    # Not itself: an id listed but not served here (its X program absent) is refused too.
    suggestions = closest_ids(env_id, [a for a in available if a != env_id])
    if len(suggestions) > 1:
        did_you_mean = f"; did you mean {', '.join(suggestions[:-1])} or {suggestions[-1]}?"
    else:
        did_you_mean = f"; did you mean {suggestions[0]}?" if suggestions else ""
    family = f"; its family {env_id.split('.', 1)[0]}.* cannot be served here: {hint}" if hint else ""
    return f"no such environment: {env_id!r}{did_you_mean} {count}{family}"


class RuntimeFailure(Exception):
    """Base class of the runtime errors."""


class UnknownEnvironment(RuntimeFailure, LookupError):
    """An env id no installed runtime serves; the message names the closest ids."""

    def __init__(self, env_id: str, available: Sequence[str], hint: str | None = None) -> None:
        self.env_id, self.available, self.hint = env_id, list(available), hint
        self.suggestions = closest_ids(env_id, self.available)
        super().__init__(unknown_id_message(env_id, self.available, hint))


class BadInput(RuntimeFailure, ValueError):
    """An input event this runtime cannot take; the message says what it accepts."""


class SnapshotUnsupported(RuntimeFailure, NotImplementedError):
    """This runtime cannot save or restore its state; the message says why."""


class BadSnapshot(RuntimeFailure, ValueError):
    """Snapshot bytes that are not a state of this runtime: the message names the field
    that was wrong and what it should have been."""
