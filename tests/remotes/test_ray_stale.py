"""``play --ray`` / ``start_ray`` when the cluster Ray would join is gone (issue 29, item
3): a stale ``ray_current_cluster`` file made Ray retry for minutes, silently. Now a
refusal takes seconds and says what to do; a port that accepts but is no Ray head is
given up after ``init_timeout``.

Run in a network namespace with only ``lo`` (tests/ray_cluster.py), so Ray never touches
the real interfaces, with Ray's temp directory in the test's own folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Final

import pytest

from tests.ray_cluster import RAY_ENV, NamespaceUnavailable, check_netns, in_netns

ROOT: Final = Path(__file__).resolve().parents[2]
#: The address a `ray start --head` of a cluster long gone left behind.
STALE: Final = "127.0.0.1:6379"
#: Seconds a refused cluster may take to be reported (the probe is immediate; the rest is
#: Python and Ray importing on a loaded machine). Before the fix: over 150 s.
REFUSED_WITHIN: Final = 30.0
#: The init_timeout the hung case is given, and the slack on top of it.
INIT_TIMEOUT: Final = 4.0
HUNG_SLACK: Final = 30.0

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import ray"], capture_output=True).returncode != 0,
    reason="ray is not installed (pip install 'universe-remote[ray]')",
)


@pytest.fixture
def stale_tmp(tmp_path: Path) -> dict[str, str]:
    """The environment of a process whose Ray temp directory names a dead cluster."""
    try:
        check_netns()
    except NamespaceUnavailable as exc:
        pytest.fail(str(exc))
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(STALE + "\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, **RAY_ENV, "RAY_TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}


def test_play_ray_with_a_stale_cluster_file_fails_fast_saying_what_to_do(
    stale_tmp: dict[str, str],
) -> None:
    started = time.monotonic()
    done = subprocess.run(
        in_netns([sys.executable, "-m", "universe_remote", "play", "builtin.Catch-v0", "-n", "2",
                  "--ray", "--steps", "5"]),
        capture_output=True, text=True, env=stale_tmp, cwd=ROOT, timeout=REFUSED_WITHIN * 3,
    )
    took = time.monotonic() - started
    assert done.returncode == 1, (done.stdout, done.stderr[-2000:])
    assert took < REFUSED_WITHIN, f"took {took:.1f} s"
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("universe-remote play:")]
    assert STALE in line and "ray_current_cluster" in line and "--ray local" in line, line
    assert "Traceback" not in done.stderr


def test_a_port_that_accepts_but_is_no_ray_head_is_given_up_after_init_timeout(
    stale_tmp: dict[str, str],
) -> None:
    script = textwrap.dedent(f"""
        import socket, threading, time
        from remotes.ray import RayUnavailable, start_ray
        listener = socket.create_server(("127.0.0.1", {STALE.rpartition(":")[2]}))
        held = []
        threading.Thread(target=lambda: [held.append(listener.accept()) for _ in iter(int, 1)],
                         daemon=True).start()
        started = time.monotonic()
        try:
            start_ray("builtin.Catch-v0", 1, init_timeout={INIT_TIMEOUT})
        except RayUnavailable as exc:
            print(f"{{time.monotonic() - started:.1f}}", exc, flush=True)
    """)
    started = time.monotonic()
    done = subprocess.run(
        in_netns([sys.executable, "-c", script]), capture_output=True, text=True, env=stale_tmp,
        cwd=ROOT, timeout=INIT_TIMEOUT + HUNG_SLACK * 3,
    )
    assert time.monotonic() - started < INIT_TIMEOUT + HUNG_SLACK, "the process did not end"
    seconds, _, message = done.stdout.strip().partition(" ")
    assert message, (done.stdout, done.stderr[-2000:])
    assert INIT_TIMEOUT <= float(seconds) < INIT_TIMEOUT + HUNG_SLACK
    assert "did not join the cluster at 127.0.0.1:6379" in message and "--ray local" in message
