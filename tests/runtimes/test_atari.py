"""The Atari runtimes: the compliance suite on Pong, the env ids, then the keyboard ->
joystick rule, seeds, episodes and scaling, checked through pixels and rewards.

Skipped where the ``atari`` extra (ale-py) is not installed; CI installs it. Pong's
player paddle is found by its colour in the framebuffer, as an agent or a human would.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")

from runtimes import atari, registry  # noqa: E402 (after the importorskip)
from runtimes.atari import AtariRuntime, joystick_actions  # noqa: E402
from runtimes.base import InputEvent, KeyEvent, PointerEvent  # noqa: E402
from runtimes.compliance import RuntimeCompliance  # noqa: E402

PONG = "atari.Pong-v0"
#: Pong's player (right) paddle: its colour, its columns, the rows it moves within.
PADDLE_COLOUR = (92, 186, 92)
PADDLE_COLUMNS = slice(140, 144)
PLAYFIELD_TOP, PLAYFIELD_BOTTOM = 34, 194
#: Frames at which Pong, with no input from the start of the game, loses its first points
#: (FIELD-NOTES, "Runtimes"), counted from the first frame the emulator plays.
PONG_IDLE_LOSSES = [256, 396, 536]


class TestPongCompliance(RuntimeCompliance):
    env_id = PONG

    def make_runtime(self) -> AtariRuntime:
        return make(self.env_id)  # only test_registered asks the registry


@pytest.fixture(scope="module")
def pong() -> Iterator[AtariRuntime]:
    """One Pong emulator for the tests that only reset and step it (loading one: ~80 ms)."""
    runtime = make(PONG)
    yield runtime
    runtime.close()


def make(env_id: str = PONG, **kwargs: Any) -> AtariRuntime:
    """A runtime straight from :data:`runtimes.atari.RUNTIMES`, so that a registry that does
    not list the family fails the registry tests only."""
    return atari.RUNTIMES[env_id](**kwargs)


def paddle_centre(frame: np.ndarray) -> float:
    """The row at the middle of the player's paddle."""
    column = frame[PLAYFIELD_TOP:PLAYFIELD_BOTTOM, PADDLE_COLUMNS]
    rows = np.flatnonzero((column == PADDLE_COLOUR).all(axis=-1).any(axis=-1))
    assert rows.size, "the player's paddle is not on screen"
    return PLAYFIELD_TOP + float(rows.min() + rows.max()) / 2


def digests(runtime: AtariRuntime, seed: int, script: Sequence[Sequence[InputEvent]]) -> list[str]:
    runtime.reset(seed)
    hashes = [hashlib.blake2b(runtime.framebuffer.tobytes(), digest_size=16).hexdigest()]
    for events in script:
        runtime.step(events)
        hashes.append(hashlib.blake2b(runtime.framebuffer.tobytes(), digest_size=16).hexdigest())
    return hashes


def held_keys_script(frames: int) -> list[list[InputEvent]]:
    """Hold Up, then Up and space, then Down, a quarter of the frames each; then let go."""
    quarter = frames // 4
    script: list[list[InputEvent]] = [[] for _ in range(frames)]
    script[0] = [KeyEvent("Up", True)]
    script[quarter] = [KeyEvent("space", True)]
    script[2 * quarter] = [KeyEvent("Up", False), KeyEvent("space", False), KeyEvent("Down", True)]
    script[3 * quarter] = [KeyEvent("Down", False)]
    return script


# Env ids -----------------------------------------------------------------------------


def test_an_env_id_for_every_rom_the_wheel_can_run() -> None:
    ids = [env_id for env_id in registry.env_ids() if env_id.startswith("atari.")]
    known = {
        "atari.Pong-v0",
        "atari.Breakout-v0",
        "atari.MontezumaRevenge-v0",
        "atari.SpaceInvaders-v0",
        "atari.TicTacToe3D-v0",
    }
    assert known <= set(ids)
    shipped = ale_py.roms.get_all_rom_ids()
    probe = ale_py.ALEInterface()
    refused = {
        rom for rom in shipped if not probe.isSupportedROM(str(ale_py.roms.get_rom_path(rom)))
    }
    # ale-py 0.12.1 ships 108 ROMs, 4 of which (combat, joust, maze_craze, warlords) its
    # emulator refuses: loadROM on them ends the process, so they get no env id.
    assert len(refused) <= 4
    assert len(ids) == len(shipped) - len(refused)
    assert set(ids) == {atari.env_id_for(rom) for rom in shipped if rom not in refused}


