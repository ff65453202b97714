"""What ``universe-remote eval`` keeps: a results table and each episode's trajectory.

The layout (docs/computer-use.md, "Evaluating an agent"), under the run's folder::

    results.csv                 one row per episode (:data:`RESULT_FIELDS`)
    results.json                {"run": the run's settings, "episodes": the rows, "tasks": per task}
    trajectories/<task>/<seed>/
        steps.jsonl             one line per tool call (:data:`STEP_FIELDS`), in order;
                                line 0 is the harness's reset ("by": "harness")
        NNNNNN-K.png            the K-th image of step NNNNNN's answer, as the remote sent it
        episode.json            the episode's row, written last: the trajectory is complete

A step's ``result`` is the MCP answer as the remote gave it, with every image's ``data``
replaced by ``"file"``: the PNG (or JPEG) beside it. Nothing here knows a remote: a user
loads a run with :func:`load_results` and a trajectory with :func:`open_trajectory`
without one; :func:`recordings.minari_export.export_trajectories` writes them as a
Minari dataset.
"""

from __future__ import annotations

import base64
import csv
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import orjson

#: The results table's columns, in order.
RESULT_FIELDS: Final = (
    "task", "seed", "status", "success", "reward", "steps", "seconds",
    "latency_p50_ms", "latency_max_ms", "remote", "error",
)
#: A step line's fields: its number, who called (agent/harness), the tool and arguments,
#: the answer (images as files), the reward the answer reported, done, seconds since the
#: episode began when the call was sent, and the call's own seconds.
STEP_FIELDS: Final = ("step", "by", "tool", "arguments", "result", "reward", "done", "t", "latency")
#: What ended an episode: the remote said done; the agent returned (or its host exited);
#: the step or time budget ran out; the agent raised (or its host failed).
STATUSES: Final = ("done", "agent_stopped", "step_budget", "time_budget", "error")
STEPS_FILE: Final = "steps.jsonl"
EPISODE_FILE: Final = "episode.json"
TRAJECTORIES: Final = "trajectories"
_EXTENSIONS: Final = {"image/png": "png", "image/jpeg": "jpg"}


class TrajectoryError(ValueError):
    """A folder that is not (or not yet) what ``eval`` writes; the message says which file."""


def episode_dir(root: str | os.PathLike[str], task: str, seed: int) -> Path:
    return Path(root) / TRAJECTORIES / task / str(seed)


