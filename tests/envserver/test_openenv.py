"""The OpenEnv port (``serve --openenv-port``) with OpenEnv's own clients
(``openenv.core.GenericEnvClient``, async and ``.sync()``, over ``/ws``) and plain HTTP
(``POST /reset``, ``POST /step``, ``GET /state``, ``/schema``, ``/metadata``, ``/health``)
against real remotes (``universe-remote serve`` processes on 127.0.0.1): seeds, steps,
bad actions, each family's schemas, the frame forms, OpenEnv's own validator, and
determinism against the rewarder path. Sessions, passwords, TLS and the other front ends
are in ``test_openenv_sessions.py``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any, Final

import jsonschema
import numpy as np
import pytest
import requests
from openenv.cli._validation import validate_running_environment
from openenv.core.generic_client import GenericEnvClient

from envserver.openenv import frames
from envserver.openenv.schemas import Held, Spec
from remotes import RemoteEnv
from runtimes import registry
from tests.optional import needs_env

pytestmark = pytest.mark.timeout(180)

#: Seconds a remote may take to start (and an HTTP request to answer).
TIMEOUT: Final = 60.0
_OPENENV: Final = re.compile(r"openenv\s+(https?)://127\.0\.0\.1:(\d+)")
_DM: Final = re.compile(r"dm_env_rpc\s+127\.0\.0\.1:(\d+)")
_AGENT: Final = re.compile(r"agent address\s+(vnc(?:\+tls)?://\S+)")
#: Catch's moves in the determinism checks (1: Left, 0: Right), FRAMESKIP frames each.
PRESSES: Final = (1, 1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 1, 1, 0)
FRAMESKIP: Final = 4


class Served:
    """A ``universe-remote serve ENV --openenv-port 0`` process: its URLs."""

    def __init__(self, env_id: str = "builtin.Catch-v0", *extra: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "universe_remote", "serve", env_id, "--openenv-port", "0",
             "--rewarder-port", "0", "--vnc-port", "0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        self.url = ""
        self.dm_port = 0
        self.address = ""
        ready = threading.Event()
        threading.Thread(target=self._read, args=(ready,), daemon=True).start()
        if not ready.wait(TIMEOUT) or not self.url:
            self.close()
            pytest.fail(f"universe-remote serve {env_id} did not print its OpenEnv port")

    def _read(self, ready: threading.Event) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if found := _OPENENV.search(line):
                self.url = f"{found.group(1)}://127.0.0.1:{found.group(2)}"
            if found := _DM.search(line):
                self.dm_port = int(found.group(1))
            if found := _AGENT.search(line):
                self.address = found.group(1).split("?")[0]
                ready.set()
        ready.set()

    @property
    def rewarder(self) -> str:
        """The rewarder's ``host:port``."""
        return "127.0.0.1:" + self.address.rpartition("+")[2]

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return requests.get(self.url + path, timeout=TIMEOUT, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> requests.Response:
        return requests.post(self.url + path, json=body, timeout=TIMEOUT, **kwargs)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()


def screen_hash(observation: dict[str, Any]) -> str:
    """The SHA-1 of an observation's screen as an array, whatever form it came in."""
    pixels = frames.decode(observation["screen"], observation["screen_format"],
                           tuple(observation["screen_shape"]))
    return hashlib.sha1(np.ascontiguousarray(pixels, np.uint8).tobytes()).hexdigest()


def keys_of(left: int) -> list[str]:
    return ["Left"] if left else ["Right"]


def hashes_over_rewarder(address: str, seed: int, presses: tuple[int, ...] = PRESSES) -> list[str]:
    """The same seed and moves through ``RemoteEnv`` lockstep (the rewarder path)."""
    env = RemoteEnv(address, mode="lockstep", frameskip=FRAMESKIP)
    try:
        obs, _ = env.reset(seed=seed)
        out = [hashlib.sha1(np.ascontiguousarray(obs)).hexdigest()]
        held: set[str] = set()
        for left in presses:
            want = set(keys_of(left))
            events = [("KeyEvent", k, False) for k in sorted(held - want)]
            events += [("KeyEvent", k, True) for k in sorted(want - held)]
            held = want
            obs, *_ = env.step(events)
            out.append(hashlib.sha1(np.ascontiguousarray(obs)).hexdigest())
        return out
    finally:
        env.close()


@pytest.fixture(scope="module")
def catch() -> Iterator[Served]:
    served = Served("builtin.Catch-v0", "--mode", "lockstep")
    yield served
    served.close()


def _sync_hashes(url: str, seed: int, screen: str = "png", bad_between: bool = False) -> list[str]:
    """Reset with ``seed`` and play PRESSES over ``/ws`` with ``.sync()``: the frame hashes
    (with ``bad_between``, a refused action before every step: nothing may change)."""
    with GenericEnvClient(base_url=url).sync() as env:
        result = env.reset(seed=seed, frameskip=FRAMESKIP, screen=screen)
        assert result.reward is None and result.done is False
        out = [screen_hash(result.observation)]
        for left in PRESSES:
            if bad_between:
                with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
                    env.step({"keys": ["Up"]})
            result = env.step({"keys": keys_of(left)})
            assert isinstance(result.reward, float) and isinstance(result.done, bool)
            out.append(screen_hash(result.observation))
        return out


def test_sync_client_same_seed_same_frames_as_over_the_rewarder(catch: Served) -> None:
    over_openenv = _sync_hashes(catch.url, 11)
    assert len(set(over_openenv)) > 3  # the game moved
    assert _sync_hashes(catch.url, 11) == over_openenv  # and again the same
    assert _sync_hashes(catch.url, 11, screen="raw") == over_openenv
    assert _sync_hashes(catch.url, 11, screen="list") == over_openenv
    assert hashes_over_rewarder(catch.address, 11) == over_openenv
    assert _sync_hashes(catch.url, 12) != over_openenv


def test_a_bad_action_is_an_error_the_session_goes_on_and_nothing_is_lost(catch: Served) -> None:
    assert _sync_hashes(catch.url, 5, bad_between=True) == _sync_hashes(catch.url, 5)
    with GenericEnvClient(base_url=catch.url).sync() as env:
        env.reset(seed=5)
        for bad, words in (
            ({"keys": "Left"}, "keys must be a list"),
            ({"action_id": 1}, "takes no action field 'action_id'"),
            ({"keys": ["Left"], "jump": True}, "takes no action field 'jump'"),
        ):
            with pytest.raises(RuntimeError, match=re.escape(words)):
                env.step(bad)
        assert env.state()["step_count"] == 0  # refused steps are no steps
        assert env.step({"keys": ["Left"]}).observation["frame"] > 0


async def test_async_client_reset_steps_state(catch: Served) -> None:
    async with GenericEnvClient(base_url=catch.url) as env:
        first = await env.reset(seed=3, frameskip=2, episode_id="run-7")
        observation = first.observation
        assert observation["screen_format"] == "png" and observation["screen"].startswith("data:image/png")
        assert observation["screen_shape"] == [210, 160, 3]
        total, frame = 0.0, observation["frame"]
        for i in range(40):
            result = await env.step({"keys": keys_of(i % 2)})
            assert result.observation["frame"] == frame + 2  # lockstep: frameskip frames a step
            frame = result.observation["frame"]
            total += result.reward
            if result.done:
                break
        state = await env.state()
        assert state["episode_label"] == "run-7" and state["role"] == "agent"
        assert state["frameskip"] == 2 and state["mode"] == "lockstep"
        assert state["step_count"] == i + 1 and state["episode_id"] == str(observation["episode_id"])


def test_http_endpoints(catch: Served) -> None:
    assert catch.get("/health").json() == {"status": "healthy"}
    metadata = catch.get("/metadata").json()
    assert metadata["name"] == "builtin.Catch-v0" and "Catch" in metadata["description"]
    protocols = metadata["protocols"]
    assert protocols["openenv"].startswith("http 1.") and protocols["rewarder"] == "v0"
    assert re.fullmatch(r"\d+\.\d+.*", metadata["version"])
    first = catch.post("/reset", {"seed": 9, "screen": "raw", "frameskip": 4}).json()
    assert first["done"] is False and first["reward"] is None
    step = catch.post("/step", {"action": {"keys": ["Left"]}}).json()
    assert step["observation"]["frame"] == first["observation"]["frame"] + 4
    assert catch.get("/state").json()["role"] == "none"  # the HTTP seat is held per request
    refused = catch.post("/step", {"action": {"keys": ["Jump"]}})
    assert refused.status_code == 422 and "takes no key 'Jump'" in refused.json()["detail"]
    assert catch.post("/step", {"keys": ["Left"]}).status_code == 422  # not {"action": ...}
    assert catch.post("/reset", {"seed": -1}).status_code == 422
    frame = catch.get("/frame")
    assert frame.headers["Content-Type"] == "image/png"
    assert int(frame.headers["X-Frame"]) == step["observation"]["frame"]
    assert catch.get(f"/frame/{frame.headers['X-Frame']}").content == frame.content
    assert catch.get("/frame/1").status_code == 404
    pixels = frames.decode(frames.PNG_PREFIX + base64.b64encode(frame.content).decode(), "png", (210, 160, 3))
    assert hashlib.sha1(pixels.tobytes()).hexdigest() == screen_hash(step["observation"])


def test_openenvs_own_validator_passes(catch: Served) -> None:
    report = validate_running_environment(catch.url, timeout_s=TIMEOUT)
    failed = [c for c in report["criteria"] if not c["passed"]]
    assert report["passed"], failed
    assert report["mode"] == "simulation" and report["standard_profile"] == "openenv-http/1.x"


def test_schemas_validate_what_the_port_sends(catch: Served) -> None:
    schema = catch.get("/schema").json()
    for part in ("action", "observation", "state"):
        jsonschema.Draft202012Validator.check_schema(schema[part])
    assert schema["action"]["properties"]["keys"]["items"]["enum"] == ["Left", "Right"]
    jsonschema.validate({"keys": ["Left"]}, schema["action"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"keys": ["Up"]}, schema["action"])
    with GenericEnvClient(base_url=catch.url).sync() as env:
        jsonschema.validate(env.reset(seed=1).observation, schema["observation"])
        jsonschema.validate(env.step({"keys": ["Right"]}).observation, schema["observation"])
        jsonschema.validate(env.state(), schema["state"])


def _describe(env_id: str, **options: Any) -> dict[str, Any]:
    runtime = registry.lookup(env_id)
    if env_id.startswith("atari."):
        return {"env_id": env_id, **runtime(**options).describe()}
    return {"env_id": env_id, **runtime.describe()}


@pytest.mark.parametrize(("env_id", "options", "fields"), [
    ("atari.Pong-v0", {}, ["action_id", "metadata"]),
    ("builtin.Catch-v0", {}, ["keys", "metadata"]),
    ("builtin.ClickTarget-v0", {}, ["pointer", "click", "metadata"]),
    ("x11.XEyes-v0", {}, ["keys", "pointer", "click", "events", "text", "metadata"]),
    ("miniwob.ClickTest-v0", {}, ["keys", "pointer", "click", "events", "text", "metadata", "action_str"]),
])
def test_each_family_gets_the_actions_its_runtime_takes(env_id: str, options: dict[str, Any],
                                                        fields: list[str]) -> None:
    spec = Spec.of(_describe(env_id, **options))
    schema = spec.action_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert list(schema["properties"]) == fields


@needs_env("atari.Pong-v0")
def test_atari_actions_are_the_minimal_set_or_all_eighteen() -> None:
    minimal = Spec.of(_describe("atari.Pong-v0"))
    assert minimal.action_schema()["properties"]["action_id"]["maximum"] == 5
    assert "1 FIRE" in minimal.action_schema()["properties"]["action_id"]["description"]
    events, held = minimal.parse({"action_id": 4}, Held())
    assert events == [("KeyEvent", "Up", True), ("KeyEvent", "space", True)]  # RIGHTFIRE
    full = Spec.of(_describe("atari.Pong-v0", full_action_space=True))
    assert full.action_schema()["properties"]["action_id"]["maximum"] == 17
    with pytest.raises(ValueError, match="out of range: 0..5"):
        minimal.parse({"action_id": 6}, Held())


def test_desktop_actions_become_input_events_in_order() -> None:
    spec = Spec.of(_describe("x11.XCalc-v0"))
    events, held = spec.parse({
        "pointer": {"x": 10, "y": 20}, "click": [30, 40], "text": "1+",
        "events": [{"key": "Return", "down": True}, {"key": "Return", "down": False}],
    }, Held())
    assert events == [
        ("PointerEvent", 10, 20, 0), ("PointerEvent", 30, 40, 1), ("PointerEvent", 30, 40, 0),
        ("KeyEvent", "Return", True), ("KeyEvent", "Return", False),
        ("KeyEvent", "1", True), ("KeyEvent", "1", False),
        ("KeyEvent", "plus", True), ("KeyEvent", "plus", False),
    ]
    assert held.pointer == (30, 40) and held.buttons == 0 and not held.keys
    with pytest.raises(ValueError, match="pointer.x = 1024 is out of range"):
        spec.parse({"pointer": {"x": 1024, "y": 0}}, Held())


def test_png_frames_are_lossless() -> None:
    rng = np.random.default_rng(0)
    for screen in (rng.integers(0, 256, (210, 160, 3), dtype=np.uint8),
                   np.zeros((7, 5, 3), np.uint8), np.full((1, 1, 3), 255, np.uint8)):
        value = frames.encode(screen, "png")
        assert np.array_equal(frames.decode(value, "png", screen.shape), screen)
        assert np.array_equal(frames.decode(frames.encode(screen, "raw"), "raw", screen.shape), screen)


@needs_env("atari.Pong-v0")
def test_atari_observations_carry_lives_and_legal_actions() -> None:
    served = Served("atari.Pong-v0", "--mode", "lockstep")
    try:
        async def play() -> None:
            async with GenericEnvClient(base_url=served.url) as env:
                result = await env.reset(seed=0, frameskip=4)
                assert result.observation["legal_actions"] == list(range(6))
                for _ in range(5):
                    result = await env.step({"action_id": 2})
                assert result.observation["lives"] == 0 and result.observation["frame"] >= 20
        asyncio.run(play())
    finally:
        served.close()


def test_a_miniwob_task_is_played_with_pointer_actions() -> None:
    """MiniWoB's click-test in lockstep over /ws: the instruction comes as the
    observation's text, the button is found in the screen, a click on it earns 1 and ends
    the episode."""
    pytest.importorskip("miniwob")
    from runtimes.browser import TASK_AREA

    served = Served("miniwob.ClickTest-v0", "--mode", "lockstep")
    try:
        with GenericEnvClient(base_url=served.url).sync() as env:
            result = env.reset(seed=3, frameskip=6)
            assert result.observation["text"] == "Click the button."
            observation = result.observation
            screen = frames.decode(observation["screen"], "png", tuple(observation["screen_shape"]))
            x0, y0, w, h = TASK_AREA
            below_instruction = 50
            ys, xs = np.nonzero((screen[y0 + below_instruction:y0 + h, x0:x0 + w] < 250).any(axis=2))
            button = [int(xs.mean()) + x0, int(ys.mean()) + y0 + below_instruction]
            result = env.step({"click": button})
            assert (result.reward, result.done) == (1.0, True)
    finally:
        served.close()


@pytest.mark.parametrize("mode", ["lockstep", "realtime"])
def test_an_llm_agent_reads_the_axtree_and_acts_with_action_strings(mode: str) -> None:
    """MiniWoB's click-button over /ws as a language-model agent sees it: the page's tree
    as text with bids, an action string naming the bid, and last_action_error for one
    that names nothing; in real time the step returns once the page is still again."""
    pytest.importorskip("miniwob")
    served = Served("miniwob.ClickButton-v0", "--mode", mode)
    try:
        with GenericEnvClient(base_url=served.url).sync() as env:
            result = env.reset(seed=3, frameskip=1)
            observation = result.observation
            wanted = re.search(r'"(.*)"', observation["text"])
            assert wanted is not None and observation["last_action_error"] is None
            line = next(x for x in observation["axtree"].splitlines()
                        if f"button '{wanted.group(1)}'" in x)
            bid = re.search(r"\[(a\d+)\]", line).group(1)  # type: ignore[union-attr]
            result = env.step({"action_str": "click('a999')"})
            assert "a999" in result.observation["last_action_error"] and not result.done
            result = env.step({"action_str": "__import__('os').system('id')"})
            assert result.observation["last_action_error"] and not result.done
            result = env.step({"action_str": f"click('{bid}')"})
            assert result.observation["last_action_error"] is None
            assert result.done and result.reward is not None and result.reward > 0
    finally:
        served.close()
