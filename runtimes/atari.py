"""Atari 2600 games through ale-py: ``atari.<Game>-v0`` for every ROM its wheel can run.

Holds :class:`AtariRuntime` (one emulator running one game), :func:`env_id_for` (ROM id ->
env id), :func:`joystick_actions` (the keyboard -> joystick rule) and :data:`RUNTIMES`, the
table ``runtimes.registry`` reads: one :class:`AtariRuntime` subclass per ROM, built at
import without starting an emulator. Importing this module fails with ImportError when the
``atari`` extra (ale-py) is not installed, and the registry then lists no Atari games.

**Keys.** The runtime reads the keyboard *state* every frame, as a joystick would: the held
arrows give a direction, space is the fire button, and a key pressed and released within one
frame counts as held for that frame. Opposite arrows cancel. The result is the ALE action of
that direction and button if the game's action set has it; otherwise the nearest
one it has, trying in turn: drop fire, drop the vertical direction (keeping fire), drop the
vertical direction and fire, drop the horizontal direction (keeping fire), keep only the
vertical direction, fire alone, and finally NOOP (the joystick at rest, which every game
accepts even where its minimal set omits it). Pong's paddle moves up and down but ALE drives
it with RIGHT (up) and LEFT (down), so in Pong the arrows are turned a quarter turn: Up and
Down move the paddle, Left and Right do nothing (:data:`ROTATED_ROMS`).

**Seeds.** With ``repeat_action_probability`` 0 (the default) ALE never draws a random
number, so every seed would replay the same game. A seed therefore picks how many NOOP
frames (0 to ``noop_max``) the emulator plays before the first frame the runtime shows, as
in DQN's no-op starts, and seeds ALE's generator for sticky actions the way ale-py's
``AtariEnv.reset(seed=)`` does (:func:`ale_seed`), so that with ``noop_max=0`` a seed plays
the same game here as in ``gymnasium.make("ALE/<Game>-v5")``, sticky repeats included.

**Actions.** The game's minimal action set, or with ``full_action_space`` all 18 joystick
actions, in ale-py's order (``describe()["actions"]``, with the keys that play each in
``"action_keys"``): an agent's ``Discrete(n)`` means what ale-py's does.

**Resets.** ``reset(seed)`` restores a snapshot taken when the ROM was loaded and then calls
ALE's ``reset_game()``, far cheaper than reloading the ROM (benchmarks/RESULTS.md). The episode
is then the one ale-py starts after loading the ROM and resetting (checked frame by frame,
with RAM, on the 104 ROMs of ale-py 0.12.1, after earlier episodes of 700 and 7,000
frames). Neither half alone would do: after ``reset_game()`` alone 16 games (Assault, Beam
Rider, ...) start their next episode differently depending on the last one; the snapshot
alone is a loaded ROM that ale-py has also reset, which 18 games (Berzerk, Solaris, ...)
start differently from. ALE seeds its generator only when it loads a ROM, so with sticky
actions on (``repeat_action_probability`` > 0) each reset reloads the ROM instead, then
resets, as ale-py does.
"""

from __future__ import annotations

import hashlib
import math
import re
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final

import ale_py
import numpy as np
from ale_py import Action, ALEInterface, ALEState, LoggerMode, roms

from .base import InputEvent, KeyEvent, Runtime, StepResult, check_frames
from .damage import MAX_DAMAGE_RECTS
from .errors import BadSnapshot
from .state_codec import StateLayout, check_range

# Screen and timing -----------------------------------------------------------------------

ATARI_WIDTH: Final = 160
ATARI_HEIGHT: Final = 210
ATARI_FPS: Final = 60.0
#: ROMs whose screen is not 210 rows, measured with ale-py 0.12.1. Only the class
#: attributes read this table; a runtime takes its size from the loaded emulator.
SCREEN_HEIGHTS: Final[dict[str, int]] = {"adventure": 250, "air_raid": 250, "carnival": 214}
#: Largest ``scale``: 8 makes a 1280x1680 screen, past what a viewer needs.
MAX_SCALE: Final = 8

# Episodes --------------------------------------------------------------------------------

