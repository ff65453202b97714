"""The shipped Dockerfile, built and run for real with podman, offline, on loopback only.

The base image comes from Debian packages (mmdebstrap), the project and its
dependencies from a wheelhouse made here: the build needs no registry and no network.
Containers run with ``--network=host`` inside a network namespace that has only loopback
(:func:`~tests.docker.podman.in_netns`), so ``--host 0.0.0.0`` — what the image's CMD
says — reaches nothing but the checking script in that namespace.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Final

import pytest

from tests.docker import podman as pm
from tests.docker.conftest import FIGURES

#: Seconds a test's own body may take (the longest waits 300 s for its namespace script).
#: The image comes from the `image` fixture: the first test that asks for it also gets
#: the build's budget (tests/docker/conftest.py, SLOW_FIXTURES).
BODY_TIMEOUT: Final = 420
pytestmark = [
    pytest.mark.skipif(
        bool(pm.MISSING),
        reason=f"{', '.join(pm.MISSING)} not installed (scripts/install-system-packages)",
    ),
    pytest.mark.timeout(BODY_TIMEOUT),
]


#: Runs inside the namespace: starts containers, checks them from outside, prints JSON.
CHECKS = textwrap.dedent(
    """
    import asyncio, json, os, socket, subprocess, sys, time
    sys.path.insert(0, os.environ["PYTHONPATH"])
    import websockets
    from tests.docker import podman as pm
    from rewarder.client import RewarderClient
    from rewarder.errors import ConnectionClosed
    from remotes import RemoteEnv

    IMAGE, SECRET = sys.argv[1], sys.argv[2]
    out = {}
    for name in ("env-pw", "file-pw"):  # left by an interrupted run
        pm.podman("rm", "-f", name, check=False)

    def wait_port(port, deadline, greeting=False):
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    return s.recv(12) if greeting else b"open"
            except OSError:
                time.sleep(0.05)  # a poll with a deadline, not synchronisation
        raise TimeoutError(port)

    def run(name, vnc, rewarder, *extra):
        started = time.monotonic()
        pm.podman("run", "-d", "--name", name, "--network=host", "--pull=never", *extra, IMAGE,
                  "builtin.Catch-v0", "--host", "0.0.0.0", "--insecure", "--vnc-port", str(vnc),
                  "--rewarder-port", str(rewarder), "--dm-env-rpc-port", str(rewarder + 100))
        deadline = started + 60
        greeting = wait_port(vnc, deadline, greeting=True)
        wait_port(rewarder, deadline)
        return greeting, time.monotonic() - started

    async def describe(port, password):
        try:
            async with RewarderClient(f"127.0.0.1:{port}", password=password, observer=True,
                                      calibration_pings=0, start_timeout=10) as c:
                return (await c.wait_for_state("running", timeout=10)).env_id
        except ConnectionClosed as exc:
            return "refused: " + str(exc)

    greeting, out["startup_s"] = run("env-pw", 5900, 15900, "-e", "UNIVERSE_REMOTE_PASSWORD=pw")
    out["greeting"] = greeting.decode()
    out["with_password"] = asyncio.run(describe(15900, "pw"))
    out["without_password"] = asyncio.run(describe(15900, None))
    out["wrong_password"] = asyncio.run(describe(15900, "nope"))
    out["uid"] = pm.podman("exec", "env-pw", "id", "-u").stdout.strip()
    import grpc
    from dm_env_rpc.v1 import connection as dm_connection, dm_env_rpc_pb2
    channel = grpc.insecure_channel("127.0.0.1:16000")
    grpc.channel_ready_future(channel).result(30)
    with dm_connection.Connection(channel, metadata=[("authorization", "Basic cHc6")]) as dm:
        out["dm_world"] = dm.send(dm_env_rpc_pb2.CreateWorldRequest()).world_name
    out["healthcheck"] = pm.podman("healthcheck", "run", "env-pw", check=False).returncode
    env = RemoteEnv("vnc://127.0.0.1:5900+15900", password="pw")
    obs, _ = env.reset(seed=1)
    steps = [env.step([("KeyEvent", "Left", True)]) for _ in range(30)]
    out["env"] = [list(obs.shape), len(steps)]
    env.close()

    async def close_message():
        headers = {"openai-observer": "true", "authorization": "Basic cHc6"}  # "pw:"
        async with websockets.connect("ws://127.0.0.1:15900", additional_headers=headers) as ws:
            await ws.recv()  # describe
            stop = asyncio.create_task(asyncio.to_thread(pm.podman, "stop", "-t", "10", "env-pw"))
            try:
                while True:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 20))
                    if message["method"] == "v0.connection.close":
                        return message["body"]["message"]
            finally:
                await stop
    out["sigterm_close"] = asyncio.run(close_message())
    out["exit_code"] = pm.podman("inspect", "env-pw", "--format", "{{.State.ExitCode}}").stdout.strip()

    run("file-pw", 5901, 15901, "-v", f"{SECRET}:/run/secrets/remote_password:ro",
        "-e", "UNIVERSE_REMOTE_PASSWORD_FILE=/run/secrets/remote_password")
    out["file_password"] = asyncio.run(describe(15901, "from-file"))
    out["file_wrong"] = asyncio.run(describe(15901, "pw"))
    for name in ("env-pw", "file-pw"):
        pm.podman("rm", "-f", name, check=False)
    print(json.dumps(out))
    """
)


def test_the_image_builds_runs_and_guards_its_ports(image: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-file\n")
    secret.chmod(0o644)
    tmp_path.chmod(0o755)
    done = pm.in_netns(CHECKS.replace("sys.argv[1], sys.argv[2]", f"{image!r}, {str(secret)!r}"))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["greeting"] == "RFB 003.008\n"
    assert out["with_password"] == "builtin.Catch-v0"
    assert out["without_password"].startswith("refused") and "password" in out["without_password"]
    assert out["wrong_password"].startswith("refused") and "wrong password" in out["wrong_password"]
    assert out["uid"] == "10001"  # not root
    assert out["dm_world"].startswith("builtin.Catch-v0/")  # the dm_env_rpc port answers
    assert out["healthcheck"] == 0
    assert out["env"] == [[210, 160, 3], 30]
    assert "shutting down" in out["sigterm_close"]
    assert out["exit_code"] == "0"
    assert out["file_password"] == "builtin.Catch-v0"
    assert out["file_wrong"].startswith("refused")
    FIGURES.append(f"default image: both ports answering {out['startup_s']:.1f} s after `podman run`")


def test_the_image_is_lean(image: str) -> None:
    """No build tools or caches in the image; its size is reported."""
    size = int(pm.podman("image", "inspect", image, "--format", "{{.Size}}").stdout)
    listing = pm.podman(
        "run", "--rm", "--network=none", "--entrypoint", "sh", image, "-c",
        "ls /root/.cache /home/remote/.cache /src 2>&1; which gcc cc make || true",
    ).stdout
    assert "/src" in listing and "No such file" in listing  # the source stayed in the build stage
    assert "gcc" not in listing.replace("which gcc", "") and "/usr/bin/make" not in listing
    FIGURES.append(f"default image size: {size / 1e6:.0f} MB")
    assert size < 600e6


#: Runs inside the namespace, after SERVICE_PRELUDE: start_docker through Docker's CLI.
START_DOCKER = textwrap.dedent(
    """
    import json, subprocess, sys, time
    from remotes import RemoteVectorEnv, start_docker
    IMAGE = sys.argv[1]
    out = {}
    try:
        started = time.monotonic()
        remotes = start_docker("builtin.Catch-v0", 4, image=IMAGE)
        out["start_s"] = time.monotonic() - started
        out["running"] = len(subprocess.run(
            ["docker", "ps", "-q", "--filter", "label=com.universe-remote.managed=true"],
            capture_output=True, text=True, check=True).stdout.split())
        envs = RemoteVectorEnv(remotes.address, password=remotes.password)
        envs.reset(seed=0)
        for _ in range(30):  # warm up
            envs.step([[]] * 4)
        began, steps = time.monotonic(), 0
        while time.monotonic() - began < 5.0:
            envs.step([[("KeyEvent", "Left", True)]] * 4)
            steps += 1
        out["steps_per_s_per_remote"] = steps / (time.monotonic() - began)
        envs.close()
        remotes.close()
        out["left"] = len(subprocess.run(
            ["docker", "ps", "-aq", "--filter", "label=com.universe-remote.managed=true"],
            capture_output=True, text=True, check=True).stdout.split())
        grouped = start_docker("builtin.Catch-v0", 4, image=IMAGE, games_per_container=2)
        out["grouped_containers"] = len(grouped.containers)
        envs = RemoteVectorEnv(grouped.address, password=grouped.password)
        envs.reset(seed=0)
        began, steps = time.monotonic(), 0
        while time.monotonic() - began < 3.0:
            _, _, _, truncated, _ = envs.step([[("KeyEvent", "Left", True)]] * 4)
            steps += 1
        out["grouped_steps_per_s"] = steps / (time.monotonic() - began)
        envs.close()
        grouped.close()
    finally:
        _service.terminate()
    print(json.dumps(out))
    """
)


def test_start_docker_runs_four_remotes_a_vector_env_steps(image: str) -> None:
    out = pm.service_scenario(START_DOCKER, image, timeout=300)
    assert out["running"] == 4
    assert out["steps_per_s_per_remote"] > 30  # real time at 60 fps: the figure goes in the note
    assert out["left"] == 0  # close() removed every container
    assert out["grouped_containers"] == 2  # games_per_container=2: serve --games 2 in each
    assert out["grouped_steps_per_s"] > 30
    FIGURES.append(f"start_docker(4): {out['start_s']:.1f} s; RemoteVectorEnv over 4 containers: "
                   f"{out['steps_per_s_per_remote']:.1f} steps/s per remote at 60 fps")
