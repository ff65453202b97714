"""``scripts/build-image`` (``make image``) builds the remote's image with no daemon and no
registry, keeps its HEALTHCHECK, and the container's banner prints addresses one can
connect to (issue 29, item 2).

The offline route (a base from Debian packages, a wheelhouse, the Dockerfile's build
arguments) is what tests/docker builds its images with (``tests.docker.podman.build_image``
runs this script), and ``tests/docker/test_build_image.py`` runs the result; here, each
engine's plan.
"""

from __future__ import annotations

import os
import subprocess
import sys
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
#: Seconds an online build may take to fail with no registry (podman retries its pull).
NO_REGISTRY_TIMEOUT: Final = 300


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


def test_make_image_runs_the_script() -> None:
    plan = subprocess.run(["make", "-n", "-C", str(ROOT), "image", "IMAGE_ARGS=--offline --browser"],
                          capture_output=True, text=True, timeout=60, check=True,
                          env={**os.environ, "MAKEFLAGS": ""}).stdout
    assert "scripts/build-image --offline --browser" in plan, plan


@pytest.mark.timeout(NO_REGISTRY_TIMEOUT + 30)
def test_an_online_build_with_no_registry_says_to_build_offline() -> None:
    """``make image`` on a machine with no registry (here: a namespace with only loopback)
    ended "podman build failed (125)" with no word of the offline build."""
    if pm.MISSING:
        pytest.skip(f"{', '.join(pm.MISSING)} not installed (scripts/install-system-packages)")
    done = subprocess.run(
        ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", sys.executable,
         str(SCRIPT), "--engine", "podman", "--tag", IMAGE],
        capture_output=True, text=True, env=pm.ENV, timeout=NO_REGISTRY_TIMEOUT, cwd=ROOT, check=False,
    )
    assert done.returncode == 1, (done.stdout[-2000:], done.stderr[-2000:])
    said = done.stderr.strip().splitlines()
    assert said[-1].startswith("an online build pulls") and "IMAGE_ARGS=--offline" in said[-1], said
    assert "runc" in said[-1] and "docs/docker.md" in said[-1]
