"""The README says what works: its Python blocks and its ``universe-remote`` commands run
beside the remote ``make run`` serves on 5900/15900, as a user runs them (``make run`` in
one shell, the rest in another), and exit cleanly; and the command line it shows is the
one the parser has, with help on every subcommand and option — so the two cannot drift
apart.

``make run`` and everything beside it run in a network namespace of their own with only
loopback (tests/ray_cluster.py), so the README's fixed ports (5900, 15900, 8700, 8800, 8900)
are the namespace's and no other test or program on the machine is touched. The blocks
run as written but for fewer remotes (``SMALLER``: 2 instead of 8, so CI stays fast).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from tests.ray_cluster import NamespaceUnavailable, check_netns
from universe_remote.cli import build_parser

README: Final = Path(__file__).parents[1] / "README.md"
ROOT: Final = README.parent
#: Substitutions that keep the blocks' meaning and make them quick.
SMALLER: Final = {"n=8": "n=2", "num_envs=8": "num_envs=2", "-n 8": "-n 2"}
#: Seconds a block may run.
BLOCK_TIMEOUT: Final = 180
#: Seconds `make run` (the stamp already made) and a command's remote may take to serve.
SERVE_TIMEOUT: Final = 60.0
#: What a long-running command prints once it works (then it gets Ctrl-C).
READY: Final = {"serve": "Ctrl-C to stop", "replay": "Ctrl-C to stop", "play": "dashboard: http"}
#: README commands that need what a test machine cannot give: a Ray cluster at HEAD.
NEEDS_A_CLUSTER: Final = ("--ray",)
#: Seconds `serve --record` runs before the next commands read its recording: its first
#: Catch episode ends after ~4.6 s of real time (277 frames).
FIRST_EPISODE_TIMEOUT: Final = 60.0


def blocks(language: str) -> list[str]:
    """The README's fenced blocks of ``language`` ("" for plain ones), in order."""
    found: list[str] = []
    current: list[str] | None = None
    opened = ""
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            if current is None:
                current, opened = [], line[3:].strip()
            else:
                if opened == language:
                    found.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return found


