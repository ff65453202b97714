"""OpenEnv port: lockstep Pong steps/s through OpenEnv's own client (``GenericEnvClient``,
``.sync()``) against a reference OpenEnv server over ale-py written with openenv's own
server classes, against our rewarder path (``RemoteEnv`` lockstep), in one run; then what
each form of frame costs.

Rows (Pong, frameskip 4, random actions from the minimal set, the frame as a numpy array
in the agent's hand every step; rounds alternate the rows, the median is printed):

- **reference**: :class:`AtariPeer`, an ``openenv.core.env_server.Environment`` over
  ``ale_py.ALEInterface`` served by ``create_fastapi_app`` and uvicorn (its own process),
  whose observations are what OpenEnv's Atari environment sends: ``screen``, the frame as
  a flat JSON list of 100,800 integers, with ``screen_shape``, ``legal_actions``,
  ``lives``, frame numbers, and ``screen_image``, a PNG data URI Pillow writes;
- **ours, png**: ``serve atari.Pong-v0 --mode lockstep --openenv-port``, the default
  frame form (a PNG data URI, decoded with Pillow);
- **ours, list**: the same port asked for OpenEnv's flat list (``reset(screen="list")``);
- **ours, rewarder**: ``RemoteEnv`` lockstep on the same remote (frames through shared
  memory), with Pong's Discrete actions.

``python -m benchmarks.openenv_port``; ``... peer PORT`` runs the reference server alone.
"""

from __future__ import annotations

import base64
import io
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import numpy as np
import orjson

from benchmarks.atari_common import ENV_ID, FRAMESKIP, ROM, ROUNDS
from benchmarks.common import quick, ratio, table
from benchmarks.pong_rows import START_TIMEOUT, free_port, row_rewarder, served_with, timed
from envserver.openenv import frames

#: Repetitions of each frame-form measure.
FORM_REPEATS: Final = quick(200, 40)


# The reference server -------------------------------------------------------------------------


def _peer_app() -> Any:
    """The reference: OpenEnv's server classes over ALE, observations as its Atari env's."""
    from ale_py import ALEInterface, LoggerMode, roms
    from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app
    from PIL import Image

    class AtariAction(Action):
        action_id: int

    class AtariObservation(Observation):
        screen: list[int]
        screen_shape: list[int]
        legal_actions: list[int]
        lives: int = 0
        episode_frame_number: int = 0
        frame_number: int = 0
        screen_image: str | None = None

    class AtariPeer(Environment[AtariAction, AtariObservation, State]):
        def __init__(self) -> None:
            super().__init__()
            ALEInterface.setLoggerMode(LoggerMode.Error)
            self.ale = ALEInterface()
            self.ale.setFloat("repeat_action_probability", 0.0)
            rom = roms.get_rom_path(ROM)
            assert rom is not None, f"ale-py has no ROM {ROM!r}"
            self.ale.loadROM(rom)
            self.actions = self.ale.getMinimalActionSet()
            self._state = State()

        def reset(self, seed: int | None = None, episode_id: str | None = None,
                  **kwargs: Any) -> AtariObservation:
            self.ale.reset_game()
            self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
            return self._observe(0.0)

        def step(self, action: AtariAction, timeout_s: float | None = None,
                 **kwargs: Any) -> AtariObservation:
            if not 0 <= action.action_id < len(self.actions):
                raise ValueError(f"action_id {action.action_id} is not in 0..{len(self.actions) - 1}")
            reward = 0.0
            for _ in range(FRAMESKIP):
                reward += self.ale.act(self.actions[action.action_id])
                if self.ale.game_over():
                    break
            self._state.step_count += 1
            return self._observe(reward)

        @property
        def state(self) -> State:
            return self._state

        def _observe(self, reward: float) -> AtariObservation:
            screen = self.ale.getScreenRGB()
            png = io.BytesIO()
            Image.fromarray(screen).save(png, format="PNG")
            return AtariObservation(
                screen=screen.reshape(-1).tolist(), screen_shape=list(screen.shape),
                legal_actions=list(range(len(self.actions))), lives=self.ale.lives(),
                episode_frame_number=self.ale.getEpisodeFrameNumber(),
                frame_number=self.ale.getFrameNumber(), done=self.ale.game_over(), reward=reward,
                screen_image="data:image/png;base64," + base64.b64encode(png.getvalue()).decode(),
            )

    return create_fastapi_app(AtariPeer, AtariAction, AtariObservation, max_concurrent_envs=1)


def run_peer(port: int) -> None:
    import uvicorn

    uvicorn.run(_peer_app(), host="127.0.0.1", port=port, log_level="warning")


def _wait_healthy(url: str) -> None:
    import requests

    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            if requests.get(url + "/health", timeout=1.0).ok:
                return
        except requests.RequestException:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)  # polling a server we started for its first answer


