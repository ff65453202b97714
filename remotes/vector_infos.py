"""gymnasium's vector info built from the remotes' own infos, a key at a time.

Held apart from :mod:`remotes.vector` because every way a vector steps (the general
lockstep path, the batched lane's steady state, send/recv, real time) builds its info
here, and it is the part of a step's agent cost that grows with the remotes' info keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np

__all__ = ["batch_infos"]

#: Value types gymnasium batches into a typed array (others go in an object array).
_SCALARS: Final = (int, float, bool)

def batch_infos(infos: Sequence[dict[str, Any]], n: int) -> dict[str, Any]:
    """gymnasium's vector info — for each key an array over the ``n`` envs and a ``_key``
    mask of those that have it, nested dicts batched alike, ``final_obs`` an object
    array — built a key at a time (``VectorEnv._add_info`` goes an env and a key at a
    time: a call per key and env, a large part of a step's info cost with many remotes;
    hand-measured, benchmarks/RESULTS.md).

    The array's type is the type of the first env's value, as ``_add_info`` picks it.
    """
    keys: Any
    same = bool(infos) and len(infos) == n
    if same:  # (most steps: every env's info has the same keys)
        keys = infos[0].keys()
        same = all(info.keys() == keys for info in infos)
    if not same:
        keys = {}
        for info in infos:
            keys.update(dict.fromkeys(info))
    out: dict[str, Any] = {}
    whole = np.ones(n, dtype=np.bool_)
    for key in list(keys):
        values = [info[key] for info in infos] if same else [info[key] for info in infos if key in info]
        first = values[0]
        kind = type(first)
        if same and key != "final_obs":
            if kind in _SCALARS:  # (most keys: a Python scalar each: one array made, one mask)
                out[key], out[f"_{key}"] = np.array(values, dtype=kind), whole.copy()
                continue
            if kind is not dict and kind is not np.ndarray and not isinstance(first, np.number):
                column = np.empty(n, dtype=object)  # (a list or None each: texts, instructions)
                for i, value in enumerate(values):
                    column[i] = value
                out[key], out[f"_{key}"] = column, whole.copy()
                continue
        present = [i for i, info in enumerate(infos) if key in info]
        if key == "final_obs":
            array: Any = np.full(n, None, dtype=object)
            for i, value in zip(present, values, strict=True):
                array[i] = value
        elif isinstance(first, dict):
            nested = [info.get(key, {}) if isinstance(info.get(key), dict) else {} for info in infos]
            array = batch_infos(nested, n)
        elif type(first) in _SCALARS or isinstance(first, np.number):
            array = np.zeros(n, dtype=type(first))
            array[present] = values
        elif isinstance(first, np.ndarray):
            array = np.zeros((n, *first.shape), dtype=first.dtype)
            for i, value in zip(present, values, strict=True):
                array[i] = value
        else:
            array = np.full(n, None, dtype=object)
            for i, value in zip(present, values, strict=True):
                array[i] = value
        mask = np.zeros(n, dtype=np.bool_)
        mask[present] = True
        out[key], out[f"_{key}"] = array, mask
    return out