class MakeRun:
    """``make run`` in a network namespace of its own; :meth:`argv` runs beside it."""

    def __init__(self) -> None:
        try:
            check_netns()
        except NamespaceUnavailable as exc:
            pytest.fail(str(exc))
        venv = sys.prefix  # the venv these tests run in is the one `make run` serves from
        self.process = subprocess.Popen(
            ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", "make", "-s",
             "-C", str(ROOT), "-o", f"{venv}/.run-stamp", "run", f"VENV={venv}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        self.banner = ""
        deadline = time.monotonic() + SERVE_TIMEOUT
        assert self.process.stdout is not None
        while "Ctrl-C to stop" not in self.banner:
            line = self.process.stdout.readline()
            if not line or time.monotonic() > deadline:
                self.close()
                pytest.fail(f"make run did not serve:\n{self.banner}")
            self.banner += line

    def argv(self, command: list[str]) -> list[str]:
        """``command`` run in make run's namespace."""
        return ["nsenter", f"--net=/proc/{self.process.pid}/ns/net", "--", *command]

    def close(self) -> None:
        os.killpg(self.process.pid, signal.SIGINT)  # make and its serve: Ctrl-C
        try:
            self.process.wait(SERVE_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@pytest.fixture(scope="module")
def make_run() -> Iterator[MakeRun]:
    served = MakeRun()
    try:
        yield served
    finally:
        served.close()


def test_make_run_serves_on_the_readme_ports(make_run: MakeRun) -> None:
    assert "agent address  vnc://127.0.0.1:5900+15900" in make_run.banner


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_each_python_block_runs_beside_make_run_and_exits_quietly(index: int, make_run: MakeRun) -> None:
    code = blocks("python")[index]
    for big, small in SMALLER.items():
        code = code.replace(big, small)
    done = subprocess.run(make_run.argv([sys.executable, "-c", code]), capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "", f"the block printed on stderr (no close() needed):\n{done.stderr}"


def readme_commands() -> list[str]:
    """Every ``universe-remote`` command of the README's plain blocks but the synopsis
    (one per line, comments dropped, ``SMALLER`` applied), in order."""
    found = []
    for block in blocks("") + blocks("sh"):
        if block.startswith("universe-remote list"):
            continue  # the synopsis: [OPTIONS], not a command
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if "universe-remote " not in command or command.startswith("#"):
                continue
            words = shlex.split(command)
            program = next((w for w in words if "=" not in w), "")
            if program == "universe-remote" and not any(n in words for n in NEEDS_A_CLUSTER):
                for big, small in SMALLER.items():
                    command = command.replace(big, small)
                found.append(command)
    return found


def _run_command(make_run: MakeRun, command: str, cwd: Path) -> tuple[int | None, str]:
    """Run one README command in make run's namespace: a one-shot one to its end, a
    long-running one until it says it works, then Ctrl-C. (exit status, output)."""
    words = shlex.split(command)
    env = {**os.environ, "MINARI_DATASETS_PATH": str(cwd / "minari")}
    while "=" in words[0]:
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    argv = [sys.executable, "-m", "universe_remote", *words[1:]]
    ready = READY.get(words[1]) if words[1] != "play" or "--dashboard" in words else None
    if ready is None:
        done = subprocess.run(make_run.argv(argv), capture_output=True, text=True, cwd=cwd, env=env,
                              timeout=BLOCK_TIMEOUT)
        return done.returncode, done.stdout + done.stderr
    proc = subprocess.Popen(make_run.argv(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=cwd, env=env)
    out, deadline = "", time.monotonic() + SERVE_TIMEOUT
    assert proc.stdout is not None
    while ready not in out and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        out += line
    if ready in out and "--record" in words:  # the commands after it read its first episode
        first = cwd / words[words.index("--record") + 1] / "episode-000001" / "end.json"
        while not first.exists() and time.monotonic() < deadline + FIRST_EPISODE_TIMEOUT:
            time.sleep(0.1)  # a poll with a deadline: the episode ends in real time
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=SERVE_TIMEOUT)
    status = proc.returncode if ready in out else None
    return (0 if status == 130 and words[1] == "play" else status), out + rest


def test_every_readme_command_runs_beside_make_run(make_run: MakeRun, tmp_path: Path) -> None:
    """Each README command, in order (serve --record before replay and export), in a
    shell beside `make run`'s remote on 5900/15900: none may fail on a taken port."""
    commands = readme_commands()
    assert any("--record" in c for c in commands) and any(c.startswith("universe-remote replay")
                                                          for c in commands)
    failed = []
    for command in commands:
        status, out = _run_command(make_run, command, tmp_path)
        if status != 0:
            failed.append(f"{command}\n  -> {status}: {out.strip()[-1500:]}")
    assert not failed, "README commands that failed beside make run:\n" + "\n".join(failed)


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_the_command_line_shown_is_the_parsers() -> None:
    shown = next(b for b in blocks("") if b.startswith("universe-remote list"))
    commands = _subcommands()
    for line in re.split(r"\n(?=universe-remote )", shown):
        words = line.split()
        command = words[1]
        if command.startswith("--"):
            assert command in build_parser()._option_string_actions, command
            continue
        assert command in commands, f"README shows 'universe-remote {command}': no such command"
        options = commands[command]._option_string_actions
        for option in re.findall(r"(?<![\w-])(-{1,2}[a-z][\w-]*)", line):
            assert option in options, f"README shows '{option}' for {command}; its options: {sorted(options)}"


def test_every_subcommand_and_option_has_help() -> None:
    missing = []
    for name, parser in _subcommands().items():
        if not parser.description:
            missing.append(f"{name}: no description")
        for action in parser._actions:
            if not action.help and action.dest != "help":
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, "no help text: " + ", ".join(missing)


def test_serve_prints_a_clean_banner_and_logs_only_its_own_lines() -> None:
    serve = subprocess.Popen(
        [sys.executable, "-m", "universe_remote", "serve", "builtin.Catch-v0",
         "--rewarder-port", "0", "--vnc-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert serve.stdout is not None
        banner = []
        for line in serve.stdout:
            banner.append(line)
            if "Ctrl-C to stop" in line:
                break
    finally:
        serve.terminate()
        _, err = serve.communicate(timeout=BLOCK_TIMEOUT)
    assert banner[0].startswith("universe-remote: serving builtin.Catch-v0") and len(banner) <= 8
    # stderr: nothing from the libraries (websockets' "server listening" and the like).
    assert [line for line in err.splitlines() if "universe-remote:" not in line] == [], err
    assert "shutting down" in err


def test_make_run_installs_only_what_serving_needs(tmp_path: Path) -> None:
    root = README.parent
    run = subprocess.run(["make", "-n", "-C", str(root), "run", f"VENV={tmp_path}/venv"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    installs = [line for line in run.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert installs and all("-e ." in line and "[" not in line for line in installs), run
    test = subprocess.run(["make", "-n", "-C", str(root), "test", f"VENV={tmp_path}/venv"],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    extras = re.search(r"-e '\.\[([\w,]+)\]'", test)
    assert extras and {"test", "atari", "browser", "dmenv", "ray"} <= set(extras[1].split(",")), test


def test_the_api_reference_builds(tmp_path: Path) -> None:
    """``make docs``: pdoc over every package, from the docstrings."""
    pdoc = Path(sys.executable).parent / "pdoc"
    done = subprocess.run(
        [str(pdoc), "--docformat", "restructuredtext", "-o", str(tmp_path), "rewarder", "vncdriver",
         "runtimes", "envserver", "remotes"],
        capture_output=True, text=True, timeout=BLOCK_TIMEOUT, cwd=README.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    page = (tmp_path / "remotes.html").read_text()
    assert "RemoteEnv" in page and "RemoteVectorEnv" in page
    assert (tmp_path / "envserver" / "dmrpc.html").exists()