@contextmanager
def peer() -> Iterator[str]:
    """The reference server in its own process: its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.openenv_port", "peer", str(port)])
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


# Rows -------------------------------------------------------------------------------------------


def row_openenv(url: str, reset: dict[str, Any]) -> float:
    """GenericEnvClient(...).sync() on ``url``: reset with ``reset``, random ``action_id``s,
    each frame made an array (the reference's and ``list``: from the list; png: Pillow)."""
    from openenv.core.generic_client import GenericEnvClient

    rng = np.random.default_rng(0)
    with GenericEnvClient(base_url=url).sync() as env:
        first = env.reset(**reset)
        shape = tuple(first.observation["screen_shape"])
        form = first.observation.get("screen_format", frames.LIST)
        n = len(first.observation["legal_actions"])

        def step() -> None:
            result = env.step({"action_id": int(rng.integers(n))})
            frames.decode(result.observation["screen"], form, shape)
            if result.done:
                env.reset(**reset)

        return timed(step)


# Frame forms ------------------------------------------------------------------------------------


def _ms(call: Callable[[], Any]) -> float:
    call()
    began = time.perf_counter()
    for _ in range(FORM_REPEATS):
        call()
    return (time.perf_counter() - began) / FORM_REPEATS * 1e3


def pong_frame() -> np.ndarray:
    """A Pong frame in play (600 random actions in)."""
    from ale_py import ALEInterface, LoggerMode, roms

    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    rom = roms.get_rom_path(ROM)
    assert rom is not None, f"ale-py has no ROM {ROM!r}"
    ale.loadROM(rom)
    actions, rng = ale.getMinimalActionSet(), np.random.default_rng(0)
    for _ in range(600):
        ale.act(actions[int(rng.integers(len(actions)))])
    return np.asarray(ale.getScreenRGB())


def form_rows(screen: np.ndarray, url: str) -> list[list[str]]:
    """Each form's bytes in the message, the remote's cost to write it, the client's to
    read it (json.loads, as OpenEnv's client does, and the array); then fetching the frame
    by number from GET /frame/{n} instead."""
    import requests
    from PIL import Image

    rows = []
    for form in (frames.PNG, frames.RAW, frames.LIST):
        def write(form: str = form) -> bytes:
            return orjson.dumps({"screen": frames.encode(screen, form)}, option=orjson.OPT_SERIALIZE_NUMPY)
        data = write()

        def read(data: bytes = data, form: str = form) -> np.ndarray:
            return frames.decode(json.loads(data)["screen"], form, screen.shape)
        assert np.array_equal(read(), screen)
        rows.append([f"ours, {form}", f"{len(data):,}", f"{_ms(write):.3f}", f"{_ms(read):.3f}"])

    def reference_write() -> str:
        png = io.BytesIO()
        Image.fromarray(screen).save(png, format="PNG")
        return json.dumps({"screen": screen.reshape(-1).tolist(),
                           "screen_image": base64.b64encode(png.getvalue()).decode()})
    text = reference_write()
    rows.append(["reference (list + Pillow PNG, json.dumps)", f"{len(text):,}",
                 f"{_ms(reference_write):.3f}",
                 f"{_ms(lambda: np.asarray(json.loads(text)['screen'], np.uint8)):.3f}"])
    with requests.Session() as http:
        state = http.get(url + "/state", timeout=START_TIMEOUT).json()
        fetch = f"{url}/frame/{state['frame']}"
        size = len(http.get(fetch, timeout=START_TIMEOUT).content)
        rows.append(["ours, GET /frame/{n} (a second round trip)", f"{size:,}", "-",
                     f"{_ms(lambda: http.get(fetch, timeout=START_TIMEOUT).content):.3f}"])
    return rows


def main() -> None:
    names = ("reference", "png", "list", "rewarder")
    rows: dict[str, list[float]] = {name: [] for name in names}
    with served_with("--openenv-port", r"openenv\s+(http://127\.0\.0\.1:\d+)") as (address, url), \
            peer() as peer_url:
        for _ in range(ROUNDS):
            rows["reference"].append(row_openenv(peer_url, {}))
            rows["png"].append(row_openenv(url, {"seed": 0, "frameskip": FRAMESKIP}))
            rows["list"].append(row_openenv(url, {"seed": 0, "frameskip": FRAMESKIP, "screen": "list"}))
            rows["rewarder"].append(row_rewarder(address))
        forms = form_rows(pong_frame(), url)
    theirs, png, flat, rewarder = (statistics.median(rows[k]) for k in names)
    print(f"\n  Lockstep {ENV_ID}, frameskip {FRAMESKIP}, the frame as an array every step: "
          f"median of {ROUNDS} alternated rounds")
    table(
        ["row", "env-steps/s", "vs reference OpenEnv", "vs our rewarder path"],
        [
            ["reference OpenEnv server over ALE (openenv's classes, uvicorn)", f"{theirs:,.0f}",
             "1.00", ratio(theirs, rewarder)],
            ["ours: OpenEnv port, GenericEnvClient, png", f"{png:,.0f}", ratio(png, theirs),
             ratio(png, rewarder)],
            ["ours: OpenEnv port, GenericEnvClient, list", f"{flat:,.0f}", ratio(flat, theirs),
             ratio(flat, rewarder)],
            ["ours: rewarder, RemoteEnv lockstep", f"{rewarder:,.0f}", ratio(rewarder, theirs), "1.00"],
        ],
    )
    print("\n  One Pong frame in each form: bytes in the message, ms to write it (the server), "
          "ms to read it into an array (the client)")
    table(["form", "bytes", "write ms", "read ms"], forms)


if __name__ == "__main__":
    if sys.argv[1:2] == ["peer"]:
        run_peer(int(sys.argv[2]))
    else:
        main()
