"""``scripts/build-image`` (``make image``) builds the remote's image with no daemon and no
registry, keeps its HEALTHCHECK, and the container's banner prints addresses one can
connect to (issue 29, item 2).

The offline route of tests/docker (a base from Debian packages, a wheelhouse, the
Dockerfile's build arguments), taken by the script itself with podman; the container
runs with ``--network=host`` in a network namespace that has only loopback
(:func:`tests.docker.podman.in_netns`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Final

import pytest

from tests.docker import podman as pm

ROOT: Final = Path(__file__).resolve().parents[1]
SCRIPT: Final = ROOT / "scripts" / "build-image"
#: The image this test builds (never pushed, never pulled).
IMAGE: Final = "localhost/universe-remote:build-image-test"
#: Seconds the build may take: a base not yet made (mmdebstrap, 26-154 s), a wheelhouse,
#: the build.
BUILD_TIMEOUT: Final = 900


def build_image(*args: str, timeout: float = BUILD_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=pm.ENV, timeout=timeout, cwd=ROOT, check=False)


def test_the_dry_run_shows_each_engines_build_with_the_healthcheck_kept() -> None:
    docker = build_image("--engine", "docker", "--dry-run", timeout=60)
    podman = build_image("--engine", "podman", "--dry-run", timeout=60)
    if docker.returncode == 0:
        assert "+ docker build -f" in docker.stdout and "--format" not in docker.stdout
    assert podman.returncode == 0 or "not installed" in podman.stderr, podman.stderr
    if podman.returncode == 0:
        assert "podman build --format=docker -f" in podman.stdout
    offline = build_image("--engine", "podman", "--offline", "--browser", "--dry-run", timeout=60)
    if offline.returncode == 0:
        out = offline.stdout
        assert "mmdebstrap" in out and "chromium" in out and "pip" in out and "wheel" in out
        assert "--network=none" in out and "PIP_OPTIONS=--no-index --find-links /src/wheelhouse" in out
        assert "--format=docker" in out and "Dockerfile.browser" in out
    # The docker tests' route: their base and the wheelhouse they made for both images.
    reuse = build_image("--engine", "podman", "--offline", "--base", "localhost/b", "--wheelhouse",
                        "/w/wheelhouse", "--dry-run", timeout=60)
    if reuse.returncode == 0:
        assert "copy /w/wheelhouse" in reuse.stdout and "pip" not in reuse.stdout
        assert "mmdebstrap" not in reuse.stdout and "BASE_IMAGE=localhost/b" in reuse.stdout


@pytest.mark.skipif(bool(pm.MISSING),
                    reason=f"{', '.join(pm.MISSING)} not installed (scripts/install-system-packages)")
@pytest.mark.timeout(BUILD_TIMEOUT + 300)
def test_an_offline_podman_build_keeps_its_healthcheck_and_its_banner_says_where_to_connect() -> None:
    built = build_image("--engine", "podman", "--offline", "--tag", IMAGE)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    assert f"built {IMAGE} (healthcheck: universe-remote health" in built.stdout
    found = json.loads(pm.podman("image", "inspect", IMAGE).stdout)[0]
    check = found.get("Healthcheck") or found["Config"].get("Healthcheck")
    assert check["Test"][1:3] == ["universe-remote", "health"]
    checks = textwrap.dedent(f"""
        import json, os, subprocess, sys, time
        sys.path.insert(0, os.environ["PYTHONPATH"])
        from tests.docker import podman as pm
        pm.podman("rm", "-f", "build-image-test", check=False)
        pm.podman("run", "-d", "--name", "build-image-test", "--network=host", "--pull=never",
                  "-e", "UNIVERSE_REMOTE_PASSWORD=pw", {IMAGE!r}, "builtin.Catch-v0", "--host",
                  "0.0.0.0", "--insecure", "--vnc-port", "5900", "--rewarder-port", "15900")
        out = {{"healthy": False, "banner": ""}}
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                logs = pm.podman("logs", "build-image-test", check=False).stdout
                if "Ctrl-C to stop" in logs:
                    out["banner"] = logs
                    if pm.podman("healthcheck", "run", "build-image-test", check=False).returncode == 0:
                        out["healthy"] = True
                        break
                time.sleep(0.2)  # a poll with a deadline, not synchronisation
        finally:
            pm.podman("rm", "-f", "build-image-test", check=False)
        print(json.dumps(out))
    """)
    done = pm.in_netns(checks, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    banner = found["banner"]
    assert found["healthy"], banner
    assert "0.0.0.0:" not in banner and "://0.0.0.0" not in banner, banner
    assert "agent address  vnc://127.0.0.1:5900+15900?password=<password>" in banner
    assert "in a container: from outside, connect to the ports the host publishes" in banner


def test_make_image_runs_the_script() -> None:
    plan = subprocess.run(["make", "-n", "-C", str(ROOT), "image", "IMAGE_ARGS=--offline --browser"],
                          capture_output=True, text=True, timeout=60, check=True,
                          env={**os.environ, "MAKEFLAGS": ""}).stdout
    assert "scripts/build-image --offline --browser" in plan, plan