def test_runtime_classes_are_described_without_an_emulator() -> None:
    for env_id, cls in atari.RUNTIMES.items():
        assert issubclass(cls, AtariRuntime)
        assert cls.env_id == env_id == atari.env_id_for(cls.rom)
        assert (cls.width, cls.fps, cls.buttons) == (160, 60.0, 0)
        assert cls.height == atari.SCREEN_HEIGHTS.get(cls.rom, 210)
        assert cls.keys == ("Up", "Down", "Left", "Right", "space")
        assert cls.description
    assert atari.RUNTIMES["atari.MontezumaRevenge-v0"].rom == "montezuma_revenge"


@pytest.mark.parametrize("env_id", ["atari.Adventure-v0", "atari.Carnival-v0"])
def test_games_with_taller_screens(env_id: str) -> None:
    runtime = make(env_id)
    assert runtime.height == type(runtime).height == runtime.ale.getScreenDims()[0]
    assert runtime.framebuffer.shape == (runtime.height, 160, 3)
    runtime.step([KeyEvent("Up", True)])
    assert runtime.framebuffer.any()


# Keyboard -> joystick ---------------------------------------------------------------------

ALL_ACTIONS = list(ale_py.Action.__members__)


def action_for(table: list[str], *keys: str) -> str:
    return table[sum(1 << atari.KEYS.index(key) for key in keys)]


def test_full_joystick_takes_every_combination() -> None:
    table = joystick_actions(ALL_ACTIONS)
    assert action_for(table) == "NOOP"
    assert action_for(table, "space") == "FIRE"
    assert action_for(table, "Up", "Left", "space") == "UPLEFTFIRE"
    assert action_for(table, "Down", "Right") == "DOWNRIGHT"
    assert action_for(table, "Up", "Down") == "NOOP"  # opposite arrows cancel
    assert action_for(table, "Up", "Down", "Left", "space") == "LEFTFIRE"


def test_unsupported_combinations_fall_back_to_the_nearest_action() -> None:
    breakout = joystick_actions(["NOOP", "FIRE", "RIGHT", "LEFT"])
    assert action_for(breakout, "Left", "space") == "LEFT"  # drop fire first
    assert action_for(breakout, "Up", "space") == "FIRE"  # then the vertical direction
    assert action_for(breakout, "Up", "Right") == "RIGHT"
    assert action_for(breakout, "Down") == "NOOP"
    freeway = joystick_actions(["NOOP", "UP", "DOWN"])
    assert action_for(freeway, "Up", "Left") == "UP"  # then the horizontal one
    assert action_for(freeway, "Down", "Right", "space") == "DOWN"
    assert action_for(freeway, "space") == "NOOP"
    checkers = joystick_actions(["FIRE", "UPRIGHT", "UPLEFT", "DOWNRIGHT", "DOWNLEFT"])
    assert action_for(checkers, "Up", "Right") == "UPRIGHT"
    assert action_for(checkers, "Up") == "NOOP"  # the joystick at rest, always accepted
    assert action_for(checkers) == "NOOP"


@pytest.mark.parametrize("env_id", ["atari.Pong-v0", "atari.Breakout-v0", "atari.Freeway-v0"])
def test_every_key_state_maps_to_an_action_of_the_game(env_id: str) -> None:
    runtime = make(env_id)
    assert runtime.describe()["actions"] == [a.name for a in runtime.ale.getMinimalActionSet()]
    table = joystick_actions(runtime.actions, rotated=runtime.rom in atari.ROTATED_ROMS)
    assert set(table) <= set(runtime.actions) | {"NOOP"}
    assert runtime.joystick_action(["Left", "space"]) == action_for(table, "Left", "space")


