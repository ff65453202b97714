"""The README says what works: its Python blocks run against real remotes and exit with
nothing on stderr, and the command line it shows is the one the parser has, with help on
every subcommand and option — so the two cannot drift apart.

The Python blocks run as written but for the addresses (a local remote on free ports
stands in for ``127.0.0.1:5900+15900``: no test binds a fixed port) and fewer remotes
(``SMALLER``: 2 instead of 8, so CI stays fast).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from remotes import start_local
from remotes.local import LocalRemotes
from universe_remote.cli import build_parser

README: Final = Path(__file__).parents[1] / "README.md"
#: The README's address of a remote on the default ports.
DEFAULT_ADDRESS: Final = "vnc://127.0.0.1:5900+15900"
#: Substitutions that keep the blocks' meaning and make them quick.
SMALLER: Final = {"n=8": "n=2", "num_envs=8": "num_envs=2"}
#: Seconds a block may run.
BLOCK_TIMEOUT: Final = 180


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


@pytest.fixture(scope="module")
def catch() -> Iterator[LocalRemotes]:
    with start_local("builtin.Catch-v0", 1) as local:
        yield local


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_each_python_block_runs_and_exits_quietly(index: int, catch: LocalRemotes) -> None:
    code = blocks("python")[index].replace(DEFAULT_ADDRESS, catch.address)
    for big, small in SMALLER.items():
        code = code.replace(big, small)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "", f"the block printed on stderr (no close() needed):\n{done.stderr}"


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
