"""The browser image (docker/Dockerfile.browser), built and run for real with podman, offline.

Its base comes from Debian packages (mmdebstrap with Chromium, Xvnc and the rest of the
Dockerfile's BROWSER_PACKAGES), the project from the shared wheelhouse; the containers run
with ``--network=host`` in a namespace with only loopback (:func:`~tests.docker.podman.in_netns`),
and everything is checked from outside through the published ports, as an agent would:
the rewarder, a VNC client's frames, a click that earns the episode's reward.
"""

from __future__ import annotations

import json
import textwrap
from typing import Final

import pytest

from tests.docker import podman as pm
from tests.docker.conftest import FIGURES

#: Seconds a test's own body may take (its namespace script waits up to 400 s); the first
#: test that asks for the browser image also gets the build's budget (conftest's
#: SLOW_FIXTURES: mmdebstrap ~50 s, import ~25 s, build ~30 s idle).
BODY_TIMEOUT: Final = 520
pytestmark = [
    pytest.mark.skipif(
        bool(pm.MISSING),
        reason=f"{', '.join(pm.MISSING)} not installed (scripts/install-system-packages)",
    ),
    pytest.mark.timeout(BODY_TIMEOUT),
]

#: Bytes the image may take (1,249 MB measured: Chromium 350 MB, Mesa's LLVM 115 MB, the
#: venv 265 MB); a bound that catches a doubled layer or a left-behind cache.
SIZE_LIMIT = 1_600e6

#: Runs inside the namespace: starts containers, checks them from outside, prints JSON.
CHECKS = textwrap.dedent(
    """
    import asyncio, json, os, socket, sys, time
    sys.path.insert(0, os.environ["PYTHONPATH"])
    import numpy as np
    from tests.docker import podman as pm
    from rewarder.client import RewarderClient
    from remotes import RemoteEnv

    IMAGE = sys.argv[1]
    STARTUP_LIMIT = 90.0   # seconds from `podman run` to healthy, on a loaded 2-core machine
    PLAY_LIMIT = 30.0      # seconds to see the task and earn its reward
    QUERY_COLOUR = (255, 255, 0)  # MiniWoB's instruction bar
    TASK, AREA_TOP = (160, 210), 50  # the task's size on screen; the click area's top
    out = {}
    for name in ("browser", "xeyes"):  # left by an interrupted run
        pm.podman("rm", "-f", name, check=False)

    def until(condition, limit, what):
        deadline = time.monotonic() + limit
        while not (value := condition()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} within {limit} s")
            time.sleep(0.1)  # a poll with a deadline, not synchronisation
        return value

    def processes(container):
        # pid, name, state, parent pid of every process in the container (no ps in it)
        script = "for f in /proc/[0-9]*/stat; do cut -d' ' -f1-4 $f 2>/dev/null; done"
        lines = pm.podman("exec", container, "sh", "-c", script).stdout.split("\\n")
        return [line.split() for line in lines if line.count(" ") == 3]

    def greeting(port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            return s.recv(12).decode()

    async def describe(port):
        async with RewarderClient(f"127.0.0.1:{port}", password="pw", observer=True,
                                  calibration_pings=0, start_timeout=10) as c:
            return (await c.wait_for_state("running", timeout=10)).env_id

    def shows_task(frame):
        return tuple(frame[45, 155]) == QUERY_COLOUR  # the bar, right of its text

    def button_centre(frame):
        area = frame[AREA_TOP:TASK[1], :TASK[0]]
        ys, xs = np.nonzero((area < 250).any(axis=2))  # the button: all that is not white
        return (int(xs.mean()), int(ys.mean()) + AREA_TOP) if ys.size >= 100 else None

    def click(x, y):
        return [("PointerEvent", x, y, 0), ("PointerEvent", x, y, 1), ("PointerEvent", x, y, 0)]

    def colours(frame):
        return len(np.unique(frame.reshape(-1, 3), axis=0))

    try:
        # The image's own command: miniwob.ClickTest-v0 on 0.0.0.0, ports 5900/15900/16000/8000.
        started = time.monotonic()
        pm.podman("run", "-d", "--name", "browser", "--network=host", "--pull=never",
                  "-e", "UNIVERSE_REMOTE_PASSWORD=pw", IMAGE)
        until(lambda: pm.podman("healthcheck", "run", "browser", check=False).returncode == 0,
              STARTUP_LIMIT, "the container's HEALTHCHECK passes")
        out["healthy_s"] = time.monotonic() - started
        import urllib.request
        with urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=10) as answer:
            out["openenv_health"] = json.loads(answer.read())
        out["describe"] = asyncio.run(describe(15900))
        out["greeting"] = greeting(5900)
        out["uid"] = pm.podman("exec", "browser", "id", "-u").stdout.strip()

        env = RemoteEnv("vnc://127.0.0.1:5900+15900", password="pw")
        obs, info = env.reset(seed=3)
        out["first_episode_s"] = time.monotonic() - started
        out["text"] = info.get("instruction")
        out["shape"] = list(obs.shape)
        deadline, reward, task_colours = time.monotonic() + PLAY_LIMIT, None, 0
        while reward is None and time.monotonic() < deadline:
            centre = button_centre(obs) if shows_task(obs) else None
            if centre:
                task_colours = max(task_colours, colours(obs[:AREA_TOP, :TASK[0]]))
            obs, r, terminated, truncated, info = env.step(click(*centre) if centre else [])
            if terminated or truncated:
                reward = r
        out["reward"], out["instruction_colours"] = reward, task_colours
        env.close()

        # A dead browser is restarted by the remote; tini (PID 1) reaps what it leaves.
        def browser_pid():
            procs = processes("browser")
            serve = {p[0] for p in procs if p[1] == "(universe-remote)"}
            return next((p[0] for p in procs if p[1] == "(chromium)" and p[3] in serve), None)
        old = browser_pid()
        pm.podman("exec", "browser", "kill", "-9", old)
        until(lambda: browser_pid() not in (None, old), 60, "a new browser")
        def no_zombies():
            return not [p for p in processes("browser") if p[2] == "Z"]
        until(no_zombies, 20, "every exited process reaped")
        out["pid1"] = [p[1] for p in processes("browser") if p[0] == "1"]

        # An X program from x11-apps, on other ports beside it.
        pm.podman("run", "-d", "--name", "xeyes", "--network=host", "--pull=never",
                  "-e", "UNIVERSE_REMOTE_PASSWORD=pw", IMAGE, "x11.XEyes-v0",
                  "--host", "0.0.0.0", "--insecure", "--vnc-port", "5901",
                  "--rewarder-port", "15901", "--dm-env-rpc-port", "16001")
        until(lambda: pm.podman("healthcheck", "run", "xeyes", check=False).returncode == 0,
              STARTUP_LIMIT, "the xeyes container's HEALTHCHECK passes")
        env = RemoteEnv("vnc://127.0.0.1:5901+15901", password="pw")
        obs, _ = env.reset()
        # xeyes fills the screen with two white eyes (the root window around them is black)
        until(lambda: (env.step([])[0] == 255).all(axis=2).mean() > 0.2, 20, "xeyes drawn")
        out["xeyes"] = env.describe.get("env_id")
        env.close()
    finally:
        for name in ("browser", "xeyes"):
            pm.podman("rm", "-f", "-t", "5", name, check=False)
    print(json.dumps(out))
    """
)


