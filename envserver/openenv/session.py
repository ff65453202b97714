"""OpenEnv sessions against the remote: who drives, and what a reset, a step and a state are.

Each WebSocket is a :class:`Session`; the HTTP endpoints share one more (:attr:`Port.http`),
which holds the seat for a request at a time. A session that resets or steps becomes the
port's **agent** if nobody drives the remote — no other OpenEnv session, no rewarder
agent, no dm_env_rpc agent (:meth:`Port.take`) — and keeps the seat until it closes; any
other session's reset or step is refused with ``CAPACITY_REACHED`` naming who drives.
A session that resets with ``observe: true`` **watches**: its reset returns the screen
as it is, each step (``{}``) returns the first frame past the one it saw last (at once if
the remote has drawn one since; the end of a lockstep step, not its slices) with the
reward and end the frames in between brought.

**Lockstep**: a step advances exactly ``frameskip`` frames through the seats' barrier
(``Seats.step`` -> ``Remote.step``, the state machine and ``Runtime.advance`` the
rewarder and dm_env_rpc drive), and its reward and ``done`` are the remote's reply.
**Real time**: a step sends the action's input at once and returns the screen at the next
frame boundary at least ``frameskip`` frames after the session's last observation, with
the reward the frames in between earned; ``done`` is true when the episode ended in
between (with its last screen: the remote has already begun the next one, which the
step after goes on in).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import numpy as np

from rewarder.protocol import FRAME_INFO_KEY
from runtimes.base import StepResult

from .. import agent_port
from ..agent_port import STEP_TIMEOUT, Held, Ledger, RemoteLike
from ..orders import LOCKSTEP, REALTIME, ActOrder, Refused, ResetOrder, StepOrder
from ..state import State
from . import frames
from .protocol import Code, Refusal, ResetParams, parse_reset
from .schemas import ACTION_STRING_FIELD, ActionError, Spec

#: Seconds an observer's step waits for the next frame before it answers that the remote
#: is stalled (lockstep: the agent has not stepped); a real-time step waits STEP_TIMEOUT.
OBSERVE_TIMEOUT: Final = 30.0

#: What a MiniWoB observation reads of the page (runtimes.page_structure), and the keys
#: of its body the observation carries.
PAGE_PARTS: Final = frozenset({"tree", "elements"})
PAGE_KEYS: Final = ("axtree", "elements", "url", "focused", "truncated")

AGENT: Final = "agent"
OBSERVER: Final = "observer"
NO_ROLE: Final = "none"

class Port:
    """What every session of one remote's OpenEnv port shares: the remote, who drives it."""

    def __init__(self, remote: RemoteLike) -> None:
        self.remote = remote
        #: The session that drives the remote, if any.
        self.agent: Session | None = None
        #: The HTTP endpoints' session (``POST /reset``, ``POST /step``, ``GET /state``).
        self.http = Session(self, "the HTTP endpoints", holds_between_requests=False)

    def held_by(self) -> str | None:
        """Which OpenEnv session drives the remote (the other front ends refuse agents meanwhile)."""
        return f"an OpenEnv session ({self.agent.name})" if self.agent is not None else None

    def take(self, session: Session) -> None:
        """Seat ``session`` as the agent, or refuse naming who drives."""
        if self.agent is session:
            return
        remote = self.remote
        if remote.players > 1:
            raise Refusal(Code.CAPACITY_REACHED, (
                f"{remote.env_id} has {remote.players} players; OpenEnv sessions drive "
                "single-player envs (one agent per session): use the rewarder or dm_env_rpc, "
                "a player each (docs/multiagent.md); this session may watch: reset with "
                "observe=true"))
        holder = self.held_by() or remote.agent()
        if holder is not None:
            raise Refusal(Code.CAPACITY_REACHED, (
                f"{holder} drives this remote; one agent at a time: this session may watch "
                "(reset with observe=true) or try again once it has left"))
        self.agent = session

    def release(self, session: Session) -> None:
        """``session`` no longer drives: let go of what it held."""
        if self.agent is session:
            self.agent = None
            self.remote.client_left(observer=False)


