"""What ale-py's users expect of an Atari remote: its v5 keywords, ``get_action_meanings()``,
``info["lives"]`` on every step, and ``env.unwrapped.ale`` for gymnasium's
``AtariPreprocessing``.

Holds :class:`RemoteAtariEnv` and :class:`RemoteAtariVectorEnv` (``gymnasium.make`` and
``make_vec`` build these for ``atari.*`` ids), :class:`ALEView` (their ``ale``), the ale-py
keywords (:data:`ALE_KEYWORDS`, :func:`runtime_options`, :func:`serve_args`) and
:func:`check_served` (the remotes run what was asked).

**Where things happen.** The emulator runs in the remote. ``repeat_action_probability``
(sticky actions) is applied there by ALE itself, frame by frame, from a generator the
episode's seed seeds as ale-py seeds its own, so a lockstep episode is the same for the
same seed and actions; ``full_action_space`` and ``noop_max`` are runtime options too.
They reach a remote as ``serve --option KEY=VALUE`` when ``gymnasium.make`` starts it; a
remote given by address must already run them (its describe says), else
:func:`check_served` names the ``serve`` line that would. ``frameskip`` is the env's own.

**AtariPreprocessing.** It wants the env's own frame skipping off
(``env.unwrapped._frameskip == 1``), ``get_action_meanings()[0] == "NOOP"``,
``np_random`` for its no-op starts, and ``ale.lives()``, ``ale.getScreenRGB(buffer)``,
``ale.getScreenGrayscale(buffer)``. :class:`ALEView` answers those from the last frame
and info the env returned (the grayscale is ALE's own formula on the RGB screen:
:func:`grayscale`), and a seeded reset sets ``np_random`` as ale-py's ``AtariEnv`` does,
so the same seed draws the same no-op starts. With ``noop_max=0`` (the remote's own no-op
starts off) and ``mode="lockstep"``, the preprocessed observations are ale-py's, frame
for frame (``tests/remotes/test_ale.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode

from .env import RemoteEnv
from .states import EnvState
from .vector import RemoteVectorEnv

#: ale-py's keywords (beside ``frameskip``) an ``atari.*`` id takes, and ``noop_max``
#: (the remote's own no-op starts: 0 to 30 NOOP frames a seed picks; 0 turns them off,
#: as ``AtariPreprocessing`` does its own). Each is the runtime option of the same name.
ALE_KEYWORDS: Final = ("repeat_action_probability", "full_action_space", "noop_max")
#: ALE's grayscale weights (``ColourPalette::convertGrayscale``), in ten-thousandths.
GRAY_WEIGHTS: Final = (2989, 5870, 1140)


def runtime_options(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take ale-py's keywords out of ``kwargs`` (the ones given, not None); a TypeError for
    them on an id that is not Atari."""
    given: dict[str, Any] = {k: kwargs.pop(k) for k in ALE_KEYWORDS if k in kwargs}
    given = {k: v for k, v in given.items() if v is not None}
    if given and not env_id.startswith("atari."):
        raise TypeError(
            f"{', '.join(given)}: ale-py's keywords, for atari.* ids only; {env_id} takes none"
        )
    if "repeat_action_probability" in given:
        given["repeat_action_probability"] = float(given["repeat_action_probability"])
    if "full_action_space" in given:
        given["full_action_space"] = bool(given["full_action_space"])
    return given


def serve_args(options: Mapping[str, Any]) -> list[str]:
    """``serve`` arguments that give a remote these runtime options."""
    args: list[str] = []
    for key, value in options.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        args += ["--option", f"{key}={text}"]
    return args


def check_served(
    env_id: str, options: Mapping[str, Any], describes: Iterable[tuple[str, Mapping[str, Any]]]
) -> None:
    """ValueError unless every remote (name, describe) runs ``options``; the message
    names the ``serve`` line that would."""
    wrong = []
    for name, describe in describes:
        for key, wanted in options.items():
            served = describe.get(key)
            if served != wanted:
                wrong.append(f"{name} serves {key}={served!r}")
    if wrong:
        asked = ", ".join(f"{k}={v!r}" for k, v in options.items())
        raise ValueError(
            f"{'; '.join(wrong)}, not {asked}: a remote takes these when it starts "
            f"(universe-remote serve {env_id} {' '.join(serve_args(options))}); or let "
            "gymnasium.make start its remotes (remotes=N)"
        )


