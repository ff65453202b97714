"""The images the podman tests run, each built once per test session, offline.

Both Dockerfiles build from one build context (the project and a wheelhouse with both
images' extras); each image from its own mmdebstrap base, which podman keeps between
sessions. pytest-timeout counts a fixture's setup in the time of the test that asks for
it first, so that test's timeout gets the fixture's budget (:data:`SLOW_FIXTURES`) on top
of its own; the tests after it keep theirs. The tests add what they measure (sizes,
start-up times) to :data:`FIGURES`, with the build times: they are printed at the end of
the run, passed or not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from tests.docker import podman as pm

#: Seconds each session fixture may take to set up on a loaded 2-core machine (load ~13),
#: charged to the first test that uses it. Measured idle (FIELD-NOTES): the wheelhouse
#: 10 s; mmdebstrap 26 s (51 s with the browser packages) and a build 10 s (40 s).
SLOW_FIXTURES: Final = {"context": 300.0, "image": 600.0, "browser_image": 900.0}
#: The suite's timeout (pyproject's [tool.pytest.ini_options] timeout) for a test with none.
DEFAULT_TIMEOUT: Final = 120.0


def own_timeout(item: pytest.Item) -> float:
    """The timeout ``item`` has without the fixtures' budgets: its marker's, else the ini's."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    if marker is not None and "timeout" in marker.kwargs:
        return float(marker.kwargs["timeout"])
    configured = item.config.getini("timeout")
    return float(configured) if configured else DEFAULT_TIMEOUT


@pytest.hookimpl(trylast=True)  # after -k/-m deselection and any reordering
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give the first test (in run order) that uses each slow session fixture that
    fixture's budget on top of its own timeout: the build runs inside that test's time."""
    unpaid = dict(SLOW_FIXTURES)
    for item in items:
        names = getattr(item, "fixturenames", ())
        budget = sum(unpaid.pop(name) for name in list(unpaid) if name in names)
        if budget:
            item.add_marker(pytest.mark.timeout(own_timeout(item) + budget), append=False)
        if not unpaid:
            return


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
