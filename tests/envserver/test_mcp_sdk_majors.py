"""``serve --mcp-port`` and the stdio relay in an environment that has only what ``pip
install 'universe-remote[mcp]'`` resolves (mcp 2.x today: its 2.x API crashed the remote
at start-up), and with the lowest SDK the extra allows; each time the installed SDK's own
clients (over HTTP, 2.x's high-level ``mcp.Client`` that probes ``server/discover``
first, and over stdio through the relay) drive a real remote. The environments are built
once a day and kept (tests/sdk_venv.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Final

import pytest

from benchmarks.mcp_agent import Served
from tests.sdk_venv import LOWEST, PINS, ROOT, installed_version, sdk_venv

pytestmark = pytest.mark.timeout(900)  # a cold build: two installs from the index

TIMEOUT: Final = 120.0
CHECK: Final = Path(__file__).with_name("mcp_sdk_check.py")


@pytest.mark.parametrize("pins", PINS, ids=["resolved", "lowest"])
def test_the_installed_sdks_clients_drive_serve_and_the_relay(pins: tuple[str, ...]) -> None:
    python = sdk_venv(*pins)
    version = installed_version(python, "mcp")
    if pins:
        assert version == LOWEST.split("==")[1]
    else:
        assert int(version.split(".")[0]) >= 2, f"a fresh install resolved mcp {version}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    served = Served("builtin.Catch-v0", "--mode", "lockstep", env=env, python=str(python))
    try:
        checked = subprocess.run([str(python), str(CHECK), served.url], env=env, capture_output=True,
                                 text=True, timeout=TIMEOUT)
    finally:
        served.close()
    assert checked.returncode == 0, checked.stderr[-3000:]
    seen = json.loads(checked.stdout.strip().splitlines()[-1])
    assert seen["mcp"] == version
    assert {"computer", "reset", "state", "seat", "wait_until_settled"} <= set(seen["tools"])
    assert seen["reset"] == ["image", "text"] and seen["mime"] == "image/png"
    assert seen["key"] >= 1 and seen["you_drive"] is True
    assert seen["bad"][0] is True and "unknown action 'fly'" in seen["bad"][1]
    assert seen["relay_tools"] == seen["tools"] and seen["relay_state"] == "builtin.Catch-v0"
    if not pins:
        assert seen["client_state"] == "builtin.Catch-v0"