#: Most NOOP frames a seed plays before the first frame shown (DQN's no-op starts).
NOOP_MAX: Final = 30
#: Episodes end after this many frames at the latest: 30 minutes at 60 fps, ALE v5's cap.
MAX_EPISODE_FRAMES: Final = 108_000

# Keys ------------------------------------------------------------------------------------

KEYS: Final = ("Up", "Down", "Left", "Right", "space")
_UP, _DOWN, _LEFT, _RIGHT, _FIRE = (1 << bit for bit in range(len(KEYS)))
_KEY_BITS: Final = dict(zip(KEYS, (_UP, _DOWN, _LEFT, _RIGHT, _FIRE), strict=True))
#: ROMs whose player moves across the other axis than ALE's joystick action says.
ROTATED_ROMS: Final = frozenset({"pong"})

ALEInterface.setLoggerMode(LoggerMode.Error)  # no banner on stderr for every emulator

# Snapshots -------------------------------------------------------------------------------

#: What a snapshot holds beside ALE's own state: the runtime's variables and the sizes of
#: the three blobs that follow (ALE's state with its generator, the screen as ALE's
#: palette indices and as RGB, both zlib-compressed: ALE's state holds no screen).
ATARI_LAYOUT: Final = StateLayout(b"URa0", 1, (
    ("ale", "16s"), ("rom", "32s"),
    ("frame", "I"), ("held", "B"), ("done", "?"), ("noops", "B"), ("last", "B"),
    ("ale_bytes", "I"), ("indices_bytes", "I"), ("rgb_bytes", "I"),
))
#: With sticky actions, the chance that a restore leaves ALE's last action stale: ALE's
#: state holds no last action (the one a sticky frame repeats), so a restore plays the
#: last action until ALE took it at least once: k frames leave it stale with chance p**k.
STICKY_STALE_CHANCE: Final = 1e-12
#: The ale-py whose states these are: another's may lay them out otherwise.
_ALE_VERSION: Final = ale_py.__version__.encode()[:16]
#: Largest ALE state a snapshot may carry (ale-py 0.12.1's are about 14 kB with the generator).
MAX_ALE_STATE_BYTES: Final = 1 << 18
#: Largest compressed screen a snapshot may carry (a screen is at most 250 x 160 x 3 bytes).
MAX_SCREEN_BYTES: Final = 250 * 160 * 3 + 1024


def env_id_for(rom: str) -> str:
    """``"montezuma_revenge"`` -> ``"atari.MontezumaRevenge-v0"``, as gymnasium names ALE games."""
    return f"atari.{_game_name(rom)}-v0"


def _game_name(rom: str) -> str:
    return rom.title().replace("_", "")


def _action_name(vertical: int, horizontal: int, fire: bool) -> str:
    """ALE's name for a joystick direction (-1 up/left, +1 down/right) and button."""
    name = {-1: "UP", 0: "", 1: "DOWN"}[vertical] + {-1: "LEFT", 0: "", 1: "RIGHT"}[horizontal]
    return name + "FIRE" if fire else name or "NOOP"


def _nearest(vertical: int, horizontal: int, fire: bool, available: set[str]) -> str:
    """The first of the fallbacks the module docstring lists that the game supports."""
    for v, h, f in (
        (vertical, horizontal, fire),
        (vertical, horizontal, False),  # drop fire
        (0, horizontal, fire),  # drop the vertical direction
        (0, horizontal, False),
        (vertical, 0, fire),  # drop the horizontal direction
        (vertical, 0, False),
        (0, 0, fire),
    ):
        name = _action_name(v, h, f)
        if name in available:
            return name
    return "NOOP"


def joystick_actions(available: Iterable[str], rotated: bool = False) -> list[str]:
    """The ALE action name for every key state, indexed by the bit mask of held keys.

    Bit ``i`` of the index is ``KEYS[i]``; ``available`` is the game's action set.
    ``rotated`` turns the arrows a quarter turn (Up -> RIGHT, Right -> DOWN, ...).
    """
    available = set(available)
    table = []
    for mask in range(1 << len(KEYS)):
        up_down = bool(mask & _DOWN) - bool(mask & _UP)
        left_right = bool(mask & _RIGHT) - bool(mask & _LEFT)
        vertical, horizontal = (left_right, -up_down) if rotated else (up_down, left_right)
        table.append(_nearest(vertical, horizontal, bool(mask & _FIRE), available))
    return table


