"""No front end is second-class for web agents: a browser remote's bids, element list and
action strings through OpenEnv's own client and dm_env_rpc's own client, the same as
through gymnasium's ``RemoteEnv``.

One real MiniWoB remote for the module (``remotes.start_local``: Chromium on Xvnc, in
lockstep) serving its rewarder, OpenEnv and dm_env_rpc ports; the tests take turns as its
one agent. The order matters once: the first test runs before any agent asks the remote
to observe its page (the ``observe`` property outlives the agent that wrote it), which is
when OpenEnv used to read the page without the reset's renumbering.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import pytest

from tests.optional import need_program

pytestmark = pytest.mark.timeout(300)

#: A task whose elements are made anew at every episode (click-test's are not).
ENV_ID: Final = "miniwob.ClickButton-v0"
SEED: Final = 5
#: Real-time steps a test waits at most for a reward to come in after its click.
MAX_WAIT_STEPS: Final = 120
#: Seconds the remote may take to start on a loaded machine.
START_TIMEOUT: Final = 120.0


@dataclass
class Served:
    """The module's remote: its rewarder address, OpenEnv URL and dm_env_rpc target."""

    group: Any
    openenv: str
    dm_target: str


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    pytest.importorskip("miniwob")
    need_program("Xvnc", "chromium")  # (a skip, which CI counts as a failure)
    from remotes import start_local
    from runtimes.xdisplay import free_port

    openenv, dm = free_port("127.0.0.1"), free_port("127.0.0.1")
    group = start_local(ENV_ID, 1, start_timeout=START_TIMEOUT, extra_args=[
        "--mode", "lockstep", "--openenv-port", str(openenv), "--dm-env-rpc-port", str(dm),
    ])
    try:
        yield Served(group, f"http://127.0.0.1:{openenv}", f"127.0.0.1:{dm}")
    finally:
        group.close()


def bid_number(bid: str) -> int:
    found = re.fullmatch(r"a(\d+)", bid)
    assert found, bid
    return int(found.group(1))


def openenv_page(url: str, seed: int, resets: int = 2) -> list[dict[str, Any]]:
    """``resets`` resets with ``seed`` through OpenEnv's client: each reset's observation."""
    from openenv.core.generic_client import GenericEnvClient

    out = []
    with GenericEnvClient(base_url=url).sync() as env:
        for _ in range(resets):
            out.append(env.reset(seed=seed, screen="none").observation)
    return out


def bids_of(elements: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(e["bid"], e["role"], e["name"]) for e in elements]


def test_openenv_bids_start_afresh_at_every_reset_as_over_gymnasium(served: Served) -> None:
    first, second = openenv_page(served.openenv, SEED)
    # The element list is there: bids, roles, names, values, boxes in screen pixels.
    elements = first["elements"]
    assert isinstance(elements, list) and elements
    button = next(e for e in elements if e["role"] == "button")
    assert button["name"] and len(button["bbox"]) == 4 and button["clickable"]
    assert f"[{button['bid']}] button" in first["axtree"]
    assert min(bid_number(e["bid"]) for e in elements) == 0  # numbered afresh from a0
    # The same seed, the same bids: the second episode is numbered afresh too.
    assert bids_of(second["elements"]) == bids_of(elements)
    assert second["axtree"] == first["axtree"]

    from remotes import RemoteEnv

    env = RemoteEnv(served.group, mode="lockstep", observations=("screen", "page"), actions="web")
    try:
        obs, info = env.reset(seed=SEED)
        assert bids_of(info["page"]["elements"]) == bids_of(elements)
        assert obs["tree"] == first["axtree"]
        env.reset(seed=SEED + 1)  # another episode between: OpenEnv still starts at a0
    finally:
        env.close()
    (again,) = openenv_page(served.openenv, SEED, resets=1)
    assert bids_of(again["elements"]) == bids_of(elements)


def test_openenv_schema_describes_the_element_list(served: Served) -> None:
    import jsonschema
    import requests

    schema = requests.get(served.openenv + "/schema", timeout=START_TIMEOUT).json()
    observation = schema["observation"]
    assert "elements" in observation["properties"]
    (sent,) = openenv_page(served.openenv, SEED, resets=1)
    jsonschema.validate(sent, observation)
    sent["elements"] = "not a list"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(sent, observation)
    # A session that watches sees the page too.
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=served.openenv).sync() as env:
        watched = env.reset(observe=True, screen="none").observation
    jsonschema.validate(watched, observation)
    assert bids_of(watched["elements"]) == bids_of(openenv_page(served.openenv, SEED, 1)[0]["elements"])


