"""A recording as a Minari dataset (``universe-remote export DIR --minari NAME``), so
offline-RL libraries load it with ``minari.load_dataset(NAME)``.

Observations are the frames (HxWx3 uint8, stored losslessly); rewards and terminations
are the recorded steps'. Minari wants one action per step, and a remote receives any
number of input events per step, from anyone: :func:`step_actions` folds them into the
*state of the input devices* each step was drawn under, a vector of ints::

    [key_0 .. key_{k-1}, pointer_x, pointer_y, buttonmask]

with one entry per key the runtime uses (``meta.json``'s ``keys``, in that order): 1 if
the key was held after the step's events *or went down during them* (a tap within one
frame still shows), else 0; then where the pointer was after them and the buttons held
(a click within one frame shows in the mask likewise). Every source counts (agent, VNC
client, viewer): the game saw them all. The events themselves, with their senders, stay
in the recording (:class:`recordings.Step`).

Needs the ``minari`` extra (``pip install 'universe-remote[minari]'``: Minari with its
arrow storage; no jax).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from .reader import Episode, open_recording

#: Minari's dataset ids: ``[namespace/]name-vN``. Minari's own pattern leaves the version
#: optional and then fails deep inside (``int(None)``) when it is missing; ours requires it.
DATASET_NAME: Final = re.compile(
    r"(?:(?P<namespace>[-\w][-\w/]*[-\w])/)?(?P<name>[-\w]+?)-v(?P<version>\d+)"
)


class DatasetNameError(ValueError):
    """A dataset name Minari cannot take; the message shows the form it needs."""


def _minari() -> tuple[Any, Any, Any]:
    """gymnasium, minari and Minari's EpisodeBuffer, imported when an export runs (the
    extra is optional); a RuntimeError saying what to install when they are not there."""
    try:
        import gymnasium as gym
        import minari
        from minari.data_collector import EpisodeBuffer
    except ImportError as exc:
        raise RuntimeError(
            f"exporting to Minari needs the minari extra ({exc}): pip install 'universe-remote[minari]'"
        ) from None
    return gym, minari, EpisodeBuffer


def check_dataset_name(name: str) -> None:
    """Raise :class:`DatasetNameError` unless ``name`` is ``[namespace/]name-vN``."""
    if DATASET_NAME.fullmatch(name):
        return
    hint = ""
    stem = name.strip().strip("/")
    if stem and re.fullmatch(r"[-\w/]+", stem) and not re.search(r"-v\d+$", stem):
        hint = f" (here: {stem}-v0)"
    raise DatasetNameError(
        f"{name!r} is not a Minari dataset name: write NAME-vN, a name of letters, digits, "
        f"'-' and '_' and a version{hint}, optionally under a namespace (catch/human-v0); "
        "Minari versions every dataset"
    )


def step_actions(episode: Episode) -> np.ndarray:
    """One action per step after the first: (steps - 1, keys + 3) int64 (module doc)."""
    keys = list(episode.meta.get("keys", ()))
    index = {key: i for i, key in enumerate(keys)}
    held = np.zeros(len(keys), np.int64)
    pointer = np.zeros(3, np.int64)
    out = np.zeros((max(len(episode.steps) - 1, 0), len(keys) + 3), np.int64)
    for row, step in zip(out, episode.steps[1:], strict=True):
        pressed = np.zeros(len(keys), np.int64)
        clicked = 0
        for event in step.events:
            if event.kind == "KeyEvent":
                key, down = event.args
                if key in index:
                    held[index[key]] = int(down)
                    pressed[index[key]] |= int(down)
            else:
                pointer[:] = event.args
                clicked |= int(event.args[2])
        row[: len(keys)] = held | pressed
        row[len(keys) :] = pointer
        row[-1] |= clicked
    return out


def export_minari(
    path: str | os.PathLike[str], name: str, episodes: Sequence[int] | None = None,
    *, description: str | None = None,
) -> Any:
    """Write the recording at ``path`` (or its ``episodes``, by number) as the Minari
    dataset ``name``; the dataset. Episodes with no step after their first frame are left
    out; those the game did not end are truncated at their last step.

    Raises :class:`DatasetNameError` for a name Minari cannot take (after the recording is
    found, before Minari runs), ``RuntimeError`` when Minari is missing or fails to write
    the dataset."""
    recording = open_recording(path)
    chosen = recording.select(episodes or (), min_steps=2, use="export")
    check_dataset_name(name)
    gym, minari, EpisodeBuffer = _minari()
    first = chosen[0]
    height, width, _ = first.shape
    keys = len(first.meta.get("keys", ()))
    high = np.array([1] * keys + [width - 1, height - 1, 255], np.int64)
    action_space = gym.spaces.Box(0, high, dtype=np.int64)
    observation_space = gym.spaces.Box(0, 255, first.shape, np.uint8)
    buffers: list[Any] = []
    for episode in chosen:
        steps = episode.steps[1:]
        done = [s.done for s in steps]
        truncated = [False] * len(steps)
        if not done[-1]:
            truncated[-1] = True
        buffers.append(EpisodeBuffer(
            id=len(buffers), seed=episode.seed, observations=list(episode.frame_array()),
            actions=list(step_actions(episode)), rewards=[s.reward for s in steps],
            terminations=done, truncations=truncated,
        ))
    about = description or (
        f"{first.env_id} episodes recorded by universe-remote (actions: held keys "
        f"{first.meta.get('keys', [])}, pointer x, y, buttonmask)"
    )
    with warnings.catch_warnings():  # no env to name: Minari warns of each missing part
        warnings.filterwarnings("ignore", category=UserWarning, module="minari")
        try:
            return minari.create_dataset_from_buffers(
                name, buffers, observation_space=observation_space, action_space=action_space,
                algorithm_name="universe-remote recording", description=about,
                data_format="arrow", jpeg_encoding=False,  # lossless frames
            )
        except (TypeError, KeyError, AttributeError, OSError) as exc:  # a failure inside Minari
            raise RuntimeError(
                f"Minari could not write dataset {name!r}: {type(exc).__name__}: {exc}"
            ) from exc


def trajectory_arrays(trajectory: Any) -> tuple[list[np.ndarray], list[str]]:
    """An eval trajectory as Minari's lists: the observations (the reset's screenshot, then
    after each step the last screenshot seen) and the actions (each tool call as JSON)."""
    import orjson

    first = trajectory.reset.images() if trajectory.reset is not None else []
    if not first:
        raise RuntimeError(f"{trajectory.folder}: the reset's answer has no screenshot to start from")
    observations, actions = [first[-1]], []
    for step in trajectory.steps:
        images = step.images()
        observations.append(images[-1] if images else observations[-1])
        actions.append(orjson.dumps({"tool": step.tool, "arguments": step.arguments},
                                    option=orjson.OPT_SORT_KEYS).decode())
    return observations, actions


def export_trajectories(
    path: str | os.PathLike[str], name: str, tasks: Sequence[str] | None = None,
    *, description: str | None = None,
) -> Any:
    """Write the trajectories of the eval run at ``path`` (``universe-remote eval --out``; only
    ``tasks`` when given) as the Minari dataset ``name``: observations are the screenshots
    (one size for every episode), actions each tool call as JSON text
    (``{"arguments": ..., "tool": ...}``), rewards the answers' ``reward``; an episode the
    remote ended is terminated, any other truncated. Episodes without a step are left out."""
    from .trajectories import load_results

    results = load_results(path)
    chosen = [t for t in results.trajectories() if t.steps and (not tasks or t.task in tasks)]
    if not chosen:
        raise RuntimeError(f"{path}: no trajectory with a step{' of ' + ', '.join(tasks) if tasks else ''}")
    check_dataset_name(name)
    gym, minari, EpisodeBuffer = _minari()
    episodes = [(t, *trajectory_arrays(t)) for t in chosen]
    shape = episodes[0][1][0].shape
    for trajectory, observations, _ in episodes:
        if any(o.shape != shape for o in observations):
            raise RuntimeError(f"{trajectory.folder}: screenshots of another size than {shape}: export "
                               "one kind of task at a time (--task)")
    charset = "".join(sorted({c for _, _, actions in episodes for a in actions for c in a}))
    longest = max(len(a) for _, _, actions in episodes for a in actions)
    buffers: list[Any] = []
    for trajectory, observations, actions in episodes:
        rewards = [float(s.reward or 0.0) for s in trajectory.steps]
        done = bool(trajectory.steps[-1].done)
        buffers.append(EpisodeBuffer(
            id=len(buffers), seed=trajectory.seed, observations=observations, actions=actions,
            rewards=rewards, terminations=[False] * (len(actions) - 1) + [done],
            truncations=[False] * (len(actions) - 1) + [not done],
        ))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="minari")
        try:
            return minari.create_dataset_from_buffers(
                name, buffers, observation_space=gym.spaces.Box(0, 255, shape, np.uint8),
                action_space=gym.spaces.Text(max_length=longest, min_length=0, charset=charset),
                algorithm_name=f"universe-remote eval: {results.run.get('agent', '')}",
                description=description or "universe-remote eval trajectories of "
                + ", ".join(sorted({t.task for t in chosen})),
                data_format="arrow", jpeg_encoding=False,
            )
        except (TypeError, KeyError, AttributeError, OSError) as exc:
            raise RuntimeError(
                f"Minari could not write dataset {name!r}: {type(exc).__name__}: {exc}"
            ) from exc
