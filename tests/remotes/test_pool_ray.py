"""The warm pool on Ray (remotes/pool/service.py, ``--ray``): a real two-node cluster on
127.0.0.1 in a network namespace of its own, driven by tests/remotes/pool_ray_scenario.py.
Without a namespace (not root, no unshare) it fails, saying why: Ray never runs on the
real interfaces here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from tests.ray_cluster import NamespaceUnavailable, check_netns, in_netns

ROOT: Final = Path(__file__).resolve().parents[2]
#: Seconds the scenario may take on a loaded 2-core machine.
SCENARIO_TIMEOUT: Final = 420

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import ray"], capture_output=True).returncode != 0,
    reason="ray is not installed (pip install 'universe-remote[ray]')",
)


@pytest.mark.timeout(SCENARIO_TIMEOUT + 30)
def test_a_pool_on_ray_replaces_a_killed_remote_and_its_holder_follows(tmp_path: Path) -> None:
    try:
        check_netns()
    except NamespaceUnavailable as exc:
        pytest.fail(str(exc))
    out = tmp_path / "scenario.json"
    run = subprocess.run(
        in_netns([sys.executable, "-m", "tests.remotes.pool_ray_scenario", str(out)]),
        cwd=ROOT, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, check=False,
    )
    assert out.exists(), f"the scenario wrote nothing (exit {run.returncode}):\n{run.stderr[-4000:]}"
    found = json.loads(out.read_text())
    assert found["error"] is None, f"{found['error']}\n{run.stderr[-3000:]}"
    assert len(set(found["warm_remotes"])) == 2
    assert found["errors"], "the holder was not told its remote died"
    assert found["back"] is not None and found["back"] != found["victim"]
    assert found["steps_after"] == 10
    assert found["victim"] not in found["final_remotes"] and len(found["final_remotes"]) == 2
