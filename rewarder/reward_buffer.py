"""The client's per-episode reward buffer, sans I/O: Universe's episode-id bookkeeping.

Holds :class:`RewardBuffer`, the :class:`EpisodeResult` it hands out, :class:`BufferStats`
(its diagnostic counters), :func:`merge_info` (how ``info`` dicts add up) and the info
keys it writes (:data:`ARTIFICIAL_DONE`, :data:`DISCONNECTED`).

The rewarder server pushes ``describe``/``reward``/``text``/``observation`` messages at
its own pace, each tagged with the episode it belongs to; the agent pops once per step.
The buffer sits between the two:

- :meth:`RewardBuffer.file` takes every server event that carries an episode id and adds
  it to that episode's state (or drops it as stale);
- :meth:`RewardBuffer.reset` is called when ``v0.reply.env.reset`` names a new episode;
- :meth:`RewardBuffer.pop` / :meth:`RewardBuffer.peek` give the agent the *current*
  episode's aggregates.

Rules (UNIVERSE-NOTES §1, "Episode-id synchronisation"):

1. **Per episode.** Each episode has its own state: reward summed, reward messages
   counted, ``done`` OR-ed, ``info`` merged (:func:`merge_info`), text appended, the
   last JSON observation kept, ``env_state`` taken from ``describe``.
2. **Masked until reset.** Before the first :meth:`~RewardBuffer.reset` there is no
   current episode and :meth:`~RewardBuffer.pop` returns :data:`EMPTY` (``episode_id``
   None, reward 0, not done). Data that arrives meanwhile is kept for the newest episode
   only, so the describe/rewards a server sends just before its reset reply are not
   lost. A buffer made with ``follow=True`` (an observer, which never resets) instead
   adopts the first episode it hears of.
3. **Reset.** ``reset(E)`` makes E current and forgets every other episode.
4. **Stale data is dropped.** Data for an episode older than the current one is
   counted in :attr:`BufferStats.stale_messages` and ignored.
5. **Artificial done.** Data for a *newer* episode while the current one is not done
   means the server moved on (it auto-resets after done, or another reset happened):
   the current episode is marked done with ``info["env_status.artificial.done"] = True``.
6. **Pop advances.** ``pop()`` returns what the current episode gathered since the last
   pop and consumes it. When that episode is done, the buffer moves to the newest
   episode it knows (episodes in between, never current, are dropped and counted in
   :attr:`BufferStats.skipped_episodes`), or, knowing none, adopts the next episode to
   arrive: the server's auto-reset, as in Universe.
7. **Disconnect.** :meth:`~RewardBuffer.disconnected` ends the current episode (done,
   ``env_status.disconnected``); the next pop returns it, after which the buffer is
   masked again until a reset (or, with ``follow``, until the next episode arrives).

Per pop, ``reward``, ``count``, ``info`` and ``text`` are increments since the last pop;
``done``, ``observation`` and ``env_state`` are the episode's state.

Everything here is plain Python with no I/O: one dict lookup and a few attribute
updates per message on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .protocol import Describe, Observation, Reward, Text

#: ``info`` key set on an episode that ended because a newer one started (or the
#: connection dropped) without the server ever saying ``done`` for it.
ARTIFICIAL_DONE: Final = "env_status.artificial.done"
#: ``info`` key set on the episode that was current when the connection dropped.
DISCONNECTED: Final = "env_status.disconnected"
#: A pop that gathers more reward messages than this means the agent steps slower than
#: the remote rewards (60 = one second of rewards at 60 fps); counted, as Universe warned.
MAX_REWARDS_PER_POP: Final = 60

#: Info keys under this prefix are counters: numeric values add up across messages ...
_STATS_PREFIX: Final = "stats."
#: ... except gauges, which are measurements: the latest value wins.
_GAUGES_PREFIX: Final = "stats.gauges."

EpisodeEvent = Describe | Reward | Text | Observation


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def merge_info(into: dict[str, Any], info: Mapping[Any, Any], prefix: str = "") -> None:
    """Merge one message's ``info`` into an episode's, in place.

    Keys are Universe's dotted flat strings (``"stats.reward.count"``). A nested dict is
    flattened into the same dotted keys (``{"stats": {"reward": {"count": 1}}}`` is
    ``"stats.reward.count"``), so a server may use either form and the result is always
    flat; an empty nested dict adds nothing. Then, per key:

    - ``stats.gauges.*``: overwritten (a gauge is the latest measurement);
    - other ``stats.*`` with a numeric value: added to the previous value when that is
      numeric too (counters such as bytes or updates since the last pop);
    - everything else: overwritten.
    """
    for key, value in info.items():
        if prefix:
            key = f"{prefix}{key}"
        elif type(key) is not str:
            key = str(key)
        if type(value) is dict:
            if value:
                merge_info(into, value, f"{key}.")
            continue
        if (
            key.startswith(_STATS_PREFIX)
            and not key.startswith(_GAUGES_PREFIX)
            and _is_number(value)
        ):
            old = into.get(key)
            if old is not None and _is_number(old):
                value = old + value
        into[key] = value


@dataclass(frozen=True, slots=True)
class EpisodeResult:
    """What one :meth:`RewardBuffer.pop` (or peek) saw of one episode.

    ``episode_id`` is None while the buffer is masked (before the first reset); then
    every other field is empty. ``reward``, ``count``, ``info`` and ``text`` cover the
    messages since the previous pop; ``done``, ``observation`` and ``env_state`` are the
    episode's state. ``info`` is a fresh dict the caller may keep and change.
    """

    episode_id: int | None
    reward: float = 0.0
    #: Reward messages summed into ``reward``.
    count: int = 0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    text: tuple[str, ...] = ()
    #: The last ``v0.env.observation`` of the episode (None if it sent none).
    observation: Any = None
    #: ``"resetting"`` or ``"running"`` from the last describe of this episode, if any.
    env_state: str | None = None

    @property
    def masked(self) -> bool:
        """True before the first reset: there is no current episode to report."""
        return self.episode_id is None


#: Equal to what pop/peek return while masked (they return a fresh copy each time).
EMPTY: Final = EpisodeResult(None)


@dataclass(slots=True)
class BufferStats:
    """Diagnostic counters of one :class:`RewardBuffer` (they only grow)."""

    #: Messages filed into some episode.
    filed: int = 0
    #: Messages dropped because their episode was older than the current one.
    stale_messages: int = 0
    #: Episodes forgotten before the agent popped their end (a reset past them, pop
    #: jumping to the newest episode, or data superseded while masked).
    skipped_episodes: int = 0
    #: Episodes ended by :data:`ARTIFICIAL_DONE` (including disconnects).
    artificial_dones: int = 0
    #: Pops that gathered more than :data:`MAX_REWARDS_PER_POP` reward messages.
    backlogged_pops: int = 0


@dataclass(slots=True)
class _Episode:
    """The mutable state of one episode inside the buffer."""

    reward: float = 0.0
    count: int = 0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    text: list[str] = field(default_factory=list)
    observation: Any = None
    env_state: str | None = None


def _apply_reward(state: _Episode, event: Reward) -> None:
    state.reward += event.reward
    state.count += 1
    if event.done:
        state.done = True
    if event.info:
        merge_info(state.info, event.info)


def _apply_describe(state: _Episode, event: Describe) -> None:
    state.env_state = event.env_state


def _apply_text(state: _Episode, event: Text) -> None:
    state.text.append(event.text)


def _apply_observation(state: _Episode, event: Observation) -> None:
    state.observation = event.observation


_APPLY: Final[dict[type, Callable[[Any, Any], None]]] = {
    Reward: _apply_reward,
    Describe: _apply_describe,
    Text: _apply_text,
    Observation: _apply_observation,
}


class RewardBuffer:
    """Files server events by episode id and hands the agent the current episode.

    Call :meth:`file` with every :class:`~.protocol.Describe`, :class:`~.protocol.Reward`,
    :class:`~.protocol.Text` and :class:`~.protocol.Observation`; :meth:`reset` with the
    episode id of each ``v0.reply.env.reset``; :meth:`pop` once per agent step;
    :meth:`disconnected` when the connection drops. The module docstring has the rules.

    ``follow=True`` (for observers, which never reset) adopts episodes without a reset.
    """

    def __init__(self, *, follow: bool = False) -> None:
        self.follow = follow
        self.stats = BufferStats()
        #: The current episode and its state (both None while masked or between a done
        #: episode and the next one).
        self._current: int | None = None
        self._state: _Episode | None = None
        #: Episodes other than the current one that have data: newer ones while a
        #: current exists, at most one (the newest) while masked.
        self._others: dict[int, _Episode] = {}
        #: Episodes below this are stale (None: nothing is stale yet).
        self._floor: int | None = None
        #: Whether an episode with no current one becomes current on its first message.
        self._adopt = follow
        #: An episode ended by a disconnect, waiting to be popped.
        self._final: tuple[int, _Episode] | None = None
        self._newest: int | None = None

    # State --------------------------------------------------------------------------------

    @property
    def episode_id(self) -> int | None:
        """The episode pop() reports on, or None (masked, or waiting for the next one)."""
        if self._final is not None:
            return self._final[0]
        return self._current

    @property
    def newest_episode_id(self) -> int | None:
        """The highest episode id ever filed or reset to (it survives disconnects).

        Send it as the ``episode_id`` header of a reset: the server moves past it, so
        ids keep increasing even across a restarted server.
        """
        return self._newest

    @property
    def masked(self) -> bool:
        """True when pop() has nothing to report until a reset (or, following, data)."""
        return self._final is None and self._current is None and not self._adopt

    # Input --------------------------------------------------------------------------------

    def file(self, event: EpisodeEvent) -> bool:
        """Add one server event to its episode; False if it was dropped as stale."""
        episode_id = event.episode_id
        if episode_id == self._current:
            state = self._state
        else:
            state = self._episode_for(episode_id)
            if state is None:
                self.stats.stale_messages += 1
                return False
        self.stats.filed += 1
        _APPLY[type(event)](state, event)
        return True

    def _episode_for(self, episode_id: int) -> _Episode | None:
        """The state to file data for a non-current episode into (None: stale)."""
        floor = self._floor
        if floor is not None and episode_id < floor:
            return None
        if self._newest is None or episode_id > self._newest:
            self._newest = episode_id
        current = self._current
        if current is not None:
            if episode_id < current:
                return None
            state = self._state
            assert state is not None
            if not state.done:  # the server moved on without saying done
                state.done = True
                state.info[ARTIFICIAL_DONE] = True
                self.stats.artificial_dones += 1
            newer = self._others.get(episode_id)
            if newer is None:
                newer = self._others[episode_id] = _Episode()
            return newer
        if self._adopt:
            self._forget_others()
            self._become_current(episode_id, _Episode())
            return self._state
        # Masked: keep only the newest episode, the one a reset reply will name.
        pending = self._others.get(episode_id)
        if pending is None:
            if self._others and episode_id < max(self._others):
                return None
            self._forget_others()
            pending = self._others[episode_id] = _Episode()
        return pending

    def reset(self, episode_id: int) -> None:
        """The server started ``episode_id`` for us: make it current, forget the rest."""
        if self._newest is None or episode_id > self._newest:
            self._newest = episode_id
        state = self._others.pop(episode_id, None)
        if self._state is not None and self._current == episode_id:
            state = self._state
        self._forget_others()
        if self._current is not None and self._current != episode_id:
            self.stats.skipped_episodes += 1
        if self._final is not None:
            self.stats.skipped_episodes += 1
            self._final = None
        self._become_current(episode_id, state if state is not None else _Episode())

    def disconnected(self) -> None:
        """The connection dropped: end the current episode and mask until a reset.

        The current episode (if any) is marked done (:data:`ARTIFICIAL_DONE` and
        :data:`DISCONNECTED` unless the server had said done) and kept for the next pop.
        Nothing is stale afterwards: a restarted server may count from 0 again.
        """
        current, state = self._current, self._state
        if current is not None and state is not None:
            if not state.done:
                state.done = True
                state.info[ARTIFICIAL_DONE] = True
                state.info[DISCONNECTED] = True
                self.stats.artificial_dones += 1
            self._final = (current, state)
        self._forget_others()
        self._current = self._state = None
        self._floor = None
        self._adopt = self.follow

    # Output -------------------------------------------------------------------------------

    def pop(self) -> EpisodeResult:
        """The current episode's aggregates since the last pop, consumed.

        Returns :data:`EMPTY` while masked. When the returned result is done, the buffer
        has moved on to the newest episode it knows of (or will adopt the next one).
        """
        if self._final is not None:
            final_id, final = self._final
            self._final = None
            return self._result(final_id, final, final.info)
        current, state = self._current, self._state
        if current is None or state is None:
            return EpisodeResult(None)
        info = state.info
        result = self._result(current, state, info)
        if state.count > MAX_REWARDS_PER_POP:
            self.stats.backlogged_pops += 1
        if state.done:
            self._advance(current)
        else:
            state.reward = 0.0
            state.count = 0
            state.info = {}
            if state.text:
                state.text = []
        return result

    def quiet(self) -> bool:
        """Whether :meth:`pop` would report nothing new and change nothing: no rewards,
        texts or info since the last pop, no episode ended. A cheap look for a caller
        that pops every step (a lockstep step, whose rewards come in its reply) and so
        need not build a result when nothing came."""
        if self._final is not None:
            return False
        state = self._state
        return state is None or not (state.count or state.text or state.info or state.done)

    def peek(self) -> EpisodeResult:
        """What :meth:`pop` would return now, consuming nothing."""
        if self._final is not None:
            episode_id, state = self._final
        elif self._current is not None and self._state is not None:
            episode_id, state = self._current, self._state
        else:
            return EpisodeResult(None)
        return self._result(episode_id, state, dict(state.info))

    # Internals ----------------------------------------------------------------------------

    @staticmethod
    def _result(episode_id: int, state: _Episode, info: dict[str, Any]) -> EpisodeResult:
        return EpisodeResult(
            episode_id,
            state.reward,
            state.count,
            state.done,
            info,
            tuple(state.text),
            state.observation,
            state.env_state,
        )

    def _become_current(self, episode_id: int, state: _Episode) -> None:
        self._current, self._state = episode_id, state
        self._floor = episode_id
        self._adopt = True  # after this episode ends, follow the server's auto-reset

    def _advance(self, done_id: int) -> None:
        """Leave the done episode ``done_id`` for the newest one known, or the next."""
        if self._others:
            newest = max(self._others)
            state = self._others.pop(newest)
            self._forget_others()
            self._become_current(newest, state)
        else:
            self._current = self._state = None
            self._floor = done_id + 1

    def _forget_others(self) -> None:
        if self._others:
            self.stats.skipped_episodes += len(self._others)
            self._others.clear()
