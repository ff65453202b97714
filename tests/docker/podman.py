"""Test helpers: build and run the shipped Dockerfile with podman, offline, on loopback only.

Holds :func:`podman` (the CLI with the flags these machines need), :func:`build_base`
(a Debian base image from Debian packages: no registry is reachable),
:func:`build_context` (the project plus a wheelhouse, for an offline build) and
:func:`in_netns` (runs a Python script in a fresh network namespace that has only
loopback, so a container serving on ``0.0.0.0`` with ``--network=host`` is reachable
from nothing but that script). FIELD-NOTES has how each was measured.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
DOCKERFILE: Final = ROOT / "docker" / "Dockerfile"
#: Local image names (never pushed, never pulled).
BASE_IMAGE: Final = "localhost/universe-remote-base:test"
IMAGE: Final = "localhost/universe-remote:test"
#: What the base image holds: what the Dockerfile needs of a Python image.
BASE_PACKAGES: Final = "python3,python3-venv,ca-certificates,passwd"
#: crun fails here (hybrid cgroups, RLIMIT_NOFILE); runc with cgroupfs works.
PODMAN_FLAGS: Final = ("--runtime", "runc", "--cgroup-manager=cgroupfs")
#: Seconds for mmdebstrap (26 s measured), a wheelhouse (10 s) and a build (10 s).
BASE_TIMEOUT: Final = 600.0
BUILD_TIMEOUT: Final = 600.0
#: Folders of the project an image needs: what the .dockerignore would send.
CONTEXT_SKIP: Final = (".venv", ".git", "tests", "benchmarks", "docs", "build", "dist",
                       "__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache",
                       ".mypy_cache", "*.egg-info", "wheelhouse")

_conf_dir = Path(tempfile.mkdtemp(prefix="podman-conf-"))
# The flags again, as configuration: the podman service that Docker's CLI talks to
# (start_docker) takes no command-line flags for its containers.
(_conf_dir / "containers.conf").write_text(
    '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n'
)
#: Where ``podman system service`` listens for Docker's CLI (DOCKER_HOST) in a namespace.
SERVICE_SOCKET: Final = _conf_dir / "podman.sock"
ENV: Final = {**os.environ, "CONTAINERS_CONF": str(_conf_dir / "containers.conf")}

MISSING = [c for c in ("podman", "mmdebstrap", "runc", "unshare", "ip", "docker")
           if not shutil.which(c)]


def podman(*args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS`` with the flags and config these machines need."""
    result = subprocess.run(
        ["podman", *PODMAN_FLAGS, *args], capture_output=True, text=True, env=ENV,
        timeout=timeout, check=False,
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:3])} failed ({result.returncode}): "
                           f"{result.stderr.strip()[-2000:]}")
    return result


def image_exists(name: str) -> bool:
    return podman("image", "exists", name, check=False).returncode == 0


def build_base(workdir: Path) -> None:
    """A minimal Debian 12 image with Python, made from Debian packages (no registry)."""
    if image_exists(BASE_IMAGE):
        return
    rootfs = workdir / "rootfs.tar"
    subprocess.run(
        ["mmdebstrap", "--quiet", "--variant=minbase", f"--include={BASE_PACKAGES}",
         "bookworm", str(rootfs)],
        check=True, timeout=BASE_TIMEOUT, capture_output=True,
    )
    podman("import", str(rootfs), BASE_IMAGE, timeout=BASE_TIMEOUT)
    rootfs.unlink()


def build_context(workdir: Path) -> Path:
    """The project's files an image needs, plus ``wheelhouse/``: the project's wheels, its
    dependencies' and setuptools', so the build needs no network."""
    context = workdir / "context"
    shutil.copytree(ROOT, context, ignore=shutil.ignore_patterns(*CONTEXT_SKIP))
    wheelhouse = context / "wheelhouse"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run([*pip, "wheel", f"{ROOT}[atari,dmenv]", "-w", str(wheelhouse)],
                   check=True, timeout=BUILD_TIMEOUT)
    subprocess.run([*pip, "download", "setuptools>=68", "wheel", "-d", str(wheelhouse)],
                   check=True, timeout=BUILD_TIMEOUT)
    return context


def build_image(context: Path) -> None:
    """Build the shipped Dockerfile offline from the local base and the wheelhouse."""
    podman(
        "build", "--network=none", "--pull=never", "--format=docker",
        "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
        "--build-arg", "PIP_OPTIONS=--no-index --find-links /src/wheelhouse",
        "-f", str(DOCKERFILE), "-t", IMAGE, str(context),
        timeout=BUILD_TIMEOUT,
    )


def in_netns(script: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (Python, this interpreter) in a new network namespace with only
    loopback up; the containers it starts with ``--network=host`` live there too."""
    return subprocess.run(
        ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$0" -c "$1"',
         sys.executable, script],
        capture_output=True, text=True, env={**ENV, "PYTHONPATH": str(ROOT)}, timeout=timeout,
        check=False,
    )


#: Prepended to a script for :func:`in_netns`: starts podman's Docker-compatible API in
#: the namespace and points Docker's CLI (``start_docker``) at it.
SERVICE_PRELUDE: Final = f"""
import os, subprocess, time
_service = subprocess.Popen(
    ["podman", "system", "service", "--time=0", "unix://{SERVICE_SOCKET}"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_deadline = time.monotonic() + 30
while not os.path.exists("{SERVICE_SOCKET}") and time.monotonic() < _deadline:
    time.sleep(0.05)  # a poll with a deadline: the socket appears when the service is up
os.environ["DOCKER_HOST"] = "unix://{SERVICE_SOCKET}"
"""