def test_pong_arrows_are_turned_to_its_paddle(pong: AtariRuntime) -> None:
    assert pong.joystick_action(["Up"]) == "RIGHT"  # RIGHT moves Pong's paddle up
    assert pong.joystick_action(["Down"]) == "LEFT"
    assert pong.joystick_action(["Up", "space"]) == "RIGHTFIRE"
    assert pong.joystick_action(["Left"]) == pong.joystick_action(["Right"]) == "NOOP"
    assert pong.joystick_action(["a", "Return"]) == "NOOP"


def test_holding_up_or_down_moves_the_paddle(pong: AtariRuntime) -> None:
    pong.reset(0)
    for _ in range(20):
        pong.step([])
    rest = paddle_centre(pong.framebuffer)
    pong.step([KeyEvent("Up", True)])
    rows = []
    for _ in range(15):  # no more events: the key is still held
        pong.step([PointerEvent(5, 5, 1)])
        rows.append(paddle_centre(pong.framebuffer))
    assert rows[-1] < rest - 30
    assert rows == sorted(rows, reverse=True)
    pong.step([KeyEvent("Up", False), KeyEvent("Down", True)])
    for _ in range(30):
        pong.step([])
    assert paddle_centre(pong.framebuffer) > rest + 30


def test_a_tap_within_one_frame_still_counts(pong: AtariRuntime) -> None:
    rows = []
    for tap in ([], [KeyEvent("Up", True), KeyEvent("Up", False)]):
        pong.reset(0)
        for _ in range(20):
            pong.step([])
        pong.step(tap)
        for _ in range(5):  # the key is up again: the paddle settles where the tap left it
            pong.step([])
        rows.append(paddle_centre(pong.framebuffer))
    assert rows[1] < rows[0]


def test_keys_it_does_not_use_change_nothing(pong: AtariRuntime) -> None:
    script: list[list[InputEvent]] = [[] for _ in range(60)]
    assert digests(pong, 4, [[KeyEvent("a", True), PointerEvent(1, 2, 1)], *script]) == (
        digests(pong, 4, [[], *script])
    )


# Seeds and episodes -----------------------------------------------------------------------


def lost_points(runtime: AtariRuntime, frames: int) -> list[int]:
    """Frames (as ``info["frame"]``) at which an idle player lost a point."""
    losses = []
    for _ in range(frames):
        result = runtime.step([])
        assert result.reward in (0.0, -1.0)
        if result.reward:
            losses.append(result.info["frame"])
    return losses


def test_idle_pong_loses_points_at_known_frames(pong: AtariRuntime) -> None:
    exact = make(noop_max=0)
    exact.reset(11)
    assert exact.noops == 0
    assert lost_points(exact, 540) == PONG_IDLE_LOSSES
    # No-op starts only shift the game: the emulator has already played ``noops`` frames.
    pong.reset(11)
    assert pong.noops > 0
    assert lost_points(pong, 540) == [frame - pong.noops for frame in PONG_IDLE_LOSSES]


def test_same_seed_same_frames_other_seed_other_frames(pong: AtariRuntime) -> None:
    script = held_keys_script(400)
    first = digests(pong, 123, script)
    assert first == digests(make(), 123, script)  # another emulator
    pong.reset(124)
    assert pong.noops != 0  # seed 123 draws 0 no-ops, 124 draws 27
    assert digests(pong, 124, script) != first


@pytest.mark.parametrize("env_id", ["atari.Assault-v0", "atari.Qbert-v0"])
def test_a_seed_replays_after_another_episode(env_id: str) -> None:
    # ALE's reset_game() alone leaves Assault's next episode depending on the last one, and
    # restoring a snapshot alone does the same to Qbert's: reset() needs both.
    runtime = make(env_id)
    rng = np.random.default_rng(0)
    keys = list(atari.KEYS)
    script: list[list[InputEvent]] = [
        [KeyEvent(str(rng.choice(keys)), bool(rng.random() < 0.6))] for _ in range(300)
    ]
    first = digests(runtime, 3, script)
    digests(runtime, 4, script[::-1] * 3)
    assert digests(runtime, 3, script) == first