def test_dm_env_rpc_takes_action_strings_and_gives_the_same_page(served: Served) -> None:
    """dm_env_rpc's own client: the ``web_action`` string spec beside the pointer's, the
    page (the same bids as OpenEnv's for the seed), a string that names nothing answered
    in ``last_action_error`` with the stream going on, and a click by bid that wins."""
    import grpc
    from dm_env_rpc.v1 import connection as dm_connection, dm_env_rpc_pb2 as pb, error, tensor_utils

    (over_openenv,) = openenv_page(served.openenv, SEED, resets=1)
    channel = grpc.insecure_channel(served.dm_target)
    grpc.channel_ready_future(channel).result(START_TIMEOUT)
    with dm_connection.Connection(channel) as conn:
        world = conn.send(pb.CreateWorldRequest(settings={
            "seed": tensor_utils.pack_tensor(SEED), "mode": tensor_utils.pack_tensor("lockstep"),
        })).world_name
        specs = conn.send(pb.JoinWorldRequest(world_name=world)).specs
        actions = {s.name: (u, s) for u, s in specs.actions.items()}
        assert actions["web_action"][1].dtype == pb.DataType.STRING and "pointer" in actions
        uid = {s.name: u for u, s in specs.observations.items()}
        wanted = [uid["page"], uid["last_action_error"], uid["reward"], uid["text"]]

        def step(web: str | None = None) -> tuple[int, dict[str, Any], str, float, str]:
            sent = {} if web is None else {actions["web_action"][0]: tensor_utils.pack_tensor(web)}
            response = conn.send(pb.StepRequest(actions=sent, requested_observations=wanted))
            got = {name: tensor_utils.unpack_tensor(response.observations[uid[name]])
                   for name in ("page", "last_action_error", "reward", "text")}
            return (response.state, json.loads(got["page"])["page"], str(got["last_action_error"]),
                    float(got["reward"]), str(got["text"]))

        state, page, problem, _, text = step()  # the sequence's first step: the page
        assert state == pb.EnvironmentStateType.RUNNING and problem == ""
        assert bids_of(page["elements"]) == bids_of(over_openenv["elements"])
        state, _, problem, _, _ = step("click('a999')")
        assert state == pb.EnvironmentStateType.RUNNING and "a999" in problem
        with pytest.raises(error.DmEnvRpcError, match="web_action"):
            step("x" * 10_000)  # over the limit: refused, and the stream goes on
        name = re.findall(r'"([^"]*)"', text)[0]
        button = next(e for e in page["elements"] if e["role"] == "button" and e["name"] == name)
        state, _, problem, reward, _ = step(f"click('{button['bid']}')")
        assert problem == "" and state == pb.EnvironmentStateType.TERMINATED and reward > 0
        conn.send(pb.LeaveWorldRequest())
        conn.send(pb.DestroyWorldRequest(world_name=world))


def test_dm_env_rpc_action_strings_in_real_time(served: Served) -> None:
    """In real time a ``web_action`` runs at once and the step waits until the page is
    still again; the reward comes in that step or one of the next few (last in the
    module: it leaves the remote in real time)."""
    import grpc
    from dm_env_rpc.v1 import connection as dm_connection, dm_env_rpc_pb2 as pb, tensor_utils

    channel = grpc.insecure_channel(served.dm_target)
    grpc.channel_ready_future(channel).result(START_TIMEOUT)
    with dm_connection.Connection(channel) as conn:
        world = conn.send(pb.CreateWorldRequest(settings={
            "seed": tensor_utils.pack_tensor(SEED), "mode": tensor_utils.pack_tensor("realtime"),
        })).world_name
        specs = conn.send(pb.JoinWorldRequest(world_name=world)).specs
        act = {s.name: u for u, s in specs.actions.items()}["web_action"]
        uid = {s.name: u for u, s in specs.observations.items()}
        wanted = [uid["page"], uid["last_action_error"], uid["reward"], uid["text"]]

        def step(web: str = "") -> tuple[int, dict[str, Any], str, float, str]:
            response = conn.send(pb.StepRequest(actions={act: tensor_utils.pack_tensor(web)},
                                                requested_observations=wanted))
            got = {name: tensor_utils.unpack_tensor(response.observations[uid[name]])
                   for name in ("page", "last_action_error", "reward", "text")}
            # (an episode's last step in real time may have no page: the remote shows
            # the next episode already)
            return (response.state, json.loads(got["page"]).get("page", {}),
                    str(got["last_action_error"]), float(got["reward"]), str(got["text"]))

        state, page, _, _, text = step()
        name = re.findall(r'"([^"]*)"', text)[0]
        button = next(e for e in page["elements"] if e["role"] == "button" and e["name"] == name)
        state, _, problem, total, _ = step(f"click('{button['bid']}')")
        assert problem == ""
        for _ in range(MAX_WAIT_STEPS):
            if state != pb.EnvironmentStateType.RUNNING:
                break
            state, _, _, reward, _ = step()
            total += reward
        assert state == pb.EnvironmentStateType.TERMINATED and total > 0
        conn.send(pb.LeaveWorldRequest())
        conn.send(pb.DestroyWorldRequest(world_name=world))
