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
BUILD_INPUTS: Final = ("pyproject.toml", "README.md", "rewarder", "vncdriver", "recordings", "runtimes",
                       "envserver", "remotes", "universe_remote")
#: Seconds pip may take, fetching setuptools for its isolated build included.
BUILD_TIMEOUT: Final = 300
#: pip's words when the index cannot be reached (then there is nothing to judge).
OFFLINE: Final = ("Could not find a version that satisfies", "Network is unreachable",
                  "Temporary failure in name resolution", "No matching distribution")


def _source(tmp_path: Path) -> Path:
    """A copy of what a build reads, so the build cannot touch the tree."""
    source = tmp_path / "source"
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy(path, source / name)
    return source


def _pip(python: str | Path, *args: str) -> str:
    """Run pip; its output, once it succeeded and said nothing of the build backend's."""
    result = subprocess.run(
        [str(python), "-m", "pip", *args],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False,
    )
    output = result.stdout + result.stderr
    if result.returncode != 0 and any(words in output for words in OFFLINE):
        pytest.skip(f"pip cannot fetch the build requirements here: {output[-300:]}")
    assert result.returncode == 0, output
    # The build backend's warnings (pip's own, about this machine's index settings, are not ours).
    warnings = [
        line for line in output.splitlines()
        if "BuildBackendWarning" in line or "deprecat" in line or "Editable install" in line
    ]
    assert not warnings, "\n".join(warnings)
    return output


def test_the_editable_install_is_quiet(tmp_path: Path) -> None:
    """``make`` installs with ``pip install -e``: setuptools says nothing about it, and
    the packages are found in the tree (found, not imported: no dependencies here)."""
    source = _source(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=BUILD_TIMEOUT)
    # As make does: a newer pip shows what the build backend warns, the bundled one hides it.
    _pip(venv / "bin" / "python", "install", "--quiet", "--upgrade", "pip")
    _pip(venv / "bin" / "python", "install", "--no-deps", "-e", str(source))
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.util as u; print(u.find_spec('remotes').origin)"],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=True, cwd=tmp_path,
    )
    assert found.stdout.strip() == str(source / "remotes" / "__init__.py")


def test_the_wheel_builds_without_warnings(tmp_path: Path) -> None:
    """As ``make`` installs it: pip, an isolated build with the newest setuptools."""
    source = _source(tmp_path)
    _pip(sys.executable, "wheel", "--no-deps", "--wheel-dir", str(tmp_path / "wheels"), str(source))

    (wheel,) = (tmp_path / "wheels").glob("universe_remote-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert "License-Expression: MIT" in metadata
    for page in ("envserver/static/viewer.html", "remotes/static/dashboard.html", "remotes/py.typed",
                 "envserver/dmrpc/server.py"):
        assert page in names
    # Every package of the tree is in the wheel (a subpackage missing from pyproject's
    # list imports in the checkout and fails in the images).
    for init in (i for name in BUILD_INPUTS for i in (source / name).glob("**/__init__.py")):
        assert init.relative_to(source).as_posix() in names, f"{init.parent.name} is not packaged"


def test_every_dependency_is_bounded_to_the_majors_the_suite_runs() -> None:
    """Each requirement, run time and extras alike, has an upper bound, and what this
    environment installed lies inside it: a fresh install cannot get a major the suite
    never ran (issue 45: Pillow 13.0 beside a suite on 12.3)."""
    import tomllib
    from importlib import metadata

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines += extra
    for line in lines:
        req = Requirement(line)
        assert any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier), (
            f"{line}: no upper bound; bound it to the newest major the suite runs"
        )
        try:
            installed = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            continue  # an extra this environment does not have (tests/optional.py)
        assert req.specifier.contains(installed, prereleases=True), (
            f"{req.name} {installed} is installed, outside {line}: the suite runs what a user cannot get"
        )