class AtariRuntime(Runtime):
    """One Atari 2600 game in its own ALE emulator; one runtime frame is one ALE frame.

    Subclasses (one per ROM, in :data:`RUNTIMES`) set :attr:`rom`. The emulator starts and
    the ROM loads in ``__init__``, which also draws the first frame of an unseeded episode.
    The ALE screen is copied into :attr:`framebuffer` in place, enlarged ``scale`` times on
    each axis if asked (:attr:`width` and :attr:`height` are then the enlarged size). An
    episode ends at game over or after ``max_episode_frames`` frames, and keeps answering
    ``done`` until the next :meth:`reset`.

    Damage: ALE says nothing of what a frame changed, so each draw also reads ALE's
    palette-index screen (a third of the RGB one's bytes) and compares it with the last
    one's, row by row: the changed rows, as full-width bands, are :meth:`take_damage`'s
    answer, and the VNC server skips its own compare: the read and the row compare cost
    less than the server's tile compare, and the bands hold fewer pixels than the tiles
    they touch (benchmarks/RESULTS.md). While nobody takes the damage (no viewer: a
    lockstep agent's steps), a draw reads no indices: a snapshot or a digest reads those
    of the screen shown when it needs them, and the first draw after a take compares none
    (its damage is None: the server compares that screen whole).
    """

    #: ale-py's ROM id (``"pong"``).
    rom: ClassVar[str]
    width = ATARI_WIDTH
    height = ATARI_HEIGHT
    fps = ATARI_FPS
    keys = KEYS
    buttons = 0
    announced_info = ("lives",)
    #: ALE's whole system state, its generator included (sticky actions replay exactly).
    snapshot_refusal = None
    options = (
        "scale", "repeat_action_probability", "full_action_space", "noop_max", "max_episode_frames",
    )

    def __init__(
        self,
        *,
        scale: int = 1,
        repeat_action_probability: float = 0.0,
        full_action_space: bool = False,
        noop_max: int = NOOP_MAX,
        max_episode_frames: int | None = MAX_EPISODE_FRAMES,
    ) -> None:
        if not (isinstance(scale, int) and 1 <= scale <= MAX_SCALE):
            raise ValueError(f"scale must be an integer from 1 to {MAX_SCALE}, not {scale!r}")
        if not 0.0 <= repeat_action_probability < 1.0:
            raise ValueError(
                f"repeat_action_probability must be in [0, 1), not {repeat_action_probability!r}"
            )
        if noop_max < 0:
            raise ValueError(f"noop_max must be 0 or more, not {noop_max!r}")
        if max_episode_frames is not None and max_episode_frames < 1:
            raise ValueError(f"max_episode_frames must be 1 or more, not {max_episode_frames!r}")
        self.scale = scale
        self.repeat_action_probability = float(repeat_action_probability)
        self.full_action_space = bool(full_action_space)
        self.noop_max = noop_max
        self.max_episode_frames = max_episode_frames

        path = roms.get_rom_path(self.rom)
        self.ale = ALEInterface()
        if path is None or not self.ale.isSupportedROM(str(path)):
            # loadROM would end the whole process on a ROM it cannot run.
            raise ValueError(f"ale-py cannot run the ROM {self.rom!r}")
        self._rom_path: Path = path
        self.ale.setFloat("repeat_action_probability", self.repeat_action_probability)
        #: Frames a restore plays before restoring again (:meth:`restore`).
        self._prime_frames = 1 if not self.repeat_action_probability else max(1, math.ceil(
            math.log(STICKY_STALE_CHANCE) / math.log(self.repeat_action_probability)
        ))
        self.ale.setInt("frame_skip", 1)
        self.ale.setInt("random_seed", 0)
        self.ale.loadROM(str(path))
        self._start_state = self.ale.cloneState()
        found = re.search(rb"[0-9a-f]{32}", bytes(self._start_state.serialize())[:128])
        #: The cartridge's MD5 as ALE's states name it (a restore checks it).
        self._rom_md5 = found.group() if found else b"?"

        screen_height, screen_width = self.ale.getScreenDims()
        # The class attributes give the unscaled size; an instance holds its own.
        self.width = screen_width * scale  # type: ignore[misc]
        self.height = screen_height * scale  # type: ignore[misc]
        #: Whether ALE's screen went elsewhere (:attr:`into`) since :attr:`framebuffer`
        #: was drawn: reading it draws it then (ALE still shows that screen).
        self._stale = False
        super().__init__()  # allocates the framebuffer at the size just set
        if scale == 1:
            self._screen = self.framebuffer  # ALE draws straight into it
        else:
            # ALE draws into _screen; _draw widens each row into _wide, then copies each
            # wide row ``scale`` times: 2 x ``scale`` copies of whole arrays.
            self._screen = np.zeros((screen_height, screen_width, 3), dtype=np.uint8)
            self._wide = np.zeros((screen_height, screen_width * scale, 3), dtype=np.uint8)
            self._screen_pixels = _pixels(self._screen)
            self._wide_pixels = _pixels(self._wide).reshape(screen_height, screen_width, scale)
            self._rows = self.framebuffer.reshape(screen_height, scale, -1, 3)
        #: ALE's palette-index screens: this draw's and the last one's (for the damage).
        self._indices = np.zeros((screen_height, screen_width), dtype=np.uint8)
        self._shown = np.zeros_like(self._indices)
        unit = np.uint64 if screen_width % 8 == 0 else np.uint8
        self._rows_now, self._rows_shown = self._indices.view(unit), self._shown.view(unit)
        self._damage: list[tuple[int, int, int, int]] | None = None
        #: Whether the screen shown has no indices read yet (:attr:`_shown` is older): read
        #: only when asked (:meth:`_read_indices`), while nobody takes the damage.
        self._unread = False
        #: The last state restored, read: restoring it again skips the reading.
        self._last_read: tuple[bytes, tuple[dict[str, Any], ALEState, np.ndarray, np.ndarray]] | None = None

        action_set = self.ale.getLegalActionSet() if full_action_space else self.ale.getMinimalActionSet()
        #: ALE's names of the agent's actions, in ale-py's order (its get_action_meanings()).
        self.actions: tuple[str, ...] = tuple(action.name for action in action_set)
        self._action_names = joystick_actions(self.actions, rotated=self.rom in ROTATED_ROMS)
        self._joystick = [Action.__members__[name] for name in self._action_names]
        # The fewest keys that play each action of the set (an agent's Discrete).
        keys_for: dict[str, list[str]] = {}
        for mask in sorted(range(len(self._action_names)), key=lambda m: bin(m).count("1")):
            name = self._action_names[mask]
            keys_for.setdefault(name, [k for k in KEYS if _KEY_BITS[k] & mask])
        self.action_keys = [keys_for[a] for a in self.actions if a in keys_for]
        self.reset()

    def joystick_action(self, keys: Iterable[str]) -> str:
        """The ALE action this game gets while ``keys`` are held (others are ignored)."""
        mask = 0
        for key in keys:
            mask |= _KEY_BITS.get(key, 0)
        return self._action_names[mask]

    @property  # type: ignore[override]
    def framebuffer(self) -> np.ndarray:
        """The screen (drawn now if the last one went only :attr:`into` a slot)."""
        if self._stale:
            self._fresh()
        return self._frame

    @framebuffer.setter
    def framebuffer(self, frame: np.ndarray) -> None:
        self._frame = frame
        self._stale = False

    @property
    def frame_shape(self) -> tuple[int, ...]:
        return self._frame.shape

    def _fresh(self) -> None:
        """Draw the framebuffer if the last screen went only :attr:`into` a slot: ALE
        still shows it (whatever moves ALE on draws, or restores the screen it saved)."""
        if self._stale:
            self._stale = False
            self.ale.getScreenRGB(self._frame)

    def _read_indices(self) -> None:
        """Read the palette indices of the screen shown if :meth:`_draw` left them unread
        (ALE still shows that screen: whatever moves ALE on draws, or restores its own)."""
        if self._unread:
            self._unread = False
            self.ale.getScreen(self._shown)

    def describe(self) -> dict[str, Any]:  # type: ignore[override]
        """The base keys at this instance's (scaled) size, plus the game's own."""
        return {
            **super().describe(),
            "width": self.width,
            "height": self.height,
            "rom": self.rom,
            "actions": list(self.actions),
            "action_keys": self.action_keys,
            "scale": self.scale,
            "noop_max": self.noop_max,
            "repeat_action_probability": self.repeat_action_probability,
            "full_action_space": self.full_action_space,
            "max_episode_frames": self.max_episode_frames,
            # Now: after a reset, the episode's start (ale-py's info["lives"] at reset).
            "lives": int(self.ale.lives()),
        }

    def reset(self, seed: int | None = None) -> None:
        rng = np.random.default_rng(seed)  # None draws fresh entropy from the OS
        self.noops = int(rng.integers(self.noop_max + 1))
        if self.repeat_action_probability:
            self.ale.setInt("random_seed", ale_seed(seed))
            self.ale.loadROM(str(self._rom_path))  # the only way to reseed ALE's generator
        else:  # see "Resets" in the module docstring
            self.ale.restoreState(self._start_state)
        self.ale.reset_game()
        for _ in range(self.noops):
            self.ale.act(Action.NOOP)
        self.held = 0  # bit mask of held keys; cleared so a seed replays exactly
        self._last_action = Action.NOOP  # the joystick in the last frame played
        self.frame = 0
        self.done = False
        self._draw()
        self._read_indices()  # (a viewer's first frame after a reset gets rows compared)
        self._damage = None  # a new episode's screen: the server compares it whole

    def step(self, events: Sequence[InputEvent]) -> StepResult:
        return AtariRuntime.advance(self, events, 1)  # not a subclass's (it may loop step)

    def advance(self, events: Sequence[InputEvent], frames: int) -> StepResult:
        """Run ``frames`` ALE frames with the input held; fetch and scale the screen once,
        at the end, not once a frame (``python -m benchmarks atari_lockstep``: its
        "AtariRuntime in process" row is this call with 4 frames)."""
        check_frames(frames)
        if self.done:
            return StepResult(0.0, True, self._info(), frames=0)
        tapped = 0
        for event in events:
            if isinstance(event, KeyEvent) and event.key in _KEY_BITS:
                bit = _KEY_BITS[event.key]
                if event.down:
                    self.held |= bit
                    tapped |= bit
                else:
                    self.held &= ~bit
        # A key pressed and released within the first frame still counts for that frame.
        first, held = self._joystick[self.held | tapped], self._joystick[self.held]
        ale, limit = self.ale, self.max_episode_frames
        act, over = ale.act, ale.game_over
        frame = self.frame + 1  # (counted in a local: one attribute write a step, not four)
        reward = act(first)
        ran = 1
        done = over() or (limit is not None and frame >= limit)
        while ran < frames and not done:
            reward += act(held)
            ran += 1
            frame += 1
            done = over() or (limit is not None and frame >= limit)
        self.frame = frame
        if done:
            self.done = True
        self._last_action = first if ran == 1 else held
        self._draw()
        return StepResult(float(reward), self.done, self._info(), frames=ran)

    # Snapshots (docs/snapshots.md) ------------------------------------------------------

    def snapshot(self) -> bytes:
        self._fresh()
        self._read_indices()
        ale_state: bytes = self.ale.cloneState(include_rng=True).serialize()
        indices = zlib.compress(self._shown.tobytes(), 1)  # (the screen last drawn)
        rgb = zlib.compress(self._screen.tobytes(), 1)
        header = ATARI_LAYOUT.pack({
            "ale": _ALE_VERSION, "rom": self.rom.encode(),
            "frame": self.frame, "held": self.held, "done": self.done,
            "noops": self.noops, "last": self._last_action.value, "ale_bytes": len(ale_state),
            "indices_bytes": len(indices), "rgb_bytes": len(rgb),
        })
        return b"".join((header, ale_state, indices, rgb))

    def restore(self, state: bytes) -> None:
        """Every field checked before ALE sees a byte; then ALE's state restored, primed
        with the last action and restored again: ALE's state misses hidden TIA state (ALE
        PR #739: after a restore into another emulator Q*bert plays on differently) and,
        with sticky actions, the last action a sticky frame repeats (Pong's first frame
        after a restore repeated the action before the restore): one frame sets the
        first, a few the second (:data:`STICKY_STALE_CHANCE`). Then the saved screen."""
        cached = self._last_read
        if cached is not None and cached[0] == state:  # a search returning to one state
            fields, restored, indices, rgb = cached[1]
        else:
            fields, ale_state, indices, rgb = self._read_snapshot(state)
            restored = ALEState(ale_state)
            self._last_read = (bytes(state), (fields, restored, indices, rgb))
        self.ale.restoreState(restored)
        last = Action(fields["last"])
        for _ in range(self._prime_frames):  # TIA, input ports, sticky last action
            self.ale.act(last)
        self.ale.restoreState(restored)
        self.frame, self.held, self.done, self.noops = (
            fields["frame"], fields["held"], fields["done"], fields["noops"]
        )
        np.copyto(self._shown, indices)
        self._unread = False
        np.copyto(self._screen, rgb)
        self._stale = False  # (the saved screen, not ALE's: drawn here)
        self._show()
        self._damage = None  # the whole screen changed: the server compares it

    def _read_snapshot(self, state: bytes) -> tuple[dict[str, Any], bytes, np.ndarray, np.ndarray]:
        size = ATARI_LAYOUT.size
        fields = ATARI_LAYOUT.unpack(bytes(state[:size]) if len(state) >= size else state, self.env_id)
        if fields["ale"].rstrip(b"\0") != _ALE_VERSION:  # another emulator's state layout
            made = fields["ale"].rstrip(b"\0").decode("ascii", "replace")
            raise BadSnapshot(f"a state of ale-py {made}; this runtime runs ale-py {ale_py.__version__}")
        rom = fields["rom"].rstrip(b"\0").decode("ascii", "replace")
        if rom != self.rom:
            raise BadSnapshot(f"a state of the ROM {rom!r}; this runtime runs {self.rom!r}")
        check_range("ale_bytes", fields["ale_bytes"], 1, MAX_ALE_STATE_BYTES)
        check_range("indices_bytes", fields["indices_bytes"], 1, MAX_SCREEN_BYTES)
        check_range("rgb_bytes", fields["rgb_bytes"], 1, MAX_SCREEN_BYTES)
        check_range("noops", fields["noops"], 0, self.noop_max)
        check_range("held", fields["held"], 0, (1 << len(KEYS)) - 1)
        check_range("last", fields["last"], 0, len(Action.__members__) - 1)
        limit = self.max_episode_frames if self.max_episode_frames is not None else 2**32 - 1
        check_range("frame", fields["frame"], 0, limit)
        ends = np.cumsum([size, fields["ale_bytes"], fields["indices_bytes"], fields["rgb_bytes"]])
        if len(state) != ends[-1]:
            raise BadSnapshot(f"an {self.env_id} state of these sizes is {ends[-1]} bytes, not {len(state)}")
        ale_state = bytes(state[ends[0]:ends[1]])
        # ALE's state names its ROM's MD5 near its start: a state of another cartridge
        # is refused before the emulator reads it.
        if self._rom_md5 not in ale_state[:128]:
            raise BadSnapshot(f"ALE's state in these bytes is not of the cartridge {self.rom!r}")
        screens = []
        for blob, array in ((state[ends[1]:ends[2]], self._shown), (state[ends[2]:ends[3]], self._screen)):
            try:
                raw = zlib.decompressobj().decompress(bytes(blob), array.nbytes + 1)
            except zlib.error as exc:
                raise BadSnapshot(f"a saved screen is not zlib data ({exc})") from None
            if len(raw) != array.nbytes:
                raise BadSnapshot(f"a saved screen is {array.nbytes} bytes, not {len(raw)}")
            screens.append(np.frombuffer(raw, np.uint8).reshape(array.shape))
        return fields, ale_state, screens[0], screens[1]

    def state_digest(self) -> bytes:
        """RAM, the frame counters and the screen shown: what a restore must bring back."""
        self._read_indices()
        digest = hashlib.blake2b(self.ale.getRAM().tobytes(), digest_size=16)
        digest.update(bytes((self.held, self.done)))
        digest.update(self.frame.to_bytes(8, "big"))
        digest.update(self._shown.data)
        return digest.digest()

    def close(self) -> None:
        """Drop the emulator; the runtime cannot be reset or stepped after this."""
        vars(self).pop("ale", None)
        vars(self).pop("_start_state", None)

    def _info(self) -> dict[str, Any]:
        return {"lives": int(self.ale.lives()), "frame": self.frame}

    def held_input(self) -> tuple[frozenset[str], tuple[int, int, int]]:
        return frozenset(k for k, bit in _KEY_BITS.items() if self.held & bit), (0, 0, 0)

    def take_damage(self) -> list[tuple[int, int, int, int]] | None:
        damage, self._damage = self._damage, []
        return damage

    def _show(self) -> None:
        """Enlarge :attr:`_screen` into the framebuffer (at scale 1 they are one array)."""
        if self.scale > 1:
            for column in range(self.scale):
                self._wide_pixels[:, :, column] = self._screen_pixels
            for row in range(self.scale):
                self._rows[:, row] = self._wide

    def _draw(self) -> None:
        out = self.into
        if out is not None and self.scale == 1:  # a batch step's slot: the framebuffer later
            self.ale.getScreenRGB(out)
            self.into = None
            self._stale = True
        else:
            self.ale.getScreenRGB(self._screen)
            self._stale = False
            self._show()
        damage = self._damage
        if damage is not None and len(damage) >= MAX_DAMAGE_RECTS:  # nobody takes it
            damage = self._damage = None
        if damage is None:  # nobody compares rows now: the indices only when asked
            self._unread = True
            return
        if self._unread:  # the last screen's were never read: no rows to compare with
            self._read_indices()
            self._damage = None  # (the server compares this screen whole, then rows again)
            return
        self.ale.getScreen(self._indices)
        changed = np.flatnonzero((self._rows_now != self._rows_shown).any(axis=1)).tolist()
        scale, start = self.scale, None
        for i, row in enumerate(changed):  # runs of changed rows: full-width bands
            if start is None:
                start = row
            if i + 1 == len(changed) or changed[i + 1] != row + 1:
                damage.append((0, start * scale, self.width, (row + 1 - start) * scale))
                start = None
        self._indices, self._shown = self._shown, self._indices
        self._rows_now, self._rows_shown = self._rows_shown, self._rows_now


