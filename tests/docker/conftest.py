"""The images the podman tests run, each built once per test session, offline.

Both Dockerfiles build from one build context (the project and a wheelhouse with both
images' extras); each image from its own mmdebstrap base, which podman keeps between
sessions. The tests add what they measure (sizes, start-up times) to :data:`FIGURES`,
with the build times: they are printed at the end of the run, passed or not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docker import podman as pm

#: Lines for the run's summary: figures the docker tests measured.
FIGURES: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the figures in every run's output (not only with ``-s``): docs quote them."""
    if FIGURES:
        terminalreporter.section("docker figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


def timed(what: str, started: float) -> None:
    FIGURES.append(f"{what}: {time.monotonic() - started:.1f} s")


@pytest.fixture(scope="session")
def context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build context: the project's files and a wheelhouse for both Dockerfiles."""
    started = time.monotonic()
    built = pm.build_context(tmp_path_factory.mktemp("context"))
    timed("build context (files and wheelhouse)", started)
    return built


@pytest.fixture(scope="session")
def image(context: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The default image, built once per test session from docker/Dockerfile."""
    pm.build_base(tmp_path_factory.mktemp("base"))
    pm.build_image(context)
    yield pm.IMAGE


@pytest.fixture(scope="session")
def browser_image(context: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The browser image, built once per test session from docker/Dockerfile.browser."""
    started = time.monotonic()
    cached = pm.image_exists(pm.BROWSER_BASE_IMAGE)
    pm.build_base(tmp_path_factory.mktemp("browser-base"), pm.BROWSER_BASE_IMAGE,
                  pm.BROWSER_BASE_PACKAGES)
    timed(f"browser base ({'cached' if cached else 'mmdebstrap and podman import'})", started)
    started = time.monotonic()
    pm.build_image(context, pm.BROWSER_DOCKERFILE, pm.BROWSER_IMAGE, pm.BROWSER_BASE_IMAGE)
    timed("browser image build (podman build)", started)
    yield pm.BROWSER_IMAGE
