"""``universe-remote eval`` (universe_remote/evaluate.py) on real remotes: the scripted agent
(benchmarks/eval_agent.py) as a Python callable and as an MCP host command over 5 MiniWoB
tasks x 3 seeds on 2 remotes in Chromium; the results and trajectories loaded back
(recordings/trajectories.py) and exported to Minari; agents that never finish stopped at
their step and time budgets; an X11 program's episode judged by what the program wrote.
"""

from __future__ import annotations

import json
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest

from benchmarks.eval_agent import scripted
from recordings.trajectories import RESULT_FIELDS, TrajectoryError, load_results, open_trajectory
from universe_remote.evaluate import Episode, EpisodeOver, evaluate, parse_seeds

pytestmark = pytest.mark.timeout(300)

TASKS: Final = ("miniwob.ClickTest-v0", "miniwob.ClickButton-v0", "miniwob.ClickDialog-v0",
                "miniwob.EnterText-v0", "miniwob.FocusText-v0")
SEEDS: Final = (0, 1, 2)
#: MiniWoB's task area, as the screenshots show it.
TASK_SHAPE: Final = (210, 160, 3)
TK_ENTRIES: Final = Path(__file__).parent / "envserver" / "mcp_tk_entries.py"


@pytest.fixture(scope="module")
def urls() -> Iterator[list[str]]:
    """Two MiniWoB remotes with MCP ports in one process (serve --games 2), shared by the
    tests: start_local reads each game's MCP port from the banner."""
    from remotes import start_local

    with start_local("miniwob.ClickTest-v0", 2, extra_args=["--mcp-port", "0"], start_timeout=90,
                     games_per_process=2) as group:
        assert len(set(group.mcp_ports)) == 2
        assert all(isinstance(port, int) for port in group.mcp_ports), group.mcp_ports
        yield [f"http://127.0.0.1:{port}/mcp" for port in group.mcp_ports]


def _check_run(out: Path, rows: list[dict[str, Any]]) -> None:
    """Every episode won, and what was written loads back and agrees with the rows."""
    assert [(r["task"], r["seed"]) for r in rows] == [(t, s) for t in TASKS for s in SEEDS]
    assert [r for r in rows if not r["success"] or r["status"] != "done"] == []
    assert (out / "results.csv").read_text().splitlines()[0] == ",".join(RESULT_FIELDS)
    results = load_results(out)
    assert results.episodes == rows
    assert results.tasks["miniwob.EnterText-v0"]["success_rate"] == 1.0
    for row, trajectory in zip(rows, results.trajectories(), strict=True):
        assert (trajectory.task, trajectory.seed) == (row["task"], row["seed"])
        assert len(trajectory.steps) == row["steps"] > 0
        assert trajectory.reset is not None and trajectory.reset.tool == "reset"
        assert trajectory.reset.arguments == {"seed": row["seed"], "env_id": row["task"]}
        (first,) = trajectory.reset.images()
        assert first.shape == TASK_SHAPE and first.dtype == np.uint8
        last = trajectory.steps[-1]
        assert last.done and last.tool == "computer" and last.info is not None and last.info["done"]
        assert row["reward"] == pytest.approx(last.info.get("ended_episode", last.info)
                                              .get("return", last.info.get("episode_return")))
        shots = [image for step in trajectory.steps for image in step.images()]
        assert shots and all(image.shape == TASK_SHAPE for image in shots)
        assert [s.step for s in trajectory.steps] == list(range(1, row["steps"] + 1))
        assert all(s.latency > 0 and s.t >= 0 for s in trajectory.steps)


