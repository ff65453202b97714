"""Saved states of remotes, as an agent holds them (docs/snapshots.md).

Holds :class:`EnvState` (what ``env.unwrapped.clone_state()`` returns and
``restore_state`` takes, as ale-py's envs do) and :func:`restore_args`, which picks the
token (same remote) or the exported bytes (any remote of the same env id) to restore
with. The state is the remote's: the token names it in the remote's store; the bytes,
when exported, are the remote's own sealed format (never pickle).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class EnvState:
    """One remote's state: the ``token`` its remote keeps (bounded: the oldest are
    dropped), the exported ``data`` when asked for (``clone_state(export=True)``), and
    where it was taken (``remote``: the remote's name; ``episode_id``, ``frame``)."""

    remote: str
    env_id: str
    token: str
    episode_id: int
    frame: int
    data: bytes | None = None

    def __repr__(self) -> str:
        size = "no bytes" if self.data is None else f"{len(self.data)} bytes"
        where = f"{self.remote}, episode {self.episode_id}, frame {self.frame}"
        return f"EnvState({self.env_id} on {where}, {size})"


def make_state(remote: str, env_id: str, reply: Any) -> EnvState:
    """An :class:`EnvState` of a :class:`~rewarder.snapshot_messages.SnapshotReply`."""
    return EnvState(remote, env_id, reply.token, reply.episode_id, reply.frame, reply.state)


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
