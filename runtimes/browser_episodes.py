"""A MiniWoB task's episodes as the runtime reports them: a part of ``runtimes.browser``'s runtime.

Holds :class:`TaskEpisodes`, which owns what MiniWoB's episode counter means to the
remote: which of the page's episodes is ours (``WOB_EPISODE_ID`` when it began), the
instruction not yet sent, the ended episode not yet reported (once: a reset forgets the
page's count first, so a poll before the new episode cannot take the old end for its), a
lost page, and what an ended episode pays (:data:`REWARDS`). The runtime reads the page
(its poller, a lockstep step, a settled action) and hands the readings here; the snapshot
part puts a restored episode's state back through the methods here.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Final

from .base import StepResult
from .cdp import CDPClient, CDPError
from .chromium import STATE_EXPRESSION

#: ``serve --option reward=...``: what an ended episode pays (docs/browser.md): MiniWoB's
#: reward discounted by the time taken (default), its raw one, or BrowserGym's 1.0 or 0.0.
REWARDS: Final = ("discounted", "raw", "success")
#: Seconds a settled action waits for the episode it ended to be reported (the remote's
#: next frame takes it): its answer then says done.
OUTCOME_WAIT: Final = 0.25

#: A reading of the page's globals (``STATE_EXPRESSION``): done, reward, raw reward,
#: episode count, the reason it ended.
Reading = tuple[Any, float, float, Any, Any]


def reading(value: Any) -> Reading:
    """What ``STATE_EXPRESSION`` evaluated to, as a :data:`Reading` (TypeError or
    ValueError when the page answered something else)."""
    done, reward, raw, episode, reason = value
    return done, reward, raw, episode, reason


class TaskEpisodes:
    """The task's episodes: ours on the page, the instruction and the outcome, each
    reported once."""

    def __init__(self, reward: str = "discounted") -> None:
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, not {reward!r}")
        #: Which reward an ended episode pays (one of :data:`REWARDS`).
        self.reward = reward
        self._generation = 0  # bumped by every reset: the poller drops older readings
        #: WOB_EPISODE_ID when our episode started; None while a reset starts one.
        self._wob_episode: int | None = 0
        self._text: str | None = None  # the instruction, sent at the episode's first frame
        self._outcome: tuple[float, dict[str, Any]] | None = None  # set by the poller
        self._reported = False
        self._taken: asyncio.Event | None = None  # set when outcome() reports an end (asettle)
        self._failure: str | None = None  # set by the poller when the browser is lost

    @property
    def generation(self) -> int:
        """Which reset this is: a reading taken under an older one is stale."""
        return self._generation

    @property
    def reported(self) -> bool:
        """Our episode's end was reported: it stays done until the next reset."""
        return self._reported

    @property
    def text_pending(self) -> bool:
        """The instruction has not gone out yet."""
        return self._text is not None

    @property
    def waiting(self) -> bool:
        """Nothing ended or was lost yet: a poll has something to look for."""
        return self._outcome is None and self._failure is None

    @property
    def lost(self) -> bool:
        """The poller lost the page this episode."""
        return self._failure is not None

    # A reset -------------------------------------------------------------------------------

    def resetting(self) -> None:
        """A reset begins: no reading may count for the episode it starts until it began
        (:meth:`began`), and nothing of the last one is left to report."""
        self._wob_episode = None  # before the bump: no poll may take the last end for ours
        self._generation += 1
        self._outcome, self._reported, self._failure = None, False, None

    def began(self, episode: int, text: str | None = None) -> None:
        """Our episode is the page's after ``episode``; ``text`` its instruction, to go
        out with its first frame (None: keep what is pending)."""
        self._wob_episode = int(episode)
        if text is not None:
            self._text = text

    # What a frame reports ------------------------------------------------------------------

    def take_text(self) -> str | None:
        """The instruction, once."""
        text, self._text = self._text, None
        return text

    def put_text(self, text: str | None) -> None:
        """The instruction still to go out (a restore puts back the snapshot's)."""
        self._text = text

    def step_end(self, reading: Reading) -> tuple[float, dict[str, Any]] | None:
        """A lockstep step's reading: the payment and info if it ended our episode (then
        reported)."""
        done, reward, raw, episode, reason = reading
        if done and self._wob_episode is not None and int(episode) > self._wob_episode:
            self._reported = True
            return self.payment(reward, raw, reason, episode)
        return None

    def replayed_end(self, done: Any, episode: Any) -> None:
        """A restore's last step: whether the episode it replayed had ended (and so was
        reported), as the step the snapshot came after found."""
        began = self._wob_episode
        self._reported = bool(done) and began is not None and int(episode) > began

    def outcome(self, result: StepResult) -> None:
        """Real time, at a frame: the episode's end once (or the lost page), into ``result``."""
        if self._outcome is not None and not self._reported:
            self._reported = True
            result.reward, result.info = self._outcome
            result.done = True
            if self._taken is not None:
                self._taken.set()
        elif self._failure is not None and not self._reported:
            self._reported = True
            result.done = True
            result.info = {"browser.error": self._failure}

    # What the poller reads -----------------------------------------------------------------

    def note_end(self, generation: int, reading: Reading) -> None:
        """Keep the page's ended episode as ours to report, if it is ours (a reading from
        before a reset, or of the episode before ours, is not)."""
        done, reward, raw, episode, reason = reading
        if (generation == self._generation and done and self._outcome is None
                and self._wob_episode is not None and int(episode) > self._wob_episode):
            self._outcome = self.payment(reward, raw, reason, episode)

    def note_lost(self, generation: int, why: str) -> bool:
        """The page could not be read under ``generation``: the episode ends with
        ``browser.error`` (whether this was news)."""
        if generation == self._generation and self._failure is None:
            self._failure = why
            return True
        return False

    async def wait_reported(self, cdp: CDPClient) -> None:
        """After a settled action in real time: read the page at once and, if the action
        ended our episode, wait (at most :data:`OUTCOME_WAIT`) for the frame that reports
        it, so the answer says done."""
        generation, self._taken = self._generation, asyncio.Event()
        if self._outcome is None and self._wob_episode is not None:
            with contextlib.suppress(CDPError, TypeError, ValueError):  # (the poller's news)
                self.note_end(generation, reading(await cdp.evaluate(STATE_EXPRESSION)))
        if self._outcome is not None and not self._reported and generation == self._generation:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(OUTCOME_WAIT):
                    await self._taken.wait()

    def payment(self, reward: float, raw: float, reason: Any, episode: int) -> tuple[float, dict[str, Any]]:
        """The reward an ended episode pays (:attr:`reward`'s kind) and its info."""
        paid = {"discounted": float(reward), "raw": float(raw), "success": float(raw > 0)}
        info = {"wob.reward": float(reward), "wob.raw_reward": float(raw),
                "wob.reason": reason, "wob.episodes": int(episode)}
        return paid[self.reward], info