def test_sticky_actions_replay_under_the_same_seed() -> None:
    sticky = make(repeat_action_probability=0.25, noop_max=0)
    script = held_keys_script(200)
    first = digests(sticky, 5, script)
    assert digests(sticky, 5, script) == first
    assert digests(sticky, 6, script) != first  # other seed, other repeats
    assert sticky.describe()["repeat_action_probability"] == 0.25


def press(runtime: AtariRuntime, held: list[str], action: int) -> tuple[list[InputEvent], list[str]]:
    """The key events that switch from holding ``held`` to action ``action``'s keys."""
    wanted = runtime.action_keys[action]
    events: list[InputEvent] = [KeyEvent(k, False) for k in held if k not in wanted]
    events += [KeyEvent(k, True) for k in wanted if k not in held]
    return events, list(wanted)


@pytest.mark.parametrize(
    ("game", "sticky", "full"),
    [("pong", 0.0, False), ("pong", 0.25, True), ("breakout", 0.25, False), ("berzerk", 0.0, False),
     ("solaris", 0.0, True)],
)
def test_a_seed_plays_ale_py_s_game(game: str, sticky: float, full: bool) -> None:
    """With its own no-op starts off, a seed gives the episode ale-py's AtariEnv gives for
    that seed, sticky repeats included, action for action (Berzerk and Solaris start
    differently from a bare snapshot of the loaded ROM: reset() must reset after it)."""
    from ale_py.env import AtariEnv

    theirs = AtariEnv(game, frameskip=1, repeat_action_probability=sticky, full_action_space=full)
    ours = make(atari.env_id_for(game), repeat_action_probability=sticky, full_action_space=full,
                noop_max=0)
    assert list(ours.actions) == theirs.get_action_meanings()
    digests(ours, 99, [[]] * 50)  # an earlier episode must not matter
    rng = np.random.default_rng(4)
    for seed in (11, 12):
        obs, info = theirs.reset(seed=seed)
        ours.reset(seed)
        assert np.array_equal(ours.framebuffer, obs) and ours.describe()["lives"] == info["lives"]
        held: list[str] = []
        for _ in range(1500):
            action = int(rng.integers(len(ours.actions)))
            obs, reward, terminated, _, info = theirs.step(action)
            events, held = press(ours, held, action)
            result = ours.step(events)
            assert np.array_equal(ours.framebuffer, obs)
            assert (result.reward, result.done, result.info["lives"]) == (reward, terminated, info["lives"])
            if terminated:
                break
    theirs.close()


def test_the_full_action_space_has_all_18_actions_each_played_by_its_keys() -> None:
    for env_id in (PONG, "atari.Breakout-v0"):
        runtime = make(env_id, full_action_space=True)
        assert list(runtime.actions) == list(ale_py.Action.__members__)
        assert len(runtime.action_keys) == 18
        for name, keys in zip(runtime.actions, runtime.action_keys, strict=True):
            assert runtime.joystick_action(keys) == name
        described = runtime.describe()
        assert described["full_action_space"] is True and described["actions"] == list(runtime.actions)
    assert make(PONG).describe()["full_action_space"] is False
    assert len(make(PONG).actions) == 6


def test_describe_says_the_lives_an_episode_starts_with() -> None:
    breakout = make("atari.Breakout-v0")
    breakout.reset(0)
    assert breakout.describe()["lives"] == 5
    assert make(PONG).describe()["lives"] == 0
    assert atari.AtariRuntime.announced_info == ("lives",)


def test_game_over_is_done_until_reset(pong: AtariRuntime) -> None:
    pong.reset(2)
    total, frames = 0.0, 0
    while True:
        result = pong.step([])
        total, frames = total + result.reward, frames + 1
        if result.done:
            break
        assert frames < 5000, "idle Pong should lose 21-0 in about 3,000 frames"
    assert total == -21.0
    assert pong.ale.game_over()
    for _ in range(3):
        after = pong.step([KeyEvent("Up", True)])
        assert after.done and after.reward == 0.0 and after.info["frame"] == frames
    pong.reset(2)
    assert not pong.step([]).done


def test_episodes_end_at_max_episode_frames() -> None:
    runtime = make(max_episode_frames=50)
    runtime.reset(0)
    done = [runtime.step([]).done for _ in range(50)]
    assert done == [False] * 49 + [True]
    assert runtime.describe()["max_episode_frames"] == 50