def test_a_callable_agent_over_tasks_and_seeds(urls: list[str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    rows = evaluate(scripted, TASKS, SEEDS, tmp_path, urls=urls)
    _check_run(tmp_path, rows)
    assert {r["remote"] for r in rows} == {0, 1}  # both remotes played
    enter = load_results(tmp_path).trajectory("miniwob.EnterText-v0", 1)
    typed = [s.arguments for s in enter.steps if s.arguments.get("action") == "type"]
    assert len(typed) == 1 and typed[0]["text"] in enter.reset.info["instruction"]  # type: ignore[union-attr]

    pytest.importorskip("minari")
    import minari

    from recordings.minari_export import export_trajectories

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    dataset = export_trajectories(tmp_path, "evaltest/enter-text-v0", ["miniwob.EnterText-v0"])
    try:
        loaded = list(minari.load_dataset("evaltest/enter-text-v0").iterate_episodes())
        assert len(loaded) == 3
        for episode, row in zip(loaded, rows[9:12], strict=True):
            assert len(episode.actions) == row["steps"]
            assert episode.observations.shape == (row["steps"] + 1, *TASK_SHAPE)
            assert json.loads(episode.actions[0]) == {"tool": "page", "arguments": {}}
            assert episode.terminations[-1] and episode.rewards.sum() == pytest.approx(row["reward"])
    finally:
        minari.delete_dataset(dataset.spec.dataset_id)


def test_an_mcp_host_command(urls: list[str], tmp_path: Path) -> None:
    """The host starts its MCP server from ``{mcp}``: every call it makes is in the trajectory."""
    command = [sys.executable, "-m", "benchmarks.eval_agent", "{task}", "{seed}", "{mcp}"]
    rows = evaluate(command, TASKS, SEEDS, tmp_path, urls=urls)
    _check_run(tmp_path, rows)
    trajectory = load_results(tmp_path).trajectory("miniwob.ClickTest-v0", 0)
    assert [s.tool for s in trajectory.steps][:2] == ["state", "page"]  # the host asked for its instruction


def test_lockstep_remotes_the_harness_starts(tmp_path: Path) -> None:
    """Without urls the harness starts its remotes (here one, in lockstep) and stops them."""
    command = [sys.executable, "-m", "benchmarks.eval_agent", "{task}", "{seed}", "{mcp}"]
    rows = evaluate(command, TASKS[::3], [5], tmp_path, mode="lockstep")
    assert [(r["task"], r["status"], r["success"]) for r in rows] == [(t, "done", True) for t in TASKS[::3]]
    run = load_results(tmp_path)
    assert run.run["mode"] == "lockstep"
    state = run.trajectory(TASKS[3], 5).steps[0]
    assert state.tool == "state" and state.info is not None and state.info["mode"] == "lockstep"


def test_budgets_stop_agents_that_never_finish(urls: list[str], tmp_path: Path) -> None:
    refused: list[str] = []

    def forever(episode: Episode) -> None:
        try:
            while True:
                episode.call("computer", {"action": "screenshot"})
        except EpisodeOver as exc:
            refused.append(str(exc))

    release = threading.Event()

    def stuck(episode: Episode) -> None:
        episode.call("computer", {"action": "screenshot"})
        release.wait(60)  # thinks forever, calls nothing more

    task = ("miniwob.ClickTest-v0",)
    (steps,) = evaluate(forever, task, (0,), tmp_path / "steps", urls=urls[:1], max_steps=4)
    assert (steps["status"], steps["steps"], steps["success"]) == ("step_budget", 4, False)
    assert refused == ["the step budget of 4 tool calls is spent"]
    assert len(open_trajectory(tmp_path / "steps/trajectories/miniwob.ClickTest-v0/0").steps) == 4

    host = [sys.executable, "-m", "benchmarks.eval_agent", "--forever", "{task}", "{seed}", "{mcp}"]
    (hosted,) = evaluate(host, task, (0,), tmp_path / "host", urls=urls[:1], max_steps=3)
    assert (hosted["status"], hosted["steps"]) == ("step_budget", 3)

    started = time.monotonic()
    try:
        (timed,) = evaluate(stuck, task, (0,), tmp_path / "time", urls=urls[:1], max_seconds=1.0,
                            stop_grace=0.2)
    finally:
        release.set()
    assert (timed["status"], timed["steps"], timed["success"]) == ("time_budget", 1, False)
    assert 1.0 <= timed["seconds"] and time.monotonic() - started < 30  # not the agent's 60 s


def test_an_async_agent(urls: list[str], tmp_path: Path) -> None:
    async def looks(episode: Episode) -> None:
        await episode.acall("computer", {"action": "screenshot"})
        await episode.acall("state", {})

    async def blocks(episode: Episode) -> None:
        episode.call("state")  # the sync call on the harness's own loop

    task = ("miniwob.ClickTest-v0",)
    (row,) = evaluate(looks, task, (0,), tmp_path / "a", urls=urls[:1])
    assert (row["status"], row["steps"], row["error"]) == ("agent_stopped", 2, "")
    (row,) = evaluate(blocks, task, (0,), tmp_path / "b", urls=urls[:1])
    assert row["status"] == "error" and "awaits episode.acall" in row["error"]


def test_an_x11_program_episode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """x11.Command-v0 running Tk entries: the scripted agent clicks the first entry and types
    a line; the judge reads what the program wrote on Return."""
    written = tmp_path / "entries.json"
    command = shlex.join([sys.executable, str(TK_ENTRIES), str(written)])
    monkeypatch.setenv("UNIVERSE_REMOTE_X11_COMMAND", command)

    def judge(episode: Episode, final: dict[str, Any]) -> bool:
        deadline = time.monotonic() + 20
        while not written.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # the program writes on Return: nothing to wait on
        return bool(written.exists() and json.loads(written.read_text())["a"] == f"episode {episode.seed}")

    (row,) = evaluate(scripted, ["x11.Command-v0"], [7], tmp_path / "run", judge=judge)
    assert (row["status"], row["success"], row["steps"]) == ("agent_stopped", True, 3)
    trajectory = load_results(tmp_path / "run").trajectory("x11.Command-v0", 7)
    assert [s.arguments.get("action") for s in trajectory.steps] == ["left_click", "type", "key"]
    assert trajectory.steps[-1].images()[0].shape == (768, 1024, 3)


def test_bad_input_says_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from universe_remote.cli import main

    out = ["--out", str(tmp_path)]
    assert main(["eval", "miniwob.ClickTset-v0", "--agent", "benchmarks.eval_agent:scripted", *out]) == 2
    assert "miniwob.ClickTest-v0" in capsys.readouterr().err  # the closest ids
    assert main(["eval", "miniwob.ClickTest-v0", "--agent", "benchmarks.eval_agent", *out]) == 2
    assert "MODULE:FUNCTION" in capsys.readouterr().err
    assert main(["eval", "miniwob.ClickTest-v0", "--seeds", "x", "--agent-command", "true", *out]) == 2
    assert "seeds are" in capsys.readouterr().err
    assert parse_seeds("0-2,9") == (0, 1, 2, 9)
    with pytest.raises(ValueError, match="seeds are N, N-M"):
        parse_seeds("a-b")
    with pytest.raises(ValueError, match="budget"):
        evaluate(scripted, ["miniwob.ClickTest-v0"], [0], tmp_path, max_steps=0, urls=[])
    with pytest.raises(TrajectoryError, match="--out"):
        load_results(tmp_path)