class TrajectoryWriter:
    """Writes one episode's trajectory as it happens: each step's line is flushed as it is
    recorded, so a run that dies keeps what was done (without ``episode.json``)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lines = open(self.folder / STEPS_FILE, "wb")  # noqa: SIM115 (closed in finish)
        self.count = 0

    def record(self, by: str, tool: str, arguments: dict[str, Any], result: dict[str, Any] | None,
               reward: float, done: bool, t: float, latency: float) -> None:
        """One call and its answer (``result`` None: the call got no answer)."""
        kept = _images_to_files(result, self.folder, self.count) if result is not None else None
        line = {"step": self.count, "by": by, "tool": tool, "arguments": arguments, "result": kept,
                "reward": reward, "done": done, "t": round(t, 6), "latency": round(latency, 6)}
        self._lines.write(orjson.dumps(line) + b"\n")
        self._lines.flush()
        self.count += 1

    def finish(self, row: dict[str, Any]) -> None:
        self._lines.close()
        (self.folder / EPISODE_FILE).write_bytes(orjson.dumps(row, option=orjson.OPT_INDENT_2))


def _images_to_files(result: dict[str, Any], folder: Path, step: int) -> dict[str, Any]:
    content = []
    for k, item in enumerate(result.get("content") or ()):
        if isinstance(item, dict) and item.get("type") == "image" and isinstance(item.get("data"), str):
            mime = str(item.get("mimeType", "image/png"))
            name = f"{step:06d}-{k}.{_EXTENSIONS.get(mime, 'bin')}"
            (folder / name).write_bytes(base64.b64decode(item["data"]))
            item = {key: value for key, value in item.items() if key != "data"} | {"file": name}
        content.append(item)
    return {**result, "content": content}


def write_results(root: str | os.PathLike[str], run: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """``results.csv`` and ``results.json`` (with a per-task summary)."""
    root = Path(root)
    with open(root / "results.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, RESULT_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    tasks: dict[str, dict[str, Any]] = {}
    latencies: dict[str, list[float]] = {}
    for row in rows:
        summary = tasks.setdefault(row["task"], {"episodes": 0, "successes": 0, "reward": 0.0})
        summary["episodes"] += 1
        summary["successes"] += bool(row["success"])
        summary["reward"] += float(row["reward"])
        if row.get("latency_p50_ms") is not None:
            latencies.setdefault(row["task"], []).append(float(row["latency_p50_ms"]))
    for task, summary in tasks.items():
        summary["success_rate"] = summary["successes"] / summary["episodes"]
        summary["mean_reward"] = summary.pop("reward") / summary["episodes"]
        summary["latency_p50_ms"] = float(np.median(latencies[task])) if task in latencies else None
    (root / "results.json").write_bytes(orjson.dumps(
        {"run": run, "episodes": rows, "tasks": tasks}, option=orjson.OPT_INDENT_2))


# Reading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One line of ``steps.jsonl``."""

    folder: Path
    line: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        if name in STEP_FIELDS:
            return self.line.get(name)
        raise AttributeError(name)

    @property
    def info(self) -> dict[str, Any] | None:
        """The answer's JSON text (reward, done, episode_id, ...), parsed; None without one."""
        for item in reversed((self.line.get("result") or {}).get("content") or ()):
            if item.get("type") == "text":
                try:
                    parsed = orjson.loads(item["text"])
                except orjson.JSONDecodeError:
                    return None
                return parsed if isinstance(parsed, dict) else None
        return None

    @property
    def is_error(self) -> bool:
        return bool((self.line.get("result") or {}).get("isError"))

    @property
    def image_files(self) -> list[Path]:
        return [self.folder / item["file"] for item in (self.line.get("result") or {}).get("content") or ()
                if item.get("type") == "image" and "file" in item]

    def images(self) -> list[np.ndarray]:
        """The answer's screenshots as HxWx3 uint8 arrays (needs Pillow)."""
        from PIL import Image

        out = []
        for path in self.image_files:
            with Image.open(io.BytesIO(path.read_bytes())) as image:
                out.append(np.asarray(image.convert("RGB")))
        return out


@dataclass
class Trajectory:
    """One episode: its row (``episode.json``), the harness's reset and the agent's steps."""

    folder: Path
    row: dict[str, Any]
    reset: Step | None
    steps: list[Step] = field(default_factory=list)

    @property
    def task(self) -> str:
        return str(self.row["task"])

    @property
    def seed(self) -> int:
        return int(self.row["seed"])


def open_trajectory(folder: str | os.PathLike[str]) -> Trajectory:
    """The trajectory in ``folder`` (``trajectories/<task>/<seed>``)."""
    folder = Path(folder)
    done = folder / EPISODE_FILE
    if not done.is_file():
        raise TrajectoryError(f"{folder} has no {EPISODE_FILE}: not a trajectory eval finished "
                              "(an episode cut short keeps only its steps.jsonl)")
    row = orjson.loads(done.read_bytes())
    steps = [Step(folder, orjson.loads(line)) for line in (folder / STEPS_FILE).read_bytes().splitlines()
             if line.strip()]
    reset = next((s for s in steps if s.line.get("by") == "harness"), None)
    return Trajectory(folder, row, reset, [s for s in steps if s.line.get("by") == "agent"])


@dataclass
class Results:
    """A run ``eval`` wrote: its settings, one row per episode, the per-task summary."""

    root: Path
    run: dict[str, Any]
    episodes: list[dict[str, Any]]
    tasks: dict[str, dict[str, Any]]

    def trajectory(self, task: str, seed: int) -> Trajectory:
        return open_trajectory(episode_dir(self.root, task, seed))

    def trajectories(self) -> Iterator[Trajectory]:
        for row in self.episodes:
            yield self.trajectory(row["task"], int(row["seed"]))


def load_results(root: str | os.PathLike[str]) -> Results:
    """The run in ``root`` (the folder given to ``eval --out``)."""
    root = Path(root)
    path = root / "results.json"
    if not path.is_file():
        raise TrajectoryError(f"{root} has no results.json: give the folder universe-remote eval "
                              "wrote (--out)")
    data = orjson.loads(path.read_bytes())
    return Results(root, data["run"], data["episodes"], data["tasks"])
