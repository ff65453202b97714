"""Remotes on Ray (remotes/ray.py): a real two-node cluster on 127.0.0.1, in a network
namespace of its own, driven by tests/remotes/ray_scenario.py (run once for this
module); and the parts that need no cluster.

Without a namespace (not root, no unshare) the cluster tests fail, saying why: Ray
never runs on the real interfaces here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest

from remotes import RemoteVectorEnv, start_local, start_ray
from remotes.address import RemoteAddress
from remotes.cli import add_commands
from remotes.dashboard import Dashboard
from remotes.group import RemoteGroup
from remotes.local import LocalRemotes
from remotes.ray import DEFAULT_RESOURCES, _actor_options, serve_args
from remotes.registration import make_vector_env
from runtimes.errors import UnknownEnvironment
from tests.optional import need_extra
from tests.ray_cluster import NamespaceUnavailable, check_netns, in_netns

ROOT: Final = Path(__file__).resolve().parents[2]
#: Seconds the whole scenario may take (measured: ~25 s on an idle 2-core machine).
SCENARIO_TIMEOUT: Final = 240
#: The issue's bound on a killed remote's return, in seconds.
BACK_WITHIN: Final = 5.0


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    need_extra("ray")
    try:
        check_netns()
    except NamespaceUnavailable as exc:
        pytest.fail(str(exc))
    out = tmp_path_factory.mktemp("ray") / "scenario.json"
    run = subprocess.run(
        in_netns([sys.executable, "-m", "tests.remotes.ray_scenario", str(out)]),
        cwd=ROOT, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, check=False,
    )
    if not out.exists():
        pytest.fail(f"the scenario wrote nothing (exit {run.returncode}):\n{run.stderr[-4000:]}")
    found: dict[str, Any] = json.loads(out.read_text())
    if found["error"] is not None:
        pytest.fail(f"the scenario failed:\n{found['error']}\n{run.stderr[-4000:]}")
    yield found


@pytest.mark.timeout(SCENARIO_TIMEOUT + 30)
def test_four_remotes_spread_over_both_nodes_and_all_step(scenario: dict[str, Any]) -> None:
    assert set(scenario["nodes"]) == {scenario["head"], scenario["second"]}
    assert sorted(scenario["nodes"]).count(scenario["head"]) == 2
    assert all(a.startswith("127.0.0.1:") for a in scenario["addresses"])
    assert scenario["password"]
    assert scenario["warm_all_connected"]
    assert scenario["warm_frames_changed"] == [True] * 4


@pytest.mark.timeout(SCENARIO_TIMEOUT + 30)
def test_a_killed_remote_is_restarted_by_ray_and_stepped_again(scenario: dict[str, Any]) -> None:
    assert scenario["lost_after"] is not None, "the env never saw the killed remote drop"
    assert scenario["back_after"] is not None and scenario["back_after"] < BACK_WITHIN, scenario
    assert scenario["restarted"] and scenario["new_pid"]
    # the replacement serves on new ports, and the env found it there
    assert scenario["new_address"] != scenario["old_address"]
    assert scenario["names_seen"][-1] == scenario["new_address"]
    assert scenario["victim_steps_after"] >= 30 and scenario["victim_frames_changed_after"]
    # the other three kept stepping at their pace, never dropped, and did not move
    assert scenario["others_lost_steps"] == 0
    assert scenario["others_steps_per_second_while_away"] > 30
    assert scenario["others_unchanged"] == [True] * 3


@pytest.mark.timeout(SCENARIO_TIMEOUT + 30)
def test_close_leaves_no_actor_and_no_process(scenario: dict[str, Any]) -> None:
    assert scenario["alive_after_close"] == []
    assert scenario["actors_seen"] == 4
    assert scenario["actor_states_after_close"] == ["DEAD"] * 4


@pytest.mark.timeout(SCENARIO_TIMEOUT + 30)
def test_a_custom_resource_places_remotes_on_the_second_node(scenario: dict[str, Any]) -> None:
    assert scenario["second_node_placements"] == [scenario["second"]] * 2


@pytest.mark.timeout(SCENARIO_TIMEOUT + 30)
def test_start_ray_says_why_remotes_did_not_start(scenario: dict[str, Any]) -> None:
    bad = scenario["refused_bad_args"]
    assert bad is not None and "did not start" in bad and "unrecognized arguments: --bogus" in bad
    full = scenario["refused_no_room"]
    assert full is not None and "no room for 2 remote(s) of {'CPU': 100}" in full and "free now" in full


@pytest.mark.timeout(SCENARIO_TIMEOUT + 30)
def test_make_vec_with_ray_remotes_starts_steps_and_stops_them(scenario: dict[str, Any]) -> None:
    assert scenario["make_vec_group"] == "RayRemotes"
    assert scenario["make_vec_connected_steps"] == 20
    assert scenario["make_vec_alive_after_close"] == []


@pytest.mark.timeout(SCENARIO_TIMEOUT + 30)
def test_play_on_ray_with_the_dashboard(scenario: dict[str, Any]) -> None:
    assert scenario["play_summary"]["remotes"] == 2 and scenario["play_summary"]["steps"] > 60
    assert "on Ray" in scenario["play_output"]
    listed = scenario["play_remotes"].removeprefix("vnc://").split("?")[0].split(",")
    assert [r["name"] for r in scenario["dashboard_rows"]] == listed
    assert all(r["steps"] > 0 for r in scenario["dashboard_rows"])


# Without a cluster -------------------------------------------------------------------------


def test_serve_args_need_tls_or_insecure_off_loopback() -> None:
    assert serve_args("127.0.0.1", None, ["--fps", "30"]) == ["--fps", "30"]
    assert serve_args("10.1.2.3", None, []) == ["--insecure"]
    assert serve_args("10.1.2.3", ("c.pem", "k.pem"), []) == ["--tls-cert", "c.pem", "--tls-key", "k.pem"]


def test_resources_become_actor_options() -> None:
    expected = {"max_restarts": 3, "max_task_retries": 0, "num_cpus": 0.25}
    assert _actor_options(DEFAULT_RESOURCES, 3) == expected
    options = _actor_options({"CPU": 1, "GPU": 0.5, "big": 2}, -1)
    assert options["num_cpus"] == 1 and options["num_gpus"] == 0.5 and options["resources"] == {"big": 2}
    with pytest.raises(ValueError, match=r"resources\['CPU'\] must be a number >= 0"):
        _actor_options({"CPU": -1}, 0)


def test_start_ray_refuses_bad_requests_before_touching_ray() -> None:
    with pytest.raises(ValueError, match="n must be 1..1024"):
        start_ray("builtin.Catch-v0", 0)
    with pytest.raises(UnknownEnvironment):
        start_ray("builtin.Catchh-v0", 1)
    with pytest.raises(ValueError, match="max_restarts"):
        start_ray("builtin.Catch-v0", 1, max_restarts=-2)
    # importing remotes never imports Ray
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, remotes; print('ray' in sys.modules)"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )
    assert probe.stdout.strip() == "False"


def test_make_vec_ray_spec_is_checked() -> None:
    with pytest.raises(ValueError, match="write ray:N"):
        make_vector_env("builtin.Catch-v0", 2, remotes="ray:two")
    with pytest.raises(ValueError, match="starts 3, but this env drives 2"):
        make_vector_env("builtin.Catch-v0", 2, remotes="ray:3")


def test_play_takes_ray_with_or_without_an_address() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    assert parser.parse_args(["play", "builtin.Catch-v0"]).ray is None
    assert parser.parse_args(["play", "builtin.Catch-v0", "-n", "16", "--ray"]).ray == ""
    assert parser.parse_args(["play", "builtin.Catch-v0", "--ray", "auto"]).ray == "auto"



class Moving(RemoteGroup):
    """A group whose remote 0 is served elsewhere once ``moved`` is set (as a restarted
    Ray actor's is), to test the env's half of the hook without a cluster."""

    def __init__(self, local: LocalRemotes) -> None:
        super().__init__(local.addresses[:2], local.password)
        self.spare = local.addresses[2]
        self.asked = 0

    def address_of(self, index: int) -> RemoteAddress:
        self.asked += 1
        return self.addresses[index]

    def _stop(self) -> None:
        pass


def test_a_vector_env_follows_a_remote_to_its_new_address() -> None:
    with start_local("builtin.Catch-v0", 3) as local:
        group = Moving(local)
        env = RemoteVectorEnv(group)
        try:
            env.reset(seed=0)
            local.kill(0)
            group.addresses[0] = group.spare  # the replacement serves on other ports
            deadline = time.monotonic() + 10
            info: dict[str, Any] = {}
            while not (info.get("_remote.reconnected") is not None and info["_remote.reconnected"][0]):
                assert time.monotonic() < deadline, "remote 0 did not come back at its new address"
                _, _, _, _, info = env.step([[], []])
            assert info["remote.name"][0] == str(group.spare)
            assert group.asked >= 1
            assert env.remotes[0].name == str(group.spare)
        finally:
            env.close()
            group.close()


def test_the_dashboard_names_a_remote_by_its_new_address() -> None:
    board = Dashboard(["127.0.0.1:1+2", "127.0.0.1:3+4"])
    frames = np.zeros((2, 4, 4, 3), np.uint8)
    info = {
        "remote.name": np.array([None, "127.0.0.1:5+6"], dtype=object),
        "_remote.name": np.array([False, True]),
    }
    board.record(frames, [0.0, 0.0], [False, False], [False, False], info)
    assert [r["name"] for r in board.snapshot()["remotes"]] == ["127.0.0.1:1+2", "127.0.0.1:5+6"]