def test_an_episode_can_end_inside_an_advance() -> None:
    runtime = make(max_episode_frames=50)
    runtime.reset(0)
    first, second, after = (runtime.advance([], 30) for _ in range(3))
    assert (first.frames, first.done, first.info["frame"]) == (30, False, 30)
    assert (second.frames, second.done, second.info["frame"]) == (20, True, 50)
    assert (after.frames, after.done, after.reward) == (0, True, 0.0)


def test_info_counts_lives_and_frames() -> None:
    breakout = make("atari.Breakout-v0")
    breakout.reset(0)
    result = breakout.step([KeyEvent("space", True)])
    assert result.info == {"lives": 5, "frame": 1}
    assert breakout.describe()["rom"] == "breakout"


# Scale -------------------------------------------------------------------------------


def test_scaled_frames_are_the_screen_repeated(pong: AtariRuntime) -> None:
    big = make(scale=2)
    assert (big.width, big.height) == (320, 420)
    assert big.framebuffer.shape == (420, 320, 3)
    assert (big.describe()["width"], big.describe()["height"]) == (320, 420)
    assert type(big).width == 160  # the class still describes the unscaled game
    framebuffer = big.framebuffer
    for runtime in (pong, big):
        runtime.reset(8)
    for events in [[], *held_keys_script(120)]:
        pong.step(events)
        big.step(events)
        expected = np.repeat(np.repeat(pong.framebuffer, 2, axis=0), 2, axis=1)
        np.testing.assert_array_equal(big.framebuffer, expected)
    assert big.framebuffer is framebuffer


class CountingALE:
    """Stands in for a runtime's ALEInterface, counting the calls made to it."""

    def __init__(self, ale: Any) -> None:
        self.ale = ale
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.ale, name)
        if not callable(attribute):
            return attribute

        def counted(*args: Any) -> Any:
            self.calls[name] += 1
            return attribute(*args)

        return counted


@pytest.mark.parametrize("scale", [1, 2])
def test_an_advance_fetches_and_scales_the_screen_once(scale: int) -> None:
    runtime, stepped = make(scale=scale), make(scale=scale)
    for each in (runtime, stepped):
        each.reset(9)
    spy = CountingALE(runtime.ale)
    runtime.ale = spy  # type: ignore[assignment]
    result = runtime.advance([KeyEvent("Up", True)], 10)
    assert result.frames == 10
    assert spy.calls["act"] == 10
    assert spy.calls["getScreenRGB"] == 1
    stepped.step([KeyEvent("Up", True)])
    for _ in range(9):
        stepped.step([])
    np.testing.assert_array_equal(runtime.framebuffer, stepped.framebuffer)


@pytest.mark.parametrize("scale", [0, atari.MAX_SCALE + 1, 1.5])
def test_bad_scales_are_refused(scale: object) -> None:
    with pytest.raises(ValueError, match="scale must be an integer"):
        make(scale=scale)


def test_close_twice() -> None:
    runtime = make()
    runtime.close()
    runtime.close()


@pytest.mark.parametrize(("env_id", "scale"), [(PONG, 1), ("atari.Breakout-v0", 2)])
def test_the_damage_covers_every_pixel_a_frame_changed(env_id: str, scale: int) -> None:
    """Atari reports the rows its palette screen changed (take_damage) so the VNC server
    skips its compare: every changed pixel must lie in a reported band, a reset reports
    None (the server compares the new episode's screen), and the bands are smaller than
    the screen."""
    game = make(env_id, scale=scale)
    rng = np.random.default_rng(1)
    try:
        game.reset(seed=2)
        assert game.take_damage() is None
        previous = game.framebuffer.copy()
        reported = 0
        for frame in range(600):
            keys = [KeyEvent(str(rng.choice(list(atari.KEYS))), bool(rng.integers(2)))]
            result = game.advance(keys if frame % 3 == 0 else [], 1 if frame % 5 else 4)
            damage = game.take_damage()
            assert damage is not None
            covered = np.zeros(game.framebuffer.shape[:2], bool)
            for x, y, w, h in damage:
                assert x == 0 and w == game.width and y % scale == 0 and h % scale == 0
                covered[y : y + h] = True
                reported += w * h
            changed = (game.framebuffer != previous).any(axis=2)
            assert not (changed & ~covered).any(), f"frame {frame}: a change outside the damage"
            previous = game.framebuffer.copy()
            if result.done:
                game.reset(seed=frame)
                assert game.take_damage() is None
                previous = game.framebuffer.copy()
        assert 0 < reported < 600 * game.width * game.height / 2
    finally:
        game.close()


