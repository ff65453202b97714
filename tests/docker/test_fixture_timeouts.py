"""Every slow session fixture's setup runs inside a test with the timeout it needs (issue
34): the image build ran first under test_build_image.py, which had the suite's 120 s, so
on a busy machine the build was cut and its cached failure errored the podman tests.

pytest collects tests/docker in a subprocess with a probe plugin that writes each test's
timeout and fixtures after collection (the conftest's hook has run): nothing is built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Final

from tests.docker.conftest import DEFAULT_TIMEOUT, SLOW_FIXTURES
from tests.docker.test_podman import BODY_TIMEOUT as PODMAN_BODY_TIMEOUT

ROOT: Final = Path(__file__).resolve().parents[2]
PROBE: Final = textwrap.dedent("""
    import json, os

    def pytest_collection_finish(session):
        rows = []
        for item in session.items:
            marker = item.get_closest_marker("timeout")
            rows.append({"id": item.nodeid, "fixtures": list(getattr(item, "fixturenames", ())),
                         "timeout": marker.args[0] if marker is not None and marker.args else None})
        with open(os.environ["TIMEOUT_PROBE_OUT"], "w") as f:
            json.dump(rows, f)
""")


def _collect(tmp_path: Path, *paths: str) -> list[dict[str, Any]]:
    (tmp_path / "timeout_probe.py").write_text(PROBE)
    out = tmp_path / "rows.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}", "TIMEOUT_PROBE_OUT": str(out)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "timeout_probe",
         "-p", "no:cacheprovider", *paths],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.exists(), (done.stdout[-2000:], done.stderr[-2000:])
    rows: list[dict[str, Any]] = json.loads(out.read_text())
    return rows


def _first_users(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    first: dict[str, dict[str, Any]] = {}
    for row in rows:
        for name in SLOW_FIXTURES:
            if name in row["fixtures"]:
                first.setdefault(name, row)
    return first


def test_the_first_test_to_use_each_slow_fixture_has_the_fixtures_budget(tmp_path: Path) -> None:
    rows = _collect(tmp_path, "tests/docker")
    first = _first_users(rows)
    assert set(first) == set(SLOW_FIXTURES), [r["id"] for r in rows]
    for name, row in first.items():
        assert row["timeout"] is not None, f"{row['id']} sets up {name} under the suite's timeout"
        budget = sum(SLOW_FIXTURES[n] for n, r in first.items() if r is row)
        assert row["timeout"] >= budget + DEFAULT_TIMEOUT, (name, row)


def test_the_budget_follows_the_run_order_and_later_tests_keep_their_own(tmp_path: Path) -> None:
    rows = _collect(tmp_path, "tests/docker/test_podman.py")
    users = [r for r in rows if "image" in r["fixtures"]]
    assert len(users) >= 2, rows
    assert users[0]["timeout"] == PODMAN_BODY_TIMEOUT + SLOW_FIXTURES["context"] + SLOW_FIXTURES["image"]
    assert all(r["timeout"] == PODMAN_BODY_TIMEOUT for r in users[1:]), users
