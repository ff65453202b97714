"""Test helpers: build and run the shipped Dockerfile with podman, offline, on loopback only.

Holds :func:`podman` (the CLI with the flags these machines need), :func:`build_base`
(a Debian base image from Debian packages: no registry is reachable; the browser image's
base also holds Chromium, Xvnc and the rest of its Dockerfile's ``BROWSER_PACKAGES``),
:func:`build_context` (the project plus a wheelhouse, for an offline build),
:func:`build_image` (either Dockerfile) and :func:`in_netns` (runs a Python script in a
fresh network namespace that has only loopback, so a container serving on ``0.0.0.0``
with ``--network=host`` is reachable from nothing but that script). FIELD-NOTES has how each was measured.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[2]
DOCKERFILE: Final = ROOT / "docker" / "Dockerfile"
BROWSER_DOCKERFILE: Final = ROOT / "docker" / "Dockerfile.browser"
#: Local image names (never pushed, never pulled).
BASE_IMAGE: Final = "localhost/universe-remote-base:test"
IMAGE: Final = "localhost/universe-remote:test"
BROWSER_IMAGE: Final = "localhost/universe-remote:browser-test"
#: What the base image holds: what the Dockerfile needs of a Python image.
BASE_PACKAGES: Final = "python3,python3-venv,ca-certificates,passwd"


def _browser_packages() -> str:
    """The Debian packages Dockerfile.browser installs, read from its ARG (one list)."""
    match = re.search(r'^ARG BROWSER_PACKAGES="([^"]+)"$', BROWSER_DOCKERFILE.read_text(),
                      re.MULTILINE)
    if match is None:
        raise RuntimeError(f'{BROWSER_DOCKERFILE} has no line ARG BROWSER_PACKAGES="..."')
    return ",".join(match.group(1).split())


#: The browser image's base: the Python base plus its Dockerfile's packages, so its apt
#: step has nothing left to install and the build stays offline.
BROWSER_BASE_PACKAGES: Final = f"{BASE_PACKAGES},{_browser_packages()}"
#: Named by its package list, so a changed list makes a new base instead of reusing one.
BROWSER_BASE_IMAGE: Final = (
    "localhost/universe-remote-browser-base:"
    + hashlib.sha256(BROWSER_BASE_PACKAGES.encode()).hexdigest()[:12]
)
#: The extras the shared wheelhouse holds: both images' (docker/Dockerfile installs
#: [atari,dmenv], Dockerfile.browser [atari,dmenv,browser]).
WHEEL_EXTRAS: Final = "atari,dmenv,browser"
#: crun fails here (hybrid cgroups, RLIMIT_NOFILE); runc with cgroupfs works.
PODMAN_FLAGS: Final = ("--runtime", "runc", "--cgroup-manager=cgroupfs")
#: Seconds for mmdebstrap (26 s measured; 51 s with the browser packages), a wheelhouse
#: (10 s) and a build (10 s; 40 s for the browser image).
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


def build_base(workdir: Path, image: str = BASE_IMAGE, packages: str = BASE_PACKAGES) -> None:
    """A minimal Debian 12 image with Python and ``packages``, made from Debian packages
    (no registry); kept in podman's storage, so later sessions reuse it."""
    if image_exists(image):
        return
    rootfs = workdir / "rootfs.tar"
    subprocess.run(
        ["mmdebstrap", "--quiet", "--variant=minbase", f"--include={packages}",
         "bookworm", str(rootfs)],
        check=True, timeout=BASE_TIMEOUT, capture_output=True,
    )
    podman("import", str(rootfs), image, timeout=BASE_TIMEOUT)
    rootfs.unlink()


def build_context(workdir: Path) -> Path:
    """The project's files an image needs, plus ``wheelhouse/``: the project's wheels, its
    dependencies' (both images' extras) and setuptools', so the builds need no network."""
    context = workdir / "context"
    shutil.copytree(ROOT, context, ignore=shutil.ignore_patterns(*CONTEXT_SKIP))
    wheelhouse = context / "wheelhouse"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run([*pip, "wheel", f"{ROOT}[{WHEEL_EXTRAS}]", "-w", str(wheelhouse)],
                   check=True, timeout=BUILD_TIMEOUT)
    subprocess.run([*pip, "download", "setuptools>=68", "wheel", "-d", str(wheelhouse)],
                   check=True, timeout=BUILD_TIMEOUT)
    return context


def build_image(context: Path, dockerfile: Path = DOCKERFILE, image: str = IMAGE,
                base: str = BASE_IMAGE) -> str:
    """Build a shipped Dockerfile offline from a local base and the context's wheelhouse,
    the way users do: ``scripts/build-image`` (``make image``), which builds without
    per-step layers and with ``--format=docker`` (the HEALTHCHECK kept), and removes the
    image it replaces. Returns what the script printed."""
    args = [sys.executable, str(ROOT / "scripts" / "build-image"), "--engine", "podman",
            "--offline", "--base", base, "--wheelhouse", str(context / "wheelhouse"),
            "--tag", image]
    if dockerfile == BROWSER_DOCKERFILE:
        args.append("--browser")
    done = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=BUILD_TIMEOUT,
                          check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/build-image failed ({done.returncode}): "
                           f"{done.stdout[-1000:]}{done.stderr[-2000:]}")
    return done.stdout


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


def service_scenario(script: str, image: str, timeout: float) -> dict[str, Any]:
    """Run ``script`` (its ``sys.argv[1]`` being ``image``) after :data:`SERVICE_PRELUDE`
    in a namespace (:func:`in_netns`); what it printed last, as JSON."""
    done = in_netns(SERVICE_PRELUDE + script.replace("sys.argv[1]", repr(image)), timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found
