"""The agent's side of a browser remote's web interface: page observations, BrowserGym
action strings, and steps that end when the screen settles (docs/browser.md, "From
gymnasium"; the wire is docs/rewarder.md's ``observe`` property, ``v0.env.observation``
and action strings).

Holds :class:`WebSteps`, the part of :class:`~remotes.stepper.Stepper` that an env with
``observations=("screen", "page")``, ``actions="web"`` or ``step_mode="settle"`` uses
(:attr:`~remotes.options.EnvOptions.web`); :class:`PageTap`, which hears every
``v0.env.observation`` one rewarder channel brings; :class:`AnyText`, gymnasium's ``Text``
for any Unicode string; and :func:`dict_observation`, the ``Dict`` observation an env
returns.

- **Subscribing.** Before each explicit reset (and after a reconnection) the env writes
  the remote's ``observe`` property (``"elements,tree"``): the remote then sends the new
  episode's page with the reset, a page whenever its screen changes (real time, at most
  every 0.1 s), after every lockstep step, and with every action's answer. A reset that
  switched the remote to another env id is done again once the new env observes: the
  subscription was the old runtime's, and its first page is wanted with its first frame.
- **Action strings.** Real time: ``v0.agent.action {"action": "click('a12')"}``; the
  step waits for the ``v0.env.observation`` whose ``action_id`` is that message's id (the
  action has run: its ``last_action_error``, the page after it, the ``frame`` it shows)
  and returns that frame, or a later one. Lockstep: ``v0.env.step`` with the string.
  A string the remote would refuse as a request (too long, not UTF-8) is not sent: the
  step is a no-op whose ``info["last_action_error"]`` says why.
- **Settling.** ``step_mode="settle"`` sends every action (events, a string, or nothing)
  with ``settle: true``: the remote answers once its screen has settled (the page idle,
  or still for its quiet time: docs/browser.md), with ``settle`` =
  ``{react_s, settled_s, deadline_hit, by}``.

The rewarder's clients give what this needs as public calls: an action string with
``settle`` (``RewarderClient.send_answered_action``, ``BlockingRewarder.send_step``), the
answer by ``action_id``, property writes, and an observation listener
(``on_observation``, which :class:`PageTap` is).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import orjson
from gymnasium import spaces

from rewarder import protocol
from rewarder.blocking import BlockingRewarder
from rewarder.client import RewarderClient
from rewarder.errors import ConnectionClosed, RemoteError
from rewarder.protocol import Observation

from .options import PAGE, SETTLE_STEPS, WEB_ACTIONS, EnvOptions

if TYPE_CHECKING:
    from .lane import Lane
    from .slot import FrameGate, Slot

#: Characters of one action string: what the remote's parser takes (longer ones are
#: refused before they are sent).
MAX_ACTION_CHARS: Final = protocol.MAX_ACTION_STRING_CHARS
#: Characters of the ``Dict`` observation's strings (instruction, tree, url): a remote's
#: whole page observation is at most ``MAX_OBSERVATION_BYTES`` (512 KiB), so none of its
#: strings is longer; a longer instruction is cut.
MAX_PAGE_CHARS: Final = 512 * 1024
#: What the env asks a remote to observe (its ``observe`` property).
OBSERVE: Final = "elements,tree"
#: Seconds an action's answer may take: the remote's settle deadline (10 s) on top of the
#: action itself (``noop`` waits up to 10 s, typing 2,000 characters takes seconds), with
#: room for a loaded machine.
ANSWER_TIMEOUT: Final = 30.0
#: Seconds a step waits for the frame an answer names to come over VNC (it was drawn
#: before the answer was sent, so it is normally in already).
FRAME_WAIT: Final = 1.0
#: Seconds a real-time reset waits for its episode's page after the first frame (the
#: remote sends it before that frame, on the other channel).
RESET_PAGE_TIMEOUT: Final = 5.0
#: Seconds a property write may take.
PROPERTY_TIMEOUT: Final = 10.0
#: Episodes whose newest page a tap keeps (the step that ends one may still name it).
MAX_PAGE_EPISODES: Final = 4
#: Env families whose remotes have a page (observations, action strings), and those that
#: can tell when their screen settles.
PAGE_FAMILIES: Final = ("miniwob",)
SETTLING_FAMILIES: Final = ("miniwob", "x11")
#: Lockstep: seconds a step's reply may take past ``stall_timeout`` per character of its
#: action string: a step runs its string before replying, and typing is its slow part
#: (0.6 ms a character on a quiet machine here, 3.4 ms at load 20: four 2,000-character
#: ``keyboard_type`` calls were a 5 s step, and 27 s); 10 ms a character allows for a
#: loaded one, so a step still typing is not taken for a stalled remote.
WORK_SECONDS_PER_CHAR: Final = 0.01
#: Printable ASCII: what :class:`AnyText` samples from.
SAMPLE_CHARSET: Final = frozenset(chr(c) for c in range(32, 127))


class AnyText(spaces.Text):
    """gymnasium's ``Text`` for any Unicode string of ``min_length``..``max_length``
    characters (``Text`` takes only its charset: a page's tree has quotes, tabs, newlines
    and any script). Samples printable ASCII."""

    def __init__(self, max_length: int, *, min_length: int = 0, seed: Any = None) -> None:
        super().__init__(max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText({self.min_length}, {self.max_length})"


def observation_space(screen: spaces.Box) -> spaces.Dict:
    """The ``Dict`` observation of ``observations=("screen", "page")``: the frame, the
    task's instruction, the page's text tree (BrowserGym's flattened style) and URL. The
    page's elements (a list of dicts, which no gymnasium space describes well) are in
    ``info["page"]``."""
    return spaces.Dict({
        "screen": screen,
        "instruction": AnyText(MAX_PAGE_CHARS),
        "tree": AnyText(MAX_PAGE_CHARS),
        "url": AnyText(MAX_PAGE_CHARS),
    })


def dict_observation(screen: np.ndarray, info: dict[str, Any]) -> dict[str, Any]:
    """A step's ``Dict`` observation from its frame and info (the env's)."""
    page = info.get("page") or {}
    return {
        "screen": screen,
        "instruction": str(info.get("instruction") or "")[:MAX_PAGE_CHARS],
        "tree": str(page.get("axtree") or "")[:MAX_PAGE_CHARS],
        "url": str(page.get("url") or "")[:MAX_PAGE_CHARS],
    }


def check_served(env_id: str | None, options: EnvOptions) -> None:
    """Refuse (ValueError) web settings the environment ``env_id`` cannot serve."""
    if env_id is None or not options.web:
        return
    family = env_id.split(".", 1)[0]
    if (PAGE in options.observations or options.actions == WEB_ACTIONS) and family not in PAGE_FAMILIES:
        raise ValueError(
            f"{env_id} has no page: observations=('screen', 'page') and actions='web' are for "
            f"browser remotes ({', '.join(f + '.*' for f in PAGE_FAMILIES)})"
        )
    if options.step_mode == SETTLE_STEPS and family not in SETTLING_FAMILIES:
        raise ValueError(
            f"{env_id} cannot tell when its screen settles: step_mode='settle' is for "
            f"{', '.join(f + '.*' for f in SETTLING_FAMILIES)} remotes"
        )


def work_seconds(action: Any) -> float:
    """Seconds a lockstep step of ``action`` may take beyond ``stall_timeout`` (its action
    string's work: :data:`WORK_SECONDS_PER_CHAR`); 0 for events."""
    return len(action) * WORK_SECONDS_PER_CHAR if isinstance(action, str) else 0.0


def refusal(action: str) -> str | None:
    """Why an action string cannot be sent as it is, or None (the remote's parser judges
    the rest and answers with ``last_action_error``)."""
    if len(action) > MAX_ACTION_CHARS:
        return (f"the action is {len(action)} characters; at most {MAX_ACTION_CHARS} "
                "(MAX_ACTION_CHARS): send one short call, e.g. click('a12')")
    try:
        action.encode()
    except UnicodeEncodeError as exc:
        return f"the action is not valid Unicode text ({exc.reason} at character {exc.start})"
    return None


# Hearing observations -----------------------------------------------------------------


class PageTap:
    """Every ``v0.env.observation`` one session's rewarder channel brings (its
    ``on_observation`` listener): the newest page of each episode. It runs where the
    channel files messages (the loop thread for the real-time client, whoever reads the
    blocking one)."""

    def __init__(self) -> None:
        self.client: RewarderClient | BlockingRewarder | None = None
        #: Episode -> the newest observation body that carried a ``page``.
        self.pages: dict[int, dict[str, Any]] = {}
        self._episode_waiters: list[tuple[int, asyncio.Future[None]]] = []

    def attach(self, client: RewarderClient | BlockingRewarder) -> bool:
        """Hear ``client`` (the session's channel now); True if it is a new one."""
        if client is self.client:
            return False
        client.on_observation = self._heard
        self.client = client
        self.pages.clear()
        return True

    def page_of(self, episode: Any) -> dict[str, Any] | None:
        return self.pages.get(episode) if isinstance(episode, int) else None

    async def wait_page(self, episode: int, timeout: float) -> None:
        """Wait until a page of ``episode`` (or a later one) came, or ``timeout``."""
        if any(e >= episode for e in self.pages):
            return
        future = asyncio.get_running_loop().create_future()
        waiter = (episode, future)
        self._episode_waiters.append(waiter)
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            pass
        finally:
            if waiter in self._episode_waiters:
                self._episode_waiters.remove(waiter)

    def _heard(self, event: Observation) -> None:
        body = event.observation
        if not isinstance(body, dict) or PAGE not in body:
            return
        self.pages[event.episode_id] = body
        while len(self.pages) > MAX_PAGE_EPISODES:
            del self.pages[min(self.pages)]
        for episode, waiter in self._episode_waiters:
            if event.episode_id >= episode and not waiter.done():
                waiter.set_result(None)


async def write_observe(rewarder: RewarderClient, value: str = OBSERVE) -> None:
    """Write the remote's ``observe`` property (the active agent's to write)."""
    await rewarder.properties("write", "observe", value, timeout=PROPERTY_TIMEOUT)


# Steps -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Answer:
    """One slot's action of this step and what became of it."""

    #: The action string ("" for events or none).
    text: str
    future: asyncio.Future[dict[str, Any]] | None = None
    message_id: Any = None
    #: The answer's observation body.
    body: dict[str, Any] | None = None
    #: Why there is no answer (refused before sending, by the remote, or none came).
    error: str | None = None


class WebSteps:
    """The web side of :class:`~remotes.stepper.Stepper`'s resets and steps."""

    def __init__(self, lane: Lane) -> None:
        options = lane.options
        self.page = PAGE in options.observations
        self.strings = options.actions == WEB_ACTIONS
        self.settle = options.step_mode == SETTLE_STEPS
        self.taps = [PageTap() for _ in lane.slots]
        #: This step's action of each slot that sent one the web way, by slot index.
        self.answers: dict[int, Answer] = {}
        #: The env each slot's remote served before the reset under way.
        self._serving: dict[int, Any] = {}

    # Resets ------------------------------------------------------------------------------

    async def before_reset(self, slot: Slot, explicit: bool) -> None:
        """Real time: hear the slot's channel; subscribe to pages (at an explicit reset,
        and on a new connection), so the reset brings the new episode's page."""
        rewarder = slot.session.realtime_channel
        if rewarder is not None and self._subscribe(slot, rewarder, explicit):
            await write_observe(rewarder)

    def before_reset_here(self, slot: Slot, explicit: bool) -> None:
        """:meth:`before_reset` of a lockstep slot, in the caller's thread."""
        rewarder = slot.session.lockstep_channel
        if rewarder is not None and self._subscribe(slot, rewarder, explicit):
            rewarder.write_property("observe", OBSERVE, PROPERTY_TIMEOUT)

    def _subscribe(self, slot: Slot, rewarder: RewarderClient | BlockingRewarder, explicit: bool) -> bool:
        fresh = self.taps[slot.index].attach(rewarder)
        self._serving[slot.index] = slot.session.describe_body().get("env_id")
        return self.page and (explicit or fresh)

    async def after_reset(self, slot: Slot, episode: int | None) -> bool:
        """Real time, after a reset: True when it must be done again — it switched the
        remote to another env, whose page nobody had asked for yet (the subscription was
        the old env's): it is asked for now. Otherwise, when the page is not in yet, wait
        for it briefly (an autoreset's travels on the rewarder while its first frame
        travels over VNC; a reset's comes before its reply)."""
        rewarder = slot.session.realtime_channel
        if rewarder is None or not self._switched(slot, episode):
            return False
        if slot.session.describe_body().get("env_id") != self._serving.get(slot.index):
            await write_observe(rewarder)
            return True
        assert episode is not None
        await self.taps[slot.index].wait_page(episode, RESET_PAGE_TIMEOUT)
        return False

    def after_reset_here(self, slot: Slot, episode: int | None) -> bool:
        """:meth:`after_reset` of a lockstep slot, in the caller's thread (a lockstep
        reset's page comes before its reply: nothing to wait for)."""
        rewarder = slot.session.lockstep_channel
        if rewarder is None or not self._switched(slot, episode):
            return False
        if slot.session.describe_body().get("env_id") != self._serving.get(slot.index):
            rewarder.write_property("observe", OBSERVE, PROPERTY_TIMEOUT)
            return True
        return False

    def _switched(self, slot: Slot, episode: int | None) -> bool:
        """Whether the page of ``episode`` is wanted and not in."""
        return self.page and episode is not None and self.taps[slot.index].page_of(episode) is None

    # Steps -------------------------------------------------------------------------------

    def answered(self, action: Any) -> bool:
        """Whether a real-time step of ``action`` waits for the remote's answer."""
        return self.settle or (isinstance(action, str) and action != "")

    async def send(self, slot: Slot, action: Any) -> None:
        """Real time: send the slot's action the web way (ConnectionClosed/OSError: the
        slot is lost)."""
        text = action if isinstance(action, str) else ""
        if action == "":
            action = []  # no action (a settling step still settles)
        answer = self.answers[slot.index] = Answer(text)
        problem = refusal(text)
        if problem is not None:
            answer.error = problem
            if not self.settle:
                return
            action = []  # a settling step still settles
        rewarder = slot.session.realtime_channel
        if rewarder is None:
            raise ConnectionClosed(f"{slot.session.name}: its rewarder channel is not connected")
        self.taps[slot.index].attach(rewarder)
        answer.message_id, answer.future = await rewarder.send_answered_action(action, self.settle)

    async def wait(self, slots: Sequence[Slot], gate: FrameGate) -> None:
        """Wait for the answers of ``slots``' actions (at most :data:`ANSWER_TIMEOUT`),
        then until VNC shows the frame each names (copied in as it comes)."""
        answers = [(s, self.answers[s.index]) for s in slots if s.index in self.answers]
        futures = [a.future for _, a in answers if a.future is not None]
        try:
            if futures:
                await asyncio.wait(futures, timeout=ANSWER_TIMEOUT)
        finally:  # (also when the step is interrupted: nothing stays registered)
            for slot, answer in answers:
                rewarder = slot.session.realtime_channel
                if rewarder is not None:
                    rewarder.forget_action(answer.message_id)
        for slot, answer in answers:
            future = answer.future
            if future is None:
                continue
            if not future.done():
                future.cancel()
                answer.error = (f"no answer from the remote within {ANSWER_TIMEOUT:g} s "
                                "(ANSWER_TIMEOUT); the step returns the newest frame")
                continue
            error = future.exception()
            if isinstance(error, RemoteError):
                answer.error = f"the remote refused the action: {error.message}"
            elif error is not None:
                answer.error = f"the connection ended before the action's answer came: {error}"
            else:
                answer.body = future.result()
                frame = answer.body.get("frame")
                if isinstance(frame, int) and slot.tags:
                    gate.expect(slot, frame, capture=True)
        await gate.wait(time.monotonic() + FRAME_WAIT)

    def lockstep_send(self, slot: Slot, rewarder: BlockingRewarder, action: Any, frames: int,
                      obs: str) -> int:
        """Lockstep: send the slot's step (an action string the web way); its message id."""
        if not isinstance(action, str):
            return rewarder.send_step(action, frames, obs)
        problem = refusal(action)
        if problem is not None:
            self.answers[slot.index] = Answer(action, error=problem)
        if action == "" or problem is not None:
            return rewarder.send_step((), frames, obs)
        self.answers[slot.index] = Answer(action)
        return rewarder.send_step(action, frames, obs)

    def annotate(self, infos: Sequence[dict[str, Any]]) -> None:
        """Each info's ``page`` (and ``page.frame``), ``last_action`` and
        ``last_action_error`` (and ``settle`` in settle mode), from this step's answers,
        lockstep replies and the pages heard (an info already annotated is left)."""
        for index, info in enumerate(infos):
            if "last_action" in info:
                continue
            answer = self.answers.pop(index, None)
            body = answer.body if answer is not None else None
            if answer is not None:
                said = body or {}
                info["last_action"] = said.get("last_action") or info.get("web.last_action") or answer.text
                error = said.get("last_action_error", info.get("web.last_action_error"))
                info["last_action_error"] = answer.error if answer.error is not None else error
                for key in ("messages", "devtools"):
                    if body is not None and key in body:
                        info[f"web.{key}"] = body[key]
                if self.settle:
                    info["settle"] = said.get("settle")
            else:
                info["last_action"], info["last_action_error"] = "", None
                if self.settle:
                    info["settle"] = None
            if self.page:
                heard = body if body is not None and PAGE in body else self.taps[index].page_of(
                    info.get("episode_id")
                )
                page = heard or {}
                # A copy the agent may keep and change: the tap keeps the page it heard, and
                # a later step may return it again (cheap against a step: orjson both ways).
                info["page"] = orjson.loads(orjson.dumps(page.get(PAGE) or {}))
                info["page.frame"] = page.get("frame")
