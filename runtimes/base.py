"""What a runtime is: the environment that runs inside a remote.

Holds the input events (:class:`KeyEvent`, :class:`PointerEvent`, the VNC vocabulary),
:class:`StepResult` and the :class:`Runtime` base class every environment subclasses.

A runtime knows nothing about sockets. The remote process (``envserver.remote``) calls
:meth:`Runtime.advance` with the input that arrived since the last call (one frame at a
time in real time, k frames per agent step in lockstep) and serves
:attr:`Runtime.framebuffer` over VNC and the reward over the rewarder.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np

from runtimes.errors import SnapshotUnsupported


class KeyEvent(NamedTuple):
    """A key going down or up, by X keysym name (``"Left"``, ``"space"``, ``"a"``)."""

    key: str
    down: bool


class PointerEvent(NamedTuple):
    """The pointer at (x, y) with buttons held as a bit mask (bit 0 = left button)."""

    x: int
    y: int
    buttonmask: int


InputEvent = KeyEvent | PointerEvent


class PlayerEvent(NamedTuple):
    """An input event of one player of a multi-player runtime (``players > 1``).

    The remote wraps the events of a seated player's sources (its rewarder client, its
    VNC viewers) in these; a bare event is player 0's, so a single-agent client drives
    player 0 unchanged. Single-player runtimes never see them.
    """

    player: int
    event: InputEvent


def split_players(events: Sequence[InputEvent | PlayerEvent], players: int) -> list[list[InputEvent]]:
    """Each player's events, in order: bare events are player 0's; a player out of range
    is a bug of the caller, refused."""
    out: list[list[InputEvent]] = [[] for _ in range(players)]
    for event in events:
        if isinstance(event, PlayerEvent):
            if not 0 <= event.player < players:
                raise ValueError(f"player {event.player} is not one of 0..{players - 1}")
            out[event.player].append(event.event)
        else:
            out[0].append(event)
    return out


@dataclass(slots=True)
class StepResult:
    """What one frame (or an advance of several) earned: summed reward, whether the
    episode ended, extra info.

    ``text`` (an instruction, a status line) and ``observation`` (anything JSON) are sent
    to clients as ``v0.env.text`` / ``v0.env.observation`` when not None.
    """

    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    text: str | None = None
    observation: Any = None
    #: Frames advanced: 1 for a step; for an advance, fewer than asked if done came first;
    #: 0 when the episode had already ended (it stays done until reset).
    frames: int = 1
    #: Multi-player runtimes: each player's reward (``reward`` is player 0's); None for
    #: single-player runtimes.
    rewards: tuple[float, ...] | None = None

    def add(self, later: StepResult) -> None:
        """Fold the frames that came after into this total: rewards and frames summed,
        info merged (later wins), the last text and observation kept, done once done.

        Args:
            later: the result of the frames that followed.
        """
        self.reward += later.reward
        if later.rewards is not None:
            self.rewards = (
                later.rewards if self.rewards is None
                else tuple(a + b for a, b in zip(self.rewards, later.rewards, strict=True))
            )
        self.info.update(later.info)
        self.frames += later.frames
        if later.text is not None:
            self.text = later.text
        if later.observation is not None:
            self.observation = later.observation
        self.done = self.done or later.done


def check_frames(frames: int) -> None:
    """Refuse an advance of no frames: it would draw nothing and hide a caller's bug."""
    if frames < 1:
        raise ValueError(f"advance needs frames >= 1, not {frames!r}")