def test_the_browser_image_serves_a_miniwob_task_and_x_programs(browser_image: str) -> None:
    done = pm.in_netns(CHECKS.replace("sys.argv[1]", repr(browser_image)), timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["describe"] == "miniwob.ClickTest-v0"  # the image's default command
    assert out["greeting"].startswith("RFB 003.")
    assert out["openenv_health"]["status"] == "healthy"  # the OpenEnv port, 8000
    assert out["uid"] == "10001"  # not root, Chromium's sandbox off (runtimes/browser.py)
    # The instruction reached the agent with the reset, and stays (info["instruction"]).
    assert out["text"] == "Click the button."
    # The task's area, served by the remote's own VNC server (not Xvnc's 640x480 screen).
    assert out["shape"] == [210, 160, 3]
    assert out["instruction_colours"] > 10  # the bar shows text (fonts), not a flat colour
    assert out["reward"] is not None and out["reward"] > 0  # the click landed on the button
    assert out["pid1"] == ["(tini)"]
    assert out["xeyes"] == "x11.XEyes-v0"
    FIGURES.append(f"browser image: healthy {out['healthy_s']:.1f} s after `podman run`, "
                   f"first episode (reset with its instruction) at {out['first_episode_s']:.1f} s")


def test_the_browser_image_is_lean(browser_image: str) -> None:
    """No build tools, source or apt lists in the image; its size is reported."""
    size = int(pm.podman("image", "inspect", browser_image, "--format", "{{.Size}}").stdout)
    listing = pm.podman(
        "run", "--rm", "--network=none", "--entrypoint", "sh", browser_image, "-c",
        "ls /src /home/remote/.cache 2>&1; ls /var/lib/apt/lists; which gcc cc make || true",
    ).stdout
    assert "/src" in listing and "No such file" in listing  # the source stayed in the build stage
    assert ".deb" not in listing and "_Packages" not in listing  # no apt lists left behind
    assert "gcc" not in listing.replace("which gcc", "") and "/usr/bin/make" not in listing
    FIGURES.append(f"browser image size: {size / 1e6:.0f} MB")
    assert size < SIZE_LIMIT
