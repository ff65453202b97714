"""What ``serve`` and ``replay`` print (issue 29, items 1, 2 and 7): the ports a remote
took when the defaults were taken, one line naming a taken port, recording, replay's
episode and length, the Duel's seats, and only addresses one can connect to.

Fixed ports (5900, 15900, a wildcard bind) are used only inside a network namespace of
the test's own (tests/ray_cluster.py), never on the machine's interfaces.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import pytest

from envserver.banner import command, in_container
from remotes import RemoteEnv, start_local
from tests.ray_cluster import NamespaceUnavailable, check_netns, in_netns

ROOT: Final = Path(__file__).resolve().parents[2]
#: Seconds a remote may take to print its banner, and a namespace script to finish.
BANNER_TIMEOUT: Final = 60.0
SCRIPT_TIMEOUT: Final = 180.0
FREE_PORTS: Final = ("--vnc-port", "0", "--rewarder-port", "0")


def banner_of(argv: Sequence[str], env: dict[str, str] | None = None) -> tuple[list[str], str]:
    """The banner lines of ``universe-remote ARGV`` (stopped once it is printed; in
    environment ``env``, else ours), and its stderr."""
    serve = subprocess.Popen([sys.executable, "-m", "universe_remote", *argv], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        assert serve.stdout is not None
        for line in serve.stdout:
            lines.append(line.rstrip("\n"))
            if "Ctrl-C to stop" in line:
                break
    finally:
        serve.terminate()
        _, err = serve.communicate(timeout=BANNER_TIMEOUT)
    return lines, err


def in_namespace(script: str) -> dict[str, object]:
    """Run ``script`` (Python after :data:`_PRELUDE`; prints one JSON object) in a network
    namespace with only lo."""
    try:
        check_netns()
    except NamespaceUnavailable as exc:
        pytest.fail(str(exc))
    done = subprocess.run(in_netns([sys.executable, "-c", _PRELUDE + textwrap.dedent(script)]), cwd=ROOT,
                          capture_output=True, text=True, timeout=SCRIPT_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


#: For the namespace scripts: banner_of, there.
_PRELUDE: Final = """
import json, socket, subprocess, sys
def banner_of(*argv):
    serve = subprocess.Popen([sys.executable, "-m", "universe_remote", *argv],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in serve.stdout:
        lines.append(line.rstrip("\\n"))
        if "Ctrl-C to stop" in line:
            break
    serve.terminate()
    _, err = serve.communicate(timeout=60)
    return lines, err
"""


def test_serve_without_ports_takes_the_next_free_pair_and_a_given_port_the_one_it_pairs_with() -> None:
    found = in_namespace("""
    held = [socket.create_server(("127.0.0.1", port)) for port in (5900, 15900)]  # make run's
    out = {}
    out["floating"], _ = banner_of("serve", "builtin.Catch-v0")
    out["vnc_only"], _ = banner_of("serve", "builtin.Catch-v0", "--vnc-port", "5903")
    out["taken"] = subprocess.run([sys.executable, "-m", "universe_remote", "serve",
                                   "builtin.Catch-v0", "--vnc-port", "5900"],
                                  capture_output=True, text=True, timeout=60).stderr
    print(json.dumps(out))
    """)
    floating = "\n".join(found["floating"])  # type: ignore[arg-type]
    assert "agent address  vnc://127.0.0.1:5901+15901" in floating
    assert "5900/15900 are taken" in floating and "next free pair, 5901/15901" in floating
    assert "agent address  vnc://127.0.0.1:5903+15903" in "\n".join(found["vnc_only"])  # type: ignore[arg-type]
    taken = str(found["taken"]).strip().splitlines()
    assert len(taken) == 1, taken
    assert "ports VNC 5900, rewarder 15900 taken" in taken[0] and "--vnc-port 5901" in taken[0]


def test_a_wildcard_bind_prints_addresses_one_can_connect_to() -> None:
    found = in_namespace("""
    lines, err = banner_of("serve", "builtin.Catch-v0", "--host", "0.0.0.0", "--password", "pw",
                           "--insecure", "--http-port", "--vnc-port", "5900")
    print(json.dumps({"lines": lines, "err": err}))
    """)
    lines: list[str] = found["lines"]  # type: ignore[assignment]
    text = "\n".join(lines)
    assert "0.0.0.0:" not in text and "://0.0.0.0" not in text, text
    assert "agent address  vnc://127.0.0.1:5900+15900?password=<password>" in text
    assert "viewer    http://127.0.0.1:8900/viewer/" in text
    if in_container():
        assert "in a container: from outside, connect to the ports the host publishes" in text
        assert "-p 127.0.0.1:5900:5900 -p 127.0.0.1:15900:15900" in text


def test_serve_record_says_that_it_records_and_where(tmp_path: Path) -> None:
    lines, _ = banner_of(["serve", "builtin.Catch-v0", "--record", str(tmp_path / "demos"), *FREE_PORTS])
    (line,) = [x for x in lines if "recording" in x]
    assert f"recording every episode to {(tmp_path / 'demos').resolve()}/" in line
    assert f"universe-remote replay {tmp_path / 'demos'}" in line


def test_replay_says_which_episode_it_plays_and_how_long_it_is(tmp_path: Path) -> None:
    demos = tmp_path / "demos"
    with start_local("builtin.Catch-v0", extra_args=["--record", str(demos)]) as local:
        env = RemoteEnv(local.address, password=local.password, mode="lockstep", frameskip=4)
        try:
            for seed in (1, 2):
                env.reset(seed=seed)
                while not env.step([])[2]:
                    pass
        finally:
            env.close()
    first, _ = banner_of(["replay", str(demos), "--episode", "2", *FREE_PORTS])
    match = re.match(r"universe-remote: replaying episode 2 of \S+demos \(builtin.Catch-v0, "
                     r"160x210 at 60 fps\): (\d+) steps, [\d.]+ s, return [-+]\d+, ended by the game",
                     first[0])
    assert match is not None, first[0]
    every, _ = banner_of(["replay", str(demos), *FREE_PORTS])
    assert re.match(r"universe-remote: replaying \d+ episodes of \S+ in turn .*: episodes 1 \(\d+ "
                    r"steps\), 2 \(\d+ steps\)", every[0]), every[0]


def test_the_duel_banner_names_the_seats_and_how_player_1_joins() -> None:
    lines, _ = banner_of(["serve", "builtin.Duel-v0", "--password", "left-pw",
                          "--player-password", "1=right-pw", *FREE_PORTS])
    text = "\n".join(lines)
    assert "players   2 seats" in text and "RemoteParallelEnv(address)" in text
    assert "player 0: VNC viewers with --password, agents without openai-player" in text
    assert "player 1: VNC viewers with the password of --player-password 1=..., agents with " \
           "openai-player: 1" in text


def test_a_small_screen_s_banner_names_the_zooming_window_first() -> None:
    """A 160x210 game at 1x in TigerVNC is a stamp: the banner's watch line names
    `universe-remote watch` (which zooms), then vncviewer."""
    lines, _ = banner_of(["serve", "builtin.Catch-v0", *FREE_PORTS])
    vnc = next(line for line in lines if line.lstrip().startswith("VNC"))
    port = re.search(r"127\.0\.0\.1:(\d+)", vnc)[1]  # type: ignore[index]
    program = command(ROOT)  # "universe-remote" where a shell finds it (the test below)
    assert f"watch:  {program} watch 127.0.0.1::{port}   (zoomed; vncviewer 127.0.0.1::{port}" in vnc


def test_mcp_port_alone_takes_the_next_free_port_and_a_taken_one_gets_its_own_advice() -> None:
    """``--mcp-port`` without a number floats from 8800 as ``--http-port`` does from 8900;
    a given MCP port that is taken is named, with MCP's advice (not --vnc-port's)."""
    found = in_namespace("""
    held = socket.create_server(("127.0.0.1", 8800))  # another remote's MCP port
    out = {}
    out["floating"], out["err"] = banner_of("serve", "builtin.Catch-v0", "--mcp-port", "--vnc-port", "0")
    out["taken"] = subprocess.run([sys.executable, "-m", "universe_remote", "serve",
                                   "builtin.Catch-v0", "--mcp-port", "8800", "--vnc-port", "0"],
                                  capture_output=True, text=True, timeout=60).stderr
    print(json.dumps(out))
    """)
    floating = "\n".join(found["floating"])  # type: ignore[arg-type]
    assert "mcp       http://127.0.0.1:8801/mcp" in floating, (floating, found["err"])
    taken = str(found["taken"])
    assert "port MCP 8800 taken" in taken and "pass --mcp-port without a number" in taken, taken
    assert "pass --vnc-port" not in taken


def test_a_password_is_named_where_it_is_needed_and_commands_are_ones_a_shell_finds() -> None:
    """With --password the viewer and MCP lines say how to give it; the watch command is
    one this shell can run although universe-remote is not on its PATH (``make run``'s
    venv, not activated)."""
    path = "/usr/bin:/bin"
    env = {**os.environ, "PATH": path, "UNIVERSE_REMOTE_PASSWORD": ""}
    lines, _ = banner_of(["serve", "builtin.Catch-v0", "--password", "pw", "--http-port", "0",
                          "--mcp-port", "0", *FREE_PORTS], env)
    text = "\n".join(lines)
    (viewer,) = [x for x in lines if x.startswith("  viewer")]
    assert "the browser asks for the --password" in viewer, text
    (mcp,) = [x for x in lines if x.startswith("  mcp")]
    assert "Authorization: Bearer <the --password>" in mcp, text
    watch = re.search(r"watch:  (.+?) watch 127\.0\.0\.1::\d+ --password <password>   ", text)
    assert watch is not None, text
    program = watch.group(1)
    if shutil.which("universe-remote", path=path) is None:
        assert program != "universe-remote", text
    runnable = shutil.which(program.split()[0], path=path) or str(ROOT / program.split()[0])
    assert os.access(runnable, os.X_OK), (program, text)