def test_a_screen_drawn_into_a_slot_is_the_framebuffer_when_that_is_read() -> None:
    """A batch step's frame goes straight into its slot (``runtime.into``); the
    framebuffer, the snapshot's screen and the next draw all still show that frame, as
    if it had been drawn there: what VNC viewers, recordings and snapshots read."""
    into_runtime, plain = make(), make()
    try:
        into_runtime.reset(seed=3)
        plain.reset(seed=3)
        slot = np.zeros_like(plain.framebuffer)
        for step in range(40):
            events = [KeyEvent("Up", step % 10 < 5)]
            into_runtime.into = slot
            into_runtime.advance(events, 4)
            plain.advance(events, 4)
            assert into_runtime.into is None  # taken: the slot holds this step's screen
            assert np.array_equal(slot, plain.framebuffer)
            if step % 13 == 12:  # read now and then, stale in between
                assert np.array_equal(into_runtime.framebuffer, plain.framebuffer)
        assert into_runtime.frame_shape == plain.framebuffer.shape
        state = into_runtime.snapshot()  # (its screen read while the framebuffer is stale)
        other = make()
        try:
            other.restore(state)
            assert np.array_equal(other.framebuffer, plain.framebuffer)
        finally:
            other.close()
        saved = plain.framebuffer.copy()
        into_runtime.into = slot
        into_runtime.advance([], 4)  # stale again, and ALE's screen is a step on
        into_runtime.restore(state)  # the saved screen, not ALE's
        assert np.array_equal(into_runtime.framebuffer, saved)
        assert not np.array_equal(slot, saved)
    finally:
        into_runtime.close()
        plain.close()


def test_draws_nobody_takes_the_damage_of_read_no_indices_yet_snapshots_and_digests_hold() -> None:
    """While nobody takes the damage (a lockstep agent's steps, no viewer), a draw leaves
    ALE's palette indices unread; a snapshot, a digest and the next viewer's damage read
    those of the screen shown, as if every draw had read them."""
    game, twin = make(), make()
    try:
        for runtime in (game, twin):
            runtime.reset(seed=3)
        reads = 0
        ale = game.ale

        class Counting:  # (ALE's methods are read-only: a stand-in that counts the reads)
            def __getattr__(self, name: str) -> object:
                return getattr(ale, name)

            def getScreen(self, out: np.ndarray) -> None:  # noqa: N802 (ALE's name)
                nonlocal reads
                reads += 1
                ale.getScreen(out)

        game.ale = Counting()  # type: ignore[assignment]
        for frame in range(40):
            for runtime in (game, twin):
                runtime.advance([KeyEvent("Up", frame % 2 == 0)], 4)
                if runtime is twin:
                    twin.take_damage()  # (the twin's every draw compares rows: reads them)
        assert reads == 0
        assert game.state_digest() == twin.state_digest() and reads == 1
        (fields, _, indices, rgb), (twin_fields, _, twin_indices, twin_rgb) = (
            runtime._read_snapshot(runtime.snapshot()) for runtime in (game, twin))
        assert fields == twin_fields and (indices == twin_indices).all() and (rgb == twin_rgb).all()
        for runtime in (game, twin):  # unread again
            runtime.advance([], 4)
        twin.take_damage()
        assert game.take_damage() is None  # nobody took it: the server compares whole
        for runtime in (game, twin):
            runtime.advance([], 4)
        assert game.take_damage() is None and twin.take_damage() is not None  # none to compare
        for runtime in (game, twin):
            runtime.advance([KeyEvent("Down", True)], 4)
        assert game.take_damage() == twin.take_damage()  # rows compared again
        assert game.state_digest() == twin.state_digest()
    finally:
        game.ale = ale
        game.close()
        twin.close()