class Session:
    """One OpenEnv session: its role, settings and episode; each method answers one message."""

    def __init__(self, port: Port, name: str, *, holds_between_requests: bool = True) -> None:
        self.port, self.name = port, name
        #: False for the HTTP endpoints: the seat is let go after every request.
        self.holds_between_requests = holds_between_requests
        self.role = NO_ROLE
        self.frameskip = 1
        self.screen_format = frames.DEFAULT_FORMAT
        self.label: str | None = None
        self.episode = 0
        self.step_count = 0
        self.last_frame = 0
        self.text: str | None = None
        self.held = Held()
        self.seen = Ledger()
        self._spec: Spec | None = None
        self._listening = False

    @property
    def remote(self) -> RemoteLike:
        return self.port.remote

    # Messages ---------------------------------------------------------------------------

    async def reset(self, data: dict[str, Any]) -> dict[str, Any]:
        params = parse_reset(data)
        self._settings(params)
        if params.observe:
            self.port.release(self)
            self._become(OBSERVER)
            self.episode, self.step_count = self.remote.episode_id, 0
            return await self._with_page(self._observation(None, False), None)
        self._drive()
        try:
            order = ResetOrder(env_id=params.env_id, seed=params.seed, mode=params.mode)
            try:
                episode = await agent_port.reset(self.remote, order)
            except Refused as exc:
                raise Refusal(Code.EXECUTION_ERROR, exc.reason) from None
            except ValueError as exc:  # a seat check of the barrier
                raise Refusal(Code.EXECUTION_ERROR, str(exc)) from None
            self.held, self._spec = Held(), None
            self.seen.clear()
            self.episode, self.step_count, self.label = episode, 0, params.label
            return await self._with_page(self._observation(None, False), None)
        finally:
            self._request_done()

    async def step(self, data: dict[str, Any]) -> dict[str, Any]:
        if self.role == OBSERVER:
            return await self._watch(data)
        self._drive()
        try:
            if self.episode != self.remote.episode_id and self.step_count == 0:
                self.episode = self.remote.episode_id  # stepping without a reset: goes on
            spec = self._current_spec()
            try:
                events, held = spec.parse(data, self.held)
            except ActionError as exc:
                raise Refusal(Code.VALIDATION_ERROR, str(exc)) from None
            web = data.get(ACTION_STRING_FIELD) if spec.family == "miniwob" else None
            if self.remote.mode == LOCKSTEP:
                out, error = await self._step_lockstep(events, web)
            else:
                out, error = await self._step_realtime(events, web)
            self.held = held
            self.step_count += 1
            return await self._with_page(out, error)
        finally:
            self._request_done()

    def state(self) -> dict[str, Any]:
        remote = self.remote
        describe = remote.describe()
        return {
            "episode_id": str(remote.episode_id), "episode_label": self.label,
            "step_count": self.step_count, "env_id": remote.env_id, "mode": remote.mode,
            "remote_state": describe.get("remote_state"), "frame": remote.frame,
            "fps": remote.fps, "frameskip": self.frameskip, "screen_format": self.screen_format,
            "role": self.role, "held_by": self.port.held_by() or remote.agent(),
        }

    def close(self) -> None:
        """The session ended: let go of the seat (and what it held) and stop listening."""
        self.port.release(self)
        self.role = NO_ROLE
        if self._listening:
            self._listening = False
            self.remote.result_sinks.remove(self._on_result)
            self.remote.episode_sinks.remove(self._on_episode)

    # Steps -------------------------------------------------------------------------------

    async def _with_page(self, out: dict[str, Any], error: str | None) -> dict[str, Any]:
        """A MiniWoB observation gets the page: its tree (an LLM agent's view), its
        elements (bids, roles, names, values, boxes: a scripted or set-of-marks agent's),
        its URL, and what the last action string could not do. Read after the reset or
        step: the runtime numbers bids afresh at every episode, as every port sees them."""
        if self._current_spec().family == "miniwob":
            page = (await self.remote.page(PAGE_PARTS)).get("page", {})
            observation = out["observation"]
            for key in PAGE_KEYS:
                observation[key] = page.get(key)
            observation["last_action_error"] = error
        return out

    async def _step_lockstep(
        self, events: list[Any], web: str | None
    ) -> tuple[dict[str, Any], str | None]:
        order = StepOrder(
            events=tuple(events), frames=self.frameskip, web=web, episode_id=self.episode
        )
        try:
            _, body = await agent_port.step(self.remote, order)
        except Refused as exc:
            raise Refusal(Code.EXECUTION_ERROR, _reworded(exc.reason)) from None
        self.seen.pop(self.episode)  # the reply says it all
        info = {k: v for k, v in body["info"].items() if k != FRAME_INFO_KEY}
        error = info.get("web.last_action_error")
        return self._observation(float(body["reward"]), bool(body["done"]), info=info), error

    async def _step_realtime(
        self, events: list[Any], web: str | None
    ) -> tuple[dict[str, Any], str | None]:
        remote = self.remote
        if events:
            try:
                remote.action(ActOrder(events=tuple(events)))
            except Refused as exc:
                raise Refusal(Code.VALIDATION_ERROR, exc.reason) from None
        error = None
        if web is not None:  # run it, and wait until the page is still again
            done = await remote.act(ActOrder(web=web, settle=True))
            error = done.get("last_action_error")
        after = max(remote.frame, self.last_frame + self.frameskip - 1)
        return await self._next(after, STEP_TIMEOUT, "the remote is stalled"), error

    async def _watch(self, data: dict[str, Any]) -> dict[str, Any]:
        if set(data) - {"metadata"}:
            raise Refusal(Code.VALIDATION_ERROR, (
                "this session watches (it reset with observe=true): its steps send nothing "
                "({} waits for the next frame); reset without observe to drive"))
        self.step_count += 1
        out = await self._next(self.last_frame, OBSERVE_TIMEOUT, "no frame came (in lockstep "
                               "the remote waits for its agent's step)")
        return await self._with_page(out, None)

    async def _next(self, after: int, timeout: float, why: str) -> dict[str, Any]:
        """The first frame past ``after``, with what the frames since the last observation
        brought (an episode that ended: its last screen, ``done``)."""
        remote = self.remote
        try:
            async with asyncio.timeout(timeout):
                await remote.wait_frame(after)
                while remote.state is State.STEPPING:  # a lockstep step draws in slices
                    await remote.wait_frame()
        except TimeoutError:
            raise Refusal(Code.EXECUTION_ERROR, f"no frame within {timeout:g} s: {why}") from None
        seen = self.seen.pop(self.episode)
        if seen.done:
            out = self._observation(seen.reward, True, seen.final_screen, seen.info)
            self.episode = remote.episode_id  # the remote has begun the next one
            return out
        if self.episode != remote.episode_id:  # someone else began a new one meanwhile
            self.episode = remote.episode_id
        return self._observation(seen.reward, False, info=seen.info)

    # Observations ------------------------------------------------------------------------

    def _observation(self, reward: float | None, done: bool, screen: np.ndarray | None = None,
                     info: dict[str, Any] | None = None) -> dict[str, Any]:
        remote = self.remote
        spec = self._current_spec()
        self.last_frame = remote.frame
        observation: dict[str, Any] = {
            "screen": frames.encode(remote.screen() if screen is None else screen, self.screen_format),
            "screen_shape": list(spec.shape), "screen_format": self.screen_format,
            "screen_dtype": "uint8", "episode_id": self.episode, "frame": remote.frame,
            "text": self.text,
        }
        if spec.action_keys:
            observation["legal_actions"] = list(range(len(spec.action_keys)))
            lives = (info or {}).get("lives")
            observation["lives"] = int(lives if lives is not None else remote.describe().get("lives", 0))
        out: dict[str, Any] = {"observation": observation, "reward": reward, "done": done}
        if info:
            out["metadata"] = info
        return out

    # Seats and sinks ---------------------------------------------------------------------

    def _settings(self, params: ResetParams) -> None:
        if params.frameskip is not None:
            self.frameskip = params.frameskip
        if params.screen is not None:
            self.screen_format = params.screen

    def _drive(self) -> None:
        """Take the seat (or be refused); an OpenEnv agent drives player 0."""
        self.port.take(self)
        self._become(AGENT)

    def _request_done(self) -> None:
        if not self.holds_between_requests:
            self.port.release(self)
            self.held, self.role = Held(), NO_ROLE

    def _become(self, role: str) -> None:
        self.role = role
        if not self._listening:
            self._listening = True
            self.remote.result_sinks.append(self._on_result)
            self.remote.episode_sinks.append(self._on_episode)

    def _on_result(self, episode_id: int, result: StepResult) -> None:
        """The remote's result sink: every advance, in either mode, as it happens."""
        if result.text is not None:
            self.text = result.text
        if not (result.reward or result.done or "lives" in result.info):
            return
        lives = {"lives": result.info["lives"]} if "lives" in result.info else None
        realtime = self.remote.mode == REALTIME  # the remote draws the next episode next
        self.seen.heard(episode_id, result.reward, result.done,
                        self.remote.screen if realtime else None, lives)

    def _on_episode(self, episode_id: int, seed: int, text: str | None) -> None:
        self.text = text

    def _current_spec(self) -> Spec:
        spec = self._spec
        if spec is None or spec.env_id != self.remote.env_id:
            spec = self._spec = Spec.of(self.remote.describe())
        return spec


def _reworded(message: str) -> str:
    """The remote's refusal in OpenEnv's words (it names the rewarder's messages)."""
    return message.replace("send v0.env.reset", "reset").replace("v0.env.", "")
