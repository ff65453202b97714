"""Packaging: the project builds with no warnings, and its wheel carries the pages it serves."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Final

import pytest

ROOT = Path(__file__).parents[1]
#: What a build needs from the tree (tests, docs and benchmarks are not packaged).
BUILD_INPUTS: Final = ("pyproject.toml", "README.md", "rewarder", "vncdriver", "runtimes",
                       "envserver", "remotes", "universe_remote")
#: Seconds pip may take, fetching setuptools for its isolated build included.
BUILD_TIMEOUT: Final = 300
#: pip's words when the index cannot be reached (then there is nothing to judge).
OFFLINE: Final = ("Could not find a version that satisfies", "Network is unreachable",
                  "Temporary failure in name resolution", "No matching distribution")


def test_the_wheel_builds_without_warnings(tmp_path: Path) -> None:
    """As ``make`` installs it: pip, an isolated build with the newest setuptools."""
    source = tmp_path / "source"
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy(path, source / name)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(tmp_path / "wheels"),
         str(source)],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False,
    )
    output = result.stdout + result.stderr
    if result.returncode != 0 and any(words in output for words in OFFLINE):
        pytest.skip(f"pip cannot fetch the build requirements here: {output[-300:]}")
    assert result.returncode == 0, output
    # The build backend's warnings (pip's own, about this machine's index settings, are not ours).
    warnings = [line for line in output.splitlines() if "BuildBackendWarning" in line or "deprecat" in line]
    assert not warnings, "\n".join(warnings)

    (wheel,) = (tmp_path / "wheels").glob("universe_remote-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert "License-Expression: MIT" in metadata
    for page in ("envserver/static/viewer.html", "remotes/static/dashboard.html", "remotes/py.typed"):
        assert page in names
