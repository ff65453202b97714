"""An image ``scripts/build-image`` (``make image``) built offline with podman keeps its
HEALTHCHECK, and the container's banner prints addresses one can connect to (issue 29,
item 2). The image is the session's default one (``conftest.image``), which the script
built; the container runs with ``--network=host`` in a network namespace that has only
loopback (:func:`tests.docker.podman.in_netns`)."""

from __future__ import annotations

import json
import textwrap
from typing import Final

import pytest

from tests.docker import podman as pm

#: Seconds the test's own body may take (its namespace script: 180 s); the image's build,
#: which it usually sets up first, adds its budget (conftest's SLOW_FIXTURES).
BODY_TIMEOUT: Final = 240
pytestmark = [
    pytest.mark.skipif(
        bool(pm.MISSING),
        reason=f"{', '.join(pm.MISSING)} not installed (scripts/install-system-packages)",
    ),
    pytest.mark.timeout(BODY_TIMEOUT),
]


def test_an_offline_podman_build_keeps_its_healthcheck_and_its_banner_says_where_to_connect(
    image: str,
) -> None:
    # (built by scripts/build-image: tests.docker.podman.build_image)
    found = json.loads(pm.podman("image", "inspect", image).stdout)[0]
    check = found.get("Healthcheck") or found["Config"].get("Healthcheck")
    assert check["Test"][1:3] == ["universe-remote", "health"]
    checks = textwrap.dedent(f"""
        import json, os, subprocess, sys, time
        sys.path.insert(0, os.environ["PYTHONPATH"])
        from tests.docker import podman as pm
        pm.podman("rm", "-f", "build-image-test", check=False)
        pm.podman("run", "-d", "--name", "build-image-test", "--network=host", "--pull=never",
                  "-e", "UNIVERSE_REMOTE_PASSWORD=pw", {image!r}, "builtin.Catch-v0", "--host",
                  "0.0.0.0", "--insecure", "--vnc-port", "5900", "--rewarder-port", "15900")
        out = {{"healthy": False, "banner": ""}}
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                logs = pm.podman("logs", "build-image-test", check=False).stdout
                if "Ctrl-C to stop" in logs:
                    out["banner"] = logs
                    if pm.podman("healthcheck", "run", "build-image-test", check=False).returncode == 0:
                        out["healthy"] = True
                        break
                time.sleep(0.2)  # a poll with a deadline, not synchronisation
        finally:
            pm.podman("rm", "-f", "build-image-test", check=False)
        print(json.dumps(out))
    """)
    done = pm.in_netns(checks, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    banner = found["banner"]
    assert found["healthy"], banner
    assert "0.0.0.0:" not in banner and "://0.0.0.0" not in banner, banner
    assert "agent address  vnc://127.0.0.1:5900+15900?password=<password>" in banner
    assert "in a container: from outside, connect to the ports the host publishes" in banner
