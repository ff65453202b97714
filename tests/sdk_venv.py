"""Virtual environments made as a user's ``pip install 'universe-remote[mcp]'`` makes them,
so tests run the MCP SDK that a fresh install resolves (2.x today) and the lowest one
the ``mcp`` extra allows, not whichever the test extras happen to pull in (OpenEnv's
fastmcp holds the test environment at 1.x).

Each is built once per set of requirements (the project's and its ``mcp`` extra's), Python
and pin, and kept (under
``$UNIVERSE_REMOTE_VENV_CACHE``, default ``~/.cache/universe-remote/venvs``) for
:data:`MAX_AGE` seconds, so a newer SDK release is picked up within a day; pip takes
its packages from the index it is set up with (a local one works offline). The
project's code runs from the source tree (``PYTHONPATH``), the installed copy of it
only proves the install resolves.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
#: Seconds a built environment is reused before it is built again from the index.
MAX_AGE: Final = 24 * 3600.0
#: Seconds an install may take (a cold cache on a loaded machine).
INSTALL_TIMEOUT: Final = 600.0
_STAMP: Final = ".universe-remote-built"
#: The SDKs tests/envserver/test_mcp_sdk_majors.py runs: what ``.[mcp]`` resolves, and the
#: lowest the extra allows (pyproject.toml).
LOWEST: Final = "mcp==1.24.0"
PINS: Final = ((), (LOWEST,))


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "universe-remote" / "venvs"
    return Path(os.environ.get("UNIVERSE_REMOTE_VENV_CACHE") or default)


def sdk_venv(*pins: str) -> Path:
    """The python of an environment with ``'.[mcp]'`` and ``pins`` (e.g. ``mcp==1.24.0``)
    installed; built now unless a recent one is kept."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["mcp"], sys.version, *pins]
    key = hashlib.sha256("\0".join(wanted).encode()).hexdigest()[:16]
    where = cache_dir() / f"mcp-{key}"
    python = where / "bin" / "python"
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(where.parent / f".mcp-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run building the same one waits for it
        stamp = where / _STAMP
        if stamp.exists() and time.time() - stamp.stat().st_mtime < MAX_AGE and python.exists():
            return python
        shutil.rmtree(where, ignore_errors=True)
        for old in where.parent.glob("mcp-*/" + _STAMP):  # ones of older requirements
            if time.time() - old.stat().st_mtime > MAX_AGE:
                shutil.rmtree(old.parent, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=INSTALL_TIMEOUT)
        installed = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             f"{ROOT}[mcp]", *pins],
            capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
        if installed.returncode != 0:
            raise RuntimeError(f"pip install '.[mcp]' {' '.join(pins)} failed:\n{installed.stderr[-3000:]}")
        stamp.touch()
    return python


def prebuild() -> threading.Thread:
    """Build (or find) every environment of :data:`PINS` in a thread of its own, so that
    on a fresh machine their installs (a minute or two) overlap the tests that run before
    the ones using them; :func:`sdk_venv` there waits on the same lock. A failure is left
    for the test to meet again and report."""

    def build() -> None:
        for pins in PINS:
            try:
                sdk_venv(*pins)
            except Exception:  # (the test's own call says what went wrong)
                pass

    thread = threading.Thread(target=build, name="mcp-sdk-venvs", daemon=True)
    thread.start()
    return thread


def installed_version(python: Path, package: str) -> str:
    """``package``'s version in ``python``'s environment."""
    return subprocess.run(
        [str(python), "-c", f"from importlib.metadata import version; print(version({package!r}))"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