def grayscale(rgb: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """ALE's grayscale of an RGB screen: ``round(0.2989 r + 0.5870 g + 0.1140 b)``, each
    colour of its NTSC palette (checked against ``getScreenGrayscale`` on every ROM of
    ale-py 0.12.1 but Air Raid, whose PAL palette ALE greys otherwise)."""
    r, g, b = GRAY_WEIGHTS
    pixels = np.asarray(rgb, np.uint32)
    weighted = pixels[..., 0] * r + pixels[..., 1] * g + pixels[..., 2] * b
    gray = ((weighted + 5000) // 10000).astype(np.uint8)
    if out is None:
        return gray
    out[...] = gray
    return out


class ALEView:
    """``env.unwrapped.ale`` of an Atari remote: the emulator runs in the remote, so this
    answers from the last frame and info the env returned. It has what gymnasium's
    ``AtariPreprocessing`` and the usual Atari wrappers read (:meth:`lives`,
    :meth:`getScreenRGB`, :meth:`getScreenGrayscale`, :meth:`getScreenDims`,
    :meth:`game_over`, :meth:`getEpisodeFrameNumber`); anything else is an
    AttributeError that says so."""

    def __init__(self, env: RemoteAtariEnv) -> None:
        self._env = env

    def lives(self) -> int:
        return self._env.lives

    def getScreenRGB(self, out: np.ndarray | None = None) -> np.ndarray:  # noqa: N802 (ALE's name)
        screen = self._env.last_obs
        if out is None:
            return screen.copy()
        out[...] = screen
        return out

    def getScreenGrayscale(self, out: np.ndarray | None = None) -> np.ndarray:  # noqa: N802
        return grayscale(self._env.last_obs, out)

    def getScreenDims(self) -> tuple[int, int]:  # noqa: N802
        height, width = self._env.last_obs.shape[:2]
        return int(height), int(width)

    def game_over(self, with_truncation: bool = True) -> bool:
        return self._env.ended

    def getEpisodeFrameNumber(self) -> int:  # noqa: N802
        return self._env.episode_frame

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"ale.{name}: the emulator runs in the remote; its ale answers lives(), "
            "getScreenRGB(), getScreenGrayscale(), getScreenDims(), game_over() and "
            "getEpisodeFrameNumber() from the last step"
        )


def ale_np_random(seed: int) -> np.random.Generator:
    """The ``np_random`` ale-py's ``AtariEnv.reset(seed=seed)`` leaves (``seed_game``:
    the first word of ``SeedSequence(seed)``'s state seeds it)."""
    word = np.random.SeedSequence(seed).generate_state(n_words=2)[0]
    generator, _ = seeding.np_random(int(word))
    return generator


class RemoteAtariEnv(RemoteEnv):
    """A :class:`~remotes.env.RemoteEnv` of an ``atari.*`` remote, with ale-py's
    ``AtariEnv`` surface: :meth:`get_action_meanings`, :attr:`ale` (:class:`ALEView`),
    ``_frameskip``, ``info["lives"]`` on every reset and step, and a seeded
    ``np_random`` equal to ale-py's. Takes RemoteEnv's arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The last observation, lives, episode frame and end the env returned.
        self.last_obs: np.ndarray = np.zeros(self.observation_space.shape or (), np.uint8)
        self.lives = int(self.describe.get("lives", 0))
        self.episode_frame = 0
        self.ended = False
        self._ale = ALEView(self)

    @property
    def ale(self) -> ALEView:
        return self._ale

    @property
    def _frameskip(self) -> int:
        """Frames a step spans, under ale-py's name (``AtariPreprocessing`` checks it)."""
        return self.frameskip

    def get_action_meanings(self) -> list[str]:
        """ALE's names of the actions of the ``Discrete`` space ``gymnasium.make`` gives
        (``NOOP``, ``FIRE``, ``UP``, ...), as ale-py's ``get_action_meanings()``."""
        return list(self.describe.get("actions", []))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        if seed is not None:  # as ale-py's AtariEnv.reset: its no-op starts draw from this
            self._np_random = ale_np_random(seed)
        self.lives = int(self.describe.get("lives", self.lives))
        info["lives"] = self.lives
        self.last_obs, self.episode_frame, self.ended = obs, int(info.get("frame", 0)), False
        return obs, info

    def restore_state(self, state: EnvState) -> None:
        """As :meth:`RemoteEnv.restore_state`; :attr:`ale` shows the restored frame."""
        super().restore_state(state)
        self.last_obs, self.ended = self._frame, False

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        self.lives = int(info.setdefault("lives", self.lives))
        self.last_obs, self.ended = obs, terminated or truncated
        self.episode_frame = int(info.get("frame", self.episode_frame))
        return obs, reward, terminated, truncated, info


class RemoteAtariVectorEnv(RemoteVectorEnv):
    """A :class:`~remotes.vector.RemoteVectorEnv` of ``atari.*`` remotes: ``info["lives"]``
    for every env on every reset and step (an env that starts an episode in a step gets
    the game's starting lives), and :meth:`get_action_meanings`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._start_lives = np.array([int(d.get("lives", 0)) for d in self.describes])
        self._lives = self._start_lives.copy()
        self._ended = np.zeros(self.num_envs, bool)

    def get_action_meanings(self) -> list[str]:
        """ALE's names of each env's actions (``Discrete`` in ``gymnasium.make_vec``'s)."""
        return list(self.describes[0].get("actions", []))

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, infos = super().reset(seed=seed, options=options)
        self._start_lives = np.array([int(d.get("lives", 0)) for d in self.describes])
        self._lives = self._start_lives.copy()
        self._ended[:] = False
        infos["lives"], infos["_lives"] = self._lives.copy(), np.ones(self.num_envs, bool)
        return obs, infos

    def set_states(self, states: dict[int, EnvState]) -> None:
        """As :meth:`RemoteVectorEnv.set_states`: each env set runs its restored episode."""
        super().set_states(states)
        self._ended[list(states)] = False

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rewards, terminated, truncated, infos = super().step(actions)
        ended = np.logical_or(terminated, truncated)
        # Envs whose returned frame starts an episode: the step after an end (NEXT_STEP),
        # or the ending step itself (SAME_STEP, the old episode's info in final_info).
        starting = ended if self.autoreset_mode is AutoresetMode.SAME_STEP else self._ended
        given = infos.get("_lives", np.zeros(self.num_envs, bool))
        if "lives" in infos:
            self._lives[given] = np.asarray(infos["lives"])[given]
        self._lives[starting & ~given] = self._start_lives[starting & ~given]
        self._ended = ended
        infos["lives"], infos["_lives"] = self._lives.copy(), np.ones(self.num_envs, bool)
        return obs, rewards, terminated, truncated, infos
