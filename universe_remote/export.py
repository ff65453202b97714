"""``universe-remote export DIR --minari NAME``: a recording as a Minari dataset
(:mod:`recordings.minari_export`; docs/recording.md says how input becomes actions)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from recordings.format import FormatError
    from recordings.minari_export import DatasetNameError, export_minari, export_trajectories
    from recordings.trajectories import TrajectoryError

    try:
        if (Path(args.recording) / "results.json").is_file():  # universe-remote eval --out DIR
            if args.episode:
                raise RuntimeError("--episode picks a recording's episodes; an eval run takes --task")
            dataset = export_trajectories(args.recording, args.minari, args.task or None)
        else:
            dataset = export_minari(args.recording, args.minari, args.episode or None)
    except (FormatError, RuntimeError, DatasetNameError, TrajectoryError) as exc:
        print(f"universe-remote: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # Minari refuses the name (taken, malformed)
        print(f"universe-remote: Minari refused dataset {args.minari!r}: {exc}", file=sys.stderr)
        return 2
    print(f"exported {dataset.total_episodes} episodes, {dataset.total_steps} steps to Minari "
          f"dataset {args.minari} (minari.load_dataset({args.minari!r}))")
    return 0


def add_commands(sub: Any) -> None:
    """Add ``export`` to the ``universe-remote`` subparsers."""
    export = sub.add_parser(
        "export", help="write a recording (serve --record DIR) or an eval run's trajectories "
        "(eval --out DIR) as an offline-RL dataset",
        description="Write the episodes recorded in DIR as a Minari dataset: observations are "
        "the frames, actions the held keys and pointer per step, rewards and terminations "
        "per step (docs/recording.md); for an eval run, the screenshots, each tool call as JSON "
        "text and the answers' rewards (docs/computer-use.md). Needs pip install "
        "'universe-remote[minari]'; the dataset goes where Minari keeps them "
        "($MINARI_DATASETS_PATH, else ~/.minari/datasets).",
    )
    export.add_argument("recording", metavar="DIR",
                        help="a directory serve --record or universe-remote eval --out wrote")
    export.add_argument("--minari", required=True, metavar="NAME",
                        help="the dataset's name: [NAMESPACE/]NAME-vN, e.g. catch/human-v0")
    export.add_argument("--episode", type=int, action="append", default=[], metavar="K",
                        help="only episode K (repeatable); default: every episode")
    export.add_argument("--task", action="append", default=[], metavar="ENV_ID",
                        help="an eval run: only this task's trajectories (repeatable)")
    export.set_defaults(func=_cmd_export)