class Runtime(abc.ABC):
    """An environment a remote can serve.

    Subclasses set the class attributes below, allocate :attr:`framebuffer` in
    ``__init__`` and draw into it in place on every :meth:`reset` and :meth:`step` (the
    VNC server diffs it after each frame, so never replace the array).
    """

    #: ``family.Name-vN``, as in Universe.
    env_id: ClassVar[str]
    #: Screen size in pixels.
    width: ClassVar[int]
    height: ClassVar[int]
    #: Frames per second the remote runs this runtime at in real time.
    fps: ClassVar[float] = 60.0
    #: X keysym names this runtime reacts to; other keys are refused with a clear error.
    keys: ClassVar[tuple[str, ...]] = ()
    #: Pointer buttons it reacts to, as a mask (0: it ignores the mouse, 1: left button).
    buttons: ClassVar[int] = 0
    #: One line for ``universe-remote list``.
    description: ClassVar[str] = ""
    #: Keyword arguments the constructor takes (``serve --scale 2`` passes ``scale``).
    options: ClassVar[tuple[str, ...]] = ()
    #: True when VNC viewers may send any key, not only :attr:`keys` (the rewarder's
    #: list): a desktop, where a person types whatever they like.
    any_vnc_key: ClassVar[bool] = False
    #: True when agents too may send any X key (the rewarder, MCP, gymnasium), not only
    #: :attr:`keys`, which then lists the common ones (for samplers and fixed key vectors):
    #: a desktop, which takes every key a person has (F1, KP_0, Super_L, Print, Menu).
    any_key: ClassVar[bool] = False
    #: Whether the runtime can run in lockstep (deterministic, as fast as it can go).
    lockstep: ClassVar[bool] = True
    #: Players in one world: above 1, :meth:`advance` takes :class:`PlayerEvent` too and
    #: its :class:`StepResult` carries ``rewards``, one per player (``docs/multiagent.md``).
    players: ClassVar[int] = 1
    #: Keys of :attr:`StepResult.info` whose value real-time clients hear as soon as it
    #: changes (in a ``v0.env.reward`` of 0), not only with the next reward: Atari's lives.
    announced_info: ClassVar[tuple[str, ...]] = ()

    #: True when the remote hands real-time input to :meth:`forward` as it arrives and
    #: :meth:`advance` gets none (an X program: it keeps its own time).
    forwards_input: ClassVar[bool] = False
    #: True when it takes action strings (``"click('a42')"``, a browser's element
    #: actions: :meth:`arun_action`) and page observations (:attr:`observe`).
    action_strings: ClassVar[bool] = False
    #: True when it can tell when its screen is still again after an action
    #: (:meth:`asettle`: browsers and X programs).
    settles: ClassVar[bool] = False
    #: Page observations an agent asked for (the remote's ``observe`` property): a set of
    #: ``"elements"``, ``"tree"``; empty: none are made.
    observe: frozenset[str] = frozenset()
    #: True when lockstep steps call :meth:`aadvance` (it awaits I/O: a browser's page),
    #: which the remote awaits once per step instead of slicing :meth:`advance`.
    async_advance: ClassVar[bool] = False
    #: True when :meth:`play` advances like :meth:`advance` without drawing and
    #: :meth:`draw` draws the state now: a real-time remote whose frames nobody reads
    #: plays them and draws only when one is asked for (issue 44).
    draws_on_demand: ClassVar[bool] = False

    #: Why this runtime cannot snapshot (None: it can). Shown in describe as "snapshots".
    snapshot_refusal: ClassVar[str | None] = "this environment cannot save its state"

    framebuffer: np.ndarray
    #: Where the next frame drawn goes instead of :attr:`framebuffer` (a batch step's
    #: slot in shared memory), set by the remote just before one advance. A runtime that
    #: can draw there sets it back to None when it did, and then brings its framebuffer
    #: up to date only when it is read (one copy of the screen less a step); one that
    #: cannot leaves it set, and the remote copies the framebuffer there.
    into: np.ndarray | None = None
    #: The remote's mode (``"realtime"`` or ``"lockstep"``), set before every reset:
    #: runtimes whose time is not their own (a browser's page) read it in :meth:`areset`.
    mode: str = "realtime"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that redefines :meth:`step` but not :meth:`advance` gets the base
        advance (a loop of its ``step``): an advance inherited from a faster parent would
        skip the subclass's step, in real time too, where the remote advances 1 frame.
        One that redefines either but not :meth:`play` draws every frame (its play is
        its advance)."""
        super().__init_subclass__(**kwargs)
        if "step" in vars(cls) and "advance" not in vars(cls):
            cls.advance = Runtime.advance  # type: ignore[method-assign]
        if ("step" in vars(cls) or "advance" in vars(cls)) and "play" not in vars(cls):
            # a parent's play would skip this class's own step or advance
            cls.play = Runtime.play  # type: ignore[method-assign]
            cls.draws_on_demand = False

    def __init__(self) -> None:
        self.framebuffer = np.zeros((self.height, self.width, 3), dtype=np.uint8)

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """:attr:`framebuffer`'s shape, without bringing it up to date (see :attr:`into`)."""
        return self.framebuffer.shape

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> None:
        """Start a new episode and draw its first frame. Same seed, same episode.

        Args:
            seed: the episode's seed (None: the runtime picks one).
        """

    @abc.abstractmethod
    def step(self, events: Sequence[InputEvent]) -> StepResult:
        """Apply ``events`` (in order), advance one frame, draw it, say what it earned.

        Args:
            events: the input that arrived since the last frame.

        Returns:
            The frame's reward, done, info (and text or observation, if any).
        """

    def advance(self, events: Sequence[InputEvent], frames: int) -> StepResult:
        """Apply ``events``, hold that input for ``frames`` frames, say what they earned.

        Stops early at done (``result.frames`` says how many ran). Rewards are summed,
        info merged (later frames win), the last text and observation kept. This default
        steps frame by frame; runtimes that can skip drawing the frames in between
        override it, giving the same frames and rewards.

        Args:
            events: the input, applied before the first frame.
            frames: frames to run (1 or more).

        Returns:
            Their :class:`StepResult`, summed.
        """
        check_frames(frames)
        total = StepResult(frames=0)
        for i in range(frames):
            result = self.step(events if i == 0 else ())
            total.add(result)  # frames 0 from a runtime whose episode had already ended
            if result.done:
                break
        return total

    def play(self, events: Sequence[InputEvent], frames: int) -> StepResult:
        """As :meth:`advance` (the same rules, rewards and ends), leaving
        :attr:`framebuffer` as it was; :meth:`draw` catches it up. Only for a runtime with
        :attr:`draws_on_demand`; this default draws.

        Args:
            events: the input, applied before the first frame.
            frames: frames to run (1 or more).

        Returns:
            Their :class:`StepResult`, as :meth:`advance` gives it.
        """
        return self.advance(events, frames)

    def draw(self) -> None:
        """Draw the current state into :attr:`framebuffer` (after :meth:`play`), with its
        damage; nothing for a runtime that always draws."""
        return None

    def take_damage(self) -> list[tuple[int, int, int, int]] | None:
        """The rectangles (x, y, w, h) of :attr:`framebuffer` drawn since the last call,
        if the runtime knows them (an X display does); None: unknown, the VNC server
        compares the frame itself.

        Returns:
            The rectangles, or None.
        """
        return None

    def instruction(self) -> str | None:
        """The new episode's text known at reset (a task's instruction), taken once: the
        remote sends it before the reset's reply, so an agent has it from ``reset()``.

        Returns:
            The text, or None (none, or already taken).
        """
        return None

    def close(self) -> None:  # noqa: B027 (a hook: most runtimes hold nothing)
        """Free what the runtime holds (processes, displays). Called once, at shutdown."""

    # Hooks for runtimes that own processes (X servers, browsers). The remote awaits them
    # on its event loop; the defaults suit runtimes that live in this process.

    async def astart(self) -> None:  # noqa: B027 (a hook)
        """Start what the runtime needs (an X display, a browser) before its first reset;
        the remote's own servers serve it."""

    async def atake_over(self, old: Runtime) -> bool:
        """Start by taking over what ``old`` runs (an env switch: a browser loads the new
        task in the old one's browser); False, as here, when it cannot: the caller then
        closes ``old`` and calls :meth:`astart`. On True, ``old`` holds nothing more.

        Args:
            old: the runtime this one replaces.

        Returns:
            Whether it took ``old``'s resources over.
        """
        return False

    async def areset(self, seed: int | None = None) -> None:
        """Start a new episode; runtimes whose reset must wait on I/O override this.

        Args:
            seed: the episode's seed (None: the runtime picks one).
        """
        self.reset(seed)

    async def arun_action(
        self, text: str, send: Callable[[Sequence[InputEvent]], None]
    ) -> dict[str, Any]:
        """Run an action string (:attr:`action_strings`); ``send`` queues input as the
        remote's agent sent it (recorded, shown to viewers). Returns the observation keys
        it reports: ``last_action``, ``last_action_error`` (never raises for the action's
        own failure: an unknown element is an error value).

        Args:
            text: the action string.
            send: queues input events as the agent's.

        Returns:
            The observation keys it reports.

        Raises:
            NotImplementedError: the runtime takes no action strings.
        """
        raise NotImplementedError(f"{self.env_id} takes no action strings")

    def settle_watch(self) -> float:
        """Start watching the screen for a settling action, before its input is sent (the
        next :meth:`asettle` counts from here); the time.monotonic() it started.

        Returns:
            The ``time.monotonic()`` it started watching.

        Raises:
            NotImplementedError: the runtime cannot tell when its screen settles.
        """
        raise NotImplementedError(f"{self.env_id} cannot tell when its screen settles")

    async def asettle(self) -> dict[str, Any]:
        """Wait until the screen is still again (:attr:`settles`), watching from the last
        :meth:`settle_watch` (none: from now); how long it took.

        Returns:
            What to report of the wait (how long it took).

        Raises:
            NotImplementedError: the runtime cannot tell when its screen settles.
        """
        raise NotImplementedError(f"{self.env_id} cannot tell when its screen settles")

    async def aobservation(self, parts: frozenset[str] | None = None) -> dict[str, Any]:
        """The observation keys :attr:`observe` (or ``parts``) asks for, now (``page``);
        {} for none.

        Args:
            parts: the observation keys wanted (None: :attr:`observe`).

        Returns:
            ``{key: value}`` of each.
        """
        return {}

    def take_observation(self) -> dict[str, Any] | None:
        """An observation the runtime made since it was last taken (a reset's), if any.

        Returns:
            The observation, or None.
        """
        return None

    def forward(self, events: Sequence[InputEvent]) -> None:
        """Real-time input of a runtime with :attr:`forwards_input`, as it arrives.

        Args:
            events: the input, in order.
        """
        raise NotImplementedError(f"{self.env_id} takes its input in advance()")

    async def aadvance(self, events: Sequence[InputEvent], frames: int) -> StepResult:
        """A lockstep step of a runtime with :attr:`async_advance`: as :meth:`advance`.

        Args:
            events: the input, applied before the first frame.
            frames: frames to run.

        Returns:
            Their :class:`StepResult`, summed.
        """
        return self.advance(events, frames)

    async def aclose(self) -> None:
        """Stop what :meth:`astart` started."""
        self.close()

    # Snapshots (docs/snapshots.md): a runtime that can save its whole state sets
    # snapshot_refusal to None and overrides the three synchronous methods (or the
    # asynchronous ones when its state lives behind I/O, a browser's page).

    def snapshot(self) -> bytes:
        """The runtime's whole state (frame, game, RNG) in its own format, never pickle:
        :meth:`restore` of these bytes continues exactly where this left off.

        Returns:
            The state's bytes.

        Raises:
            SnapshotUnsupported: the runtime cannot save its state (:attr:`snapshot_refusal`).
        """
        raise SnapshotUnsupported(self.snapshot_refusal)

    def restore(self, state: bytes) -> None:
        """Return to a state :meth:`snapshot` made, redrawing :attr:`framebuffer`; bytes
        that are not one are refused field by field with :class:`BadSnapshot`.

        Args:
            state: bytes :meth:`snapshot` made.

        Raises:
            BadSnapshot: ``state`` is not a state of this runtime (the message names the field).
            SnapshotUnsupported: the runtime cannot save its state.
        """
        raise SnapshotUnsupported(self.snapshot_refusal)

    def state_digest(self) -> bytes:
        """A cheap digest of the state that matters (frame and game state): equal after a
        restore to the snapshot's, which is how restores are verified.

        Returns:
            The digest's bytes.

        Raises:
            SnapshotUnsupported: the runtime cannot save its state.
        """
        raise SnapshotUnsupported(self.snapshot_refusal)

    def held_input(self) -> tuple[frozenset[str], tuple[int, int, int]]:
        """What the game holds down now, as its state has it: keys, and the pointer
        ``(x, y, buttons)``. After a restore it is what was held at the snapshot; the
        remote records it as its agent's, to let go of when the agent leaves. A runtime
        whose state keeps none holds nothing.

        Returns:
            The held key names and the pointer ``(x, y, buttons)``.
        """
        return frozenset(), (0, 0, 0)

    async def asnapshot(self) -> bytes:
        """:meth:`snapshot` for the remote's event loop; runtimes behind I/O override it.

        Returns:
            The state's bytes.
        """
        return self.snapshot()

    async def arestore(self, state: bytes) -> None:
        """:meth:`restore` for the remote's event loop; runtimes behind I/O override it.

        Args:
            state: bytes :meth:`asnapshot` (or :meth:`snapshot`) made.
        """
        self.restore(state)

    async def astate_digest(self) -> bytes:
        """:meth:`state_digest` for the remote's event loop.

        Returns:
            The digest's bytes.
        """
        return self.state_digest()

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """Additive ``v0.env.describe`` keys: what a client needs to act on this runtime.

        Returns:
            The keys (screen size, keys and buttons it reads, players, ...) as a dict.
        """
        return {
            "width": cls.width,
            "height": cls.height,
            "keys": list(cls.keys),
            "any_key": cls.any_key,
            "buttons": cls.buttons,
            "players": cls.players,
            # What a web agent may use (docs/browser.md): action strings and page
            # observations; settling actions.
            "action_strings": cls.action_strings,
            "settles": cls.settles,
            # None: v0.env.snapshot works; else why it cannot (docs/snapshots.md).
            "snapshots": cls.snapshot_refusal,
        }