def ale_seed(seed: int | None) -> int:
    """The seed of ALE's generator for an episode of ``seed``, as ale-py's
    ``AtariEnv.seed_game`` derives it (the second word of ``SeedSequence(seed)``'s state,
    as an int32); None draws fresh entropy."""
    word = np.random.SeedSequence(seed).generate_state(n_words=2)[1]
    return int(word.astype(np.int32))


def _pixels(frame: np.ndarray) -> np.ndarray:
    """``uint8[H, W, 3]`` as ``[H, W]`` 3-byte items, a view: numpy copies whole items
    faster than bytes."""
    return frame.view(np.dtype("V3"))[..., 0]


def _runtime_class(rom: str) -> type[AtariRuntime]:
    name = _game_name(rom)
    title = rom.replace("_", " ").title()
    attributes = {
        "__module__": __name__,
        "__qualname__": name,
        "__doc__": f"The Atari 2600 game {title} (ale-py ROM {rom!r}).",
        "rom": rom,
        "env_id": env_id_for(rom),
        "height": SCREEN_HEIGHTS.get(rom, ATARI_HEIGHT),
        "description": f"Atari 2600 {title}: arrows and space as the joystick; game score",
    }
    return type(name, (AtariRuntime,), attributes)


def _runnable_roms() -> list[str]:
    """The ROMs the wheel ships that its emulator can run (0.12.1 ships 4 it cannot).

    Reads each ROM's checksum only: no ROM is loaded, no emulator runs.
    """
    probe = ALEInterface()
    runnable = []
    for rom in roms.get_all_rom_ids():
        path = roms.get_rom_path(rom)
        if path is not None and probe.isSupportedROM(str(path)):
            runnable.append(rom)
    return runnable


#: env id -> runtime class, read by ``runtimes.registry``.
RUNTIMES: dict[str, type[AtariRuntime]] = {
    cls.env_id: cls for cls in map(_runtime_class, _runnable_roms())
}
