"""``universe-remote export DIR --minari NAME`` with a name Minari cannot take: one line
saying the form it needs, never a traceback from inside Minari (issue 29, item 5)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from envserver.recorder import Recorder
from envserver.remote import Remote
from recordings.minari_export import DatasetNameError, check_dataset_name
from rewarder.client import RewarderClient
from tests.recordings.test_recording import play_lockstep

#: Seconds the export command may take (Minari's import is the slow part).
EXPORT_TIMEOUT = 120


@pytest.fixture
async def recorded(tmp_path: Path) -> Path:
    """A recording of one finished lockstep episode of Catch."""
    remote = Remote("builtin.Catch-v0", mode="lockstep")
    recorder = Recorder(tmp_path / "rec")
    recorder.attach(remote)
    await remote.start("127.0.0.1", 0, 0)
    try:
        async with RewarderClient(f"127.0.0.1:{remote.rewarder.port}") as client:
            await play_lockstep(client, seed=5)
    finally:
        await remote.close()
        recorder.close()
    return tmp_path / "rec"


@pytest.mark.parametrize("name", ["catch-demo", "catch/demo", "catch demo-v0", "x-v"])
def test_names_without_a_version_are_refused_with_the_form_to_use(name: str) -> None:
    with pytest.raises(DatasetNameError, match=r"NAME-vN"):
        check_dataset_name(name)


@pytest.mark.parametrize("name", ["catch-demo-v0", "catch/human-v0", "a/b/c_d-v12"])
def test_minaris_names_pass(name: str) -> None:
    check_dataset_name(name)


def test_the_export_command_says_in_one_line_what_name_to_give(
    recorded: Path, tmp_path: Path
) -> None:
    pytest.importorskip("minari")
    done = subprocess.run(
        [sys.executable, "-m", "universe_remote", "export", str(recorded), "--minari", "catch-demo"],
        capture_output=True, text=True, timeout=EXPORT_TIMEOUT,
        env={"MINARI_DATASETS_PATH": str(tmp_path / "datasets"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("universe-remote: "), done.stderr
    assert "catch-demo-v0" in lines[0]
    assert not (tmp_path / "datasets").exists() or not any((tmp_path / "datasets").iterdir())
