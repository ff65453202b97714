"""Saved states of remotes, as an agent holds them (docs/snapshots.md).

Holds :class:`EnvState` (what ``env.unwrapped.clone_state()`` returns and
``restore_state`` takes, as ale-py's envs do), :func:`restore_args`, which picks the
token (same remote) or the exported bytes (any remote of the same env id) to restore
with, and :class:`AgentParts`: what the agent's side keeps that decides the next step
(an action wrapper's held keys), saved with every state and set back with it. The
remote's part is the remote's: the token names it in the remote's store; the bytes,
when exported, are the remote's own sealed format (never pickle), unchanged.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Protocol


class SnapshotPart(Protocol):
    """Agent-side state that decides what a step does (:class:`~remotes.wrappers.DiscreteKeys`'
    held keys), kept by an env's :class:`AgentParts`. ``snapshot_value`` raises ValueError
    when env ``index``'s value cannot travel now (the clone is refused, never made wrong);
    the value it returns must not change afterwards (it is kept in a state)."""

    snapshot_name: str

    def snapshot_value(self, index: int) -> Any: ...

    def restore_value(self, index: int, value: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class EnvState:
    """One remote's state: the ``token`` its remote keeps (bounded: the oldest are
    dropped), the exported ``data`` when asked for (``clone_state(export=True)``), and
    where it was taken (``remote``: the remote's name; ``episode_id``, ``frame``); and the
    agent's side of it: ``steps`` (of the episode, for the env's ``max_episode_steps``)
    and ``agent``, each :class:`SnapshotPart`'s (name, value) in the env's order."""

    remote: str
    env_id: str
    token: str
    episode_id: int
    frame: int
    data: bytes | None = None
    steps: int = 0
    agent: tuple[tuple[str, Any], ...] = ()

    def __repr__(self) -> str:
        size = "no bytes" if self.data is None else f"{len(self.data)} bytes"
        where = f"{self.remote}, episode {self.episode_id}, frame {self.frame}"
        kept = "".join(f", {name}={value!r}" for name, value in self.agent)
        return f"EnvState({self.env_id} on {where}, {size}{kept})"


def make_state(
    remote: str, env_id: str, reply: Any, steps: int = 0, agent: tuple[tuple[str, Any], ...] = (),
) -> EnvState:
    """An :class:`EnvState` of a :class:`~rewarder.snapshot_messages.SnapshotReply` and
    the agent's side (``steps``, ``agent``: :meth:`AgentParts.save`)."""
    return EnvState(remote, env_id, reply.token, reply.episode_id, reply.frame, reply.state, steps, agent)


def restore_args(state: EnvState, remote: str) -> tuple[str | None, bytes | None]:
    """What to send to ``remote`` to restore ``state``: its token on the remote that made
    it, else its bytes; ValueError when it has none to send there."""
    if not isinstance(state, EnvState):
        raise TypeError(f"restore_state takes what clone_state returned, not {type(state).__name__}")
    if state.remote == remote:
        return state.token, None
    if state.data is None:
        raise ValueError(
            f"this state was taken on {state.remote} and holds only its token; to restore it "
            f"on {remote}, take it with clone_state(export=True) (its bytes travel)"
        )
    return None, state.data


class AgentParts:
    """The :class:`SnapshotPart` s of one env (a wrapper adds itself with ``keep``):
    their values for env ``index`` saved into a state, and set back from one. Parts are
    held weakly: a wrapper dropped is no longer asked (nor kept alive by its env)."""

    def __init__(self) -> None:
        self._refs: list[weakref.ReferenceType[SnapshotPart]] = []

    @property
    def parts(self) -> list[SnapshotPart]:
        """The parts alive, in the order they were kept."""
        alive = [part for ref in self._refs if (part := ref()) is not None]
        if len(alive) != len(self._refs):
            self._refs = [ref for ref in self._refs if ref() is not None]
        return alive

    def keep(self, part: SnapshotPart) -> None:
        self._refs.append(weakref.ref(part))

    def save(self, index: int) -> tuple[tuple[str, Any], ...]:
        """Every part's value now (ValueError, from the part, if one cannot travel)."""
        return tuple((part.snapshot_name, part.snapshot_value(index)) for part in self.parts)

    def values(self, state: EnvState) -> list[tuple[SnapshotPart, Any]]:
        """Each part with its value in ``state`` (the n-th part of a name takes the n-th
        value of it); ValueError naming a part the state was taken without, before
        anything is restored. Values of parts this env lacks are left: they are other
        wrappers'."""
        given: dict[str, list[Any]] = {}
        for name, value in state.agent:
            given.setdefault(name, []).append(value)
        out = []
        for part in self.parts:
            kept = given.get(part.snapshot_name)
            if not kept:
                had = ", ".join(name for name, _ in state.agent) or "none"
                raise ValueError(
                    f"this state was taken without {part.snapshot_name} (it carries: {had}), "
                    f"which this env's {type(part).__name__} needs to replay it: restore states "
                    "of an env built the same way (gymnasium.make of the same id and wrappers)"
                )
            out.append((part, kept.pop(0)))
        return out

    @staticmethod
    def load(index: int, values: list[tuple[SnapshotPart, Any]]) -> None:
        """Set env ``index``'s parts to their ``values`` (of :meth:`values`), after the restore."""
        for part, value in values:
            part.restore_value(index, value)
