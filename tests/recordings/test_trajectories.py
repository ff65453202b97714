"""recordings/trajectories.py without a remote: what eval writes loads back (images as
files beside the lines, the harness's reset apart from the agent's steps, the per-task
summary), and a trajectory cut short or a folder eval did not write says what it is."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from recordings.trajectories import (
    TrajectoryError,
    TrajectoryWriter,
    episode_dir,
    load_results,
    open_trajectory,
    write_results,
)


def _png(shape: tuple[int, int, int], value: int) -> str:
    out = io.BytesIO()
    Image.fromarray(np.full(shape, value, np.uint8)).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def _answer(value: int, **info: object) -> dict[str, object]:
    return {"content": [{"type": "image", "mimeType": "image/png", "data": _png((6, 4, 3), value)},
                        {"type": "text", "text": json.dumps(info)}], "isError": False}


def test_a_run_loads_back(tmp_path: Path) -> None:
    writer = TrajectoryWriter(episode_dir(tmp_path, "miniwob.ClickTest-v0", 3))
    writer.record("harness", "reset", {"seed": 3}, _answer(10, instruction="Click"), 0.0, False, 0.0, 0.1)
    writer.record("agent", "page", {}, {"content": [{"type": "text", "text": "{}"}]}, 0.0, False, 0.2, 0.05)
    writer.record("agent", "computer", {"action": "left_click", "coordinate": [1, 2]},
                  _answer(200, reward=0.9, done=True), 0.9, True, 0.3, 0.12)
    row = {"task": "miniwob.ClickTest-v0", "seed": 3, "status": "done", "success": True, "reward": 0.9,
           "steps": 2, "seconds": 0.4, "latency_p50_ms": 85.0, "latency_max_ms": 120.0, "remote": 0,
           "error": ""}
    writer.finish(row)
    write_results(tmp_path, {"agent": "test"}, [row])

    run = load_results(tmp_path)
    assert run.episodes == [row] and run.run == {"agent": "test"}
    assert run.tasks["miniwob.ClickTest-v0"] == {"episodes": 1, "successes": 1, "success_rate": 1.0,
                                                  "mean_reward": 0.9, "latency_p50_ms": 85.0}
    trajectory = run.trajectory("miniwob.ClickTest-v0", 3)
    assert trajectory.reset is not None and trajectory.reset.info == {"instruction": "Click"}
    assert [s.tool for s in trajectory.steps] == ["page", "computer"]
    click = trajectory.steps[1]
    assert (click.step, click.by, click.reward, click.done) == (2, "agent", 0.9, True)
    assert click.arguments == {"action": "left_click", "coordinate": [1, 2]}
    (image,) = click.images()
    assert image.shape == (6, 4, 3) and (image == 200).all()
    assert [p.name for p in click.image_files] == ["000002-0.png"]
    assert "data" not in click.result["content"][0]  # the line holds the file's name, not the bytes
    assert trajectory.steps[0].images() == []


def test_what_is_not_a_finished_run_says_so(tmp_path: Path) -> None:
    writer = TrajectoryWriter(tmp_path / "cut")
    writer.record("agent", "state", {}, None, 0.0, False, 0.0, 0.0)
    with pytest.raises(TrajectoryError, match="no episode.json"):
        open_trajectory(tmp_path / "cut")
    with pytest.raises(TrajectoryError, match="results.json"):
        load_results(tmp_path)
